"""The standard streams of every command, without Typer or rich: JSON on stdout (whole or not at
all), the one error line on stderr, and stdout/stderr that are closed, full, or cannot hold our
glyphs. cli/common.py offers these to the Typer commands; `attnsel probe` uses them without
importing Typer at all (cli/entry.py, docs/probe.md "Speed")."""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from attnsel.errors import OutputUnwritable

if TYPE_CHECKING:
    from types import FrameType
    from typing import TextIO

    from rich.console import Console

_MAX_LINE = 400  # an error line stays readable whatever the exception carried


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


def stdout_console() -> Console:
    """Rich console for human output; plain text when NO_COLOR is set or stdout is not a TTY."""
    from attnsel.reports.narrow import FittingConsole

    return FittingConsole(no_color=_no_color(), highlight=False, soft_wrap=False)  # too-wide tables stacked


def terminal_width() -> int | None:
    """The width plain-text output wraps at: COLUMNS when set (as rich reads it), else the
    terminal's when stdout is one; None for a pipe (one line per message, for grep)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def drop_unusable_terminal_size() -> None:
    """COLUMNS/LINES that no terminal has are dropped before anything reads them: rich (our output
    and Typer's help) int()s any digit string, and one of thousands of digits raises."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name, "")
        if value.isdigit() and len(value) > 4:
            del os.environ[name]


def print_json(obj: object) -> None:
    """--json prints exactly one JSON document on stdout and nothing else: whole or not at all.
    A Ctrl-C while it is written waits until the document is out (then exits 130)."""
    text = json_document(obj)
    with sigint_deferred():
        sys.stdout.write(text)
        sys.stdout.flush()


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back while the block runs (main thread); one that came meanwhile is handled
    when it ends. A Python-level handler, not a signal mask: a process-directed SIGINT goes to any
    thread that does not block it, so masking the main thread alone let it through whenever a
    library had started a thread. The cost: a reader that stops reading stalls Ctrl-C until it
    reads or goes away -- a torn JSON document would be read as a verdict, a late Ctrl-C is not."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[FrameType | None] = []
    previous = signal.signal(signal.SIGINT, lambda _signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            _deliver_sigint(previous, caught[0])


def _deliver_sigint(handler: object, frame: FrameType | None) -> None:
    """What the handler in place before the block would have done with the held-back Ctrl-C."""
    import signal

    if callable(handler):
        handler(signal.SIGINT, frame)  # Python's default_int_handler raises KeyboardInterrupt
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)


def json_document(obj: object, default: Callable[[object], object] | None = None) -> str:
    """A JSON document as commands print it (files.py json_text: RFC 8259, never NaN or Infinity)."""
    from attnsel.files import json_text

    return json_text(obj, default=default or _json_default) + "\n"


def _json_default(value: object) -> object:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def write_error_line(message: str) -> None:
    """The one-line error on stderr (`error: ...`), whatever the message held (newlines, length)."""
    line = " ".join(str(message).split())
    if len(line) > _MAX_LINE * 4:
        line = line[: _MAX_LINE * 4] + " ..."
    _write_err(f"error: {line}\n")


def _write_err(text: str) -> None:
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # stderr itself cannot be written: the exit code still says it
        pass


# ---------------------------------------------------------------------------------------------
# stdout that cannot be written


class GuardedStdout:
    """Wraps sys.stdout: a failed write (ENOSPC on /dev/full, EBADF on a closed descriptor, EIO)
    becomes OutputUnwritable (one line, exit 2) and later writes are dropped, so neither our own
    code nor Python's final flush prints a traceback. Everything else passes through."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self._broken: OSError | None = None

    def _failed(self, exc: OSError) -> NoReturn:
        self._broken = exc
        _discard_stream(self._stream)
        if exc.errno == errno.EPIPE:
            raise BrokenPipeError(errno.EPIPE, "the reader of stdout went away") from None
        raise OutputUnwritable(f"cannot write to stdout: {exc.strerror or exc}") from None

    def write(self, text: str) -> int:
        if self._broken is not None:
            return len(text)
        if self._stream is None:
            self._failed(OSError(errno.EBADF, "stdout is closed"))
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._failed(exc)
        return 0

    def flush(self) -> None:
        if self._broken is not None or self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            self._failed(exc)

    def isatty(self) -> bool:
        return bool(self._stream is not None and self._broken is None and self._stream.isatty())

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _discard_stream(stream: TextIO | None) -> None:
    """Point a broken stdout at /dev/null so the interpreter's last flush has nowhere to fail."""
    if stream is None:
        return
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


class GuardedStderr:
    """Wraps sys.stderr: a line that cannot be written (`2>/dev/full`, a closed descriptor) is dropped,
    and the descriptor pointed at /dev/null, so that neither a progress line (exit 70 before) nor the
    interpreter's last flush (exit 120) changes the exit code: the exit code still says everything."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self._broken = stream is None

    def _drop(self) -> None:
        self._broken = True
        _discard_stream(self._stream)

    def write(self, text: str) -> int:
        if not self._broken and self._stream is not None:  # None: broken from the start
            try:
                return self._stream.write(text)
            except (OSError, ValueError):
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self._broken and self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._drop()

    def isatty(self) -> bool:
        return bool(not self._broken and self._stream is not None and self._stream.isatty())

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """stdout and stderr guarded for the command's run (GuardedStdout, GuardedStderr)."""
    previous, previous_err = sys.stdout, sys.stderr
    sys.stdout = GuardedStdout(previous)  # type: ignore[assignment]
    sys.stderr = GuardedStderr(previous_err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = previous, previous_err
        if previous_err is not None:  # what is still buffered goes out now, or to /dev/null
            try:
                previous_err.flush()
            except (OSError, ValueError):
                _discard_stream(previous_err)


def reserve_standard_streams() -> None:
    """A command started with stdout or stderr closed (`attnsel probe >&-`): hold descriptors 1
    and 2 with /dev/null so no file we open (or a worker inherits) lands on them; writing to a
    closed stdout still fails with one line (GuardedStdout sees the None Python left there)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                opened = os.open(os.devnull, os.O_RDWR)
                if opened != fd:
                    os.dup2(opened, fd)
                    os.close(opened)
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 -- lives as long as the process


# What a terminal or pipe that cannot show our glyphs gets instead (PYTHONIOENCODING=ascii, a
# latin-1 locale): the same meaning in ASCII, "?" for anything else, never a UnicodeEncodeError.
ASCII_GLYPHS = {"·": "-", "→": "->", "←": "<-", "≈": "~", "≥": ">=", "≤": "<=", "×": "x", "…": "...", "—": "-",
                "–": "-", "✓": "ok", "✗": "x", "─": "-", "━": "-", "│": "|", "┃": "|", "µ": "u", "±": "+/-",
                "“": '"', "”": '"', "‘": "'", "’": "'", "\u25c0": "<", "\u2705": "ok", "\u274c": "x",
                "\u26a0": "!", "\ufe0f": "", "\u00a7": "S"}


def _ascii_glyphs(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII_GLYPHS.get(ch, "?") for ch in text), error.end


codecs.register_error("attnsel-ascii", _ascii_glyphs)


def degrade_unencodable_glyphs() -> None:
    """stdout / stderr whose encoding cannot hold "·" or "→" write ASCII stand-ins for them."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        if codecs.lookup(encoding).name.startswith("utf") or not hasattr(stream, "reconfigure"):
            continue
        with contextlib.suppress(ValueError, OSError):
            stream.reconfigure(errors="attnsel-ascii")


class _ClosedStdout(io.StringIO):
    """What sys.stdout is when the command started with descriptor 1 closed: every write fails
    as writing to a closed descriptor does (EBADF), so GuardedStdout reports it in one line."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


def start_command(argv: list[str]) -> None:
    """What every command does before it parses `argv`: descriptors 0-2 held, glyphs the streams
    cannot encode degraded, and SIGPIPE's default, so that `attnsel explain | head` ends as a Unix
    tool killed by SIGPIPE (shell status 141) instead of click's exit 1, which here means "vLLM would
    raise" / "a check failed". Not for `tune` and `verify`, whose workers must be shut down by the
    parent itself (`tune --dry-run` starts none)."""
    import signal

    reserve_standard_streams()
    degrade_unencodable_glyphs()
    quiet_python_warnings()
    starts_workers = bool({"tune", "verify"} & set(argv)) and "--dry-run" not in argv
    if hasattr(signal, "SIGPIPE") and not starts_workers:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def quiet_python_warnings() -> None:
    """Python's warnings (a library's DeprecationWarning, pandas' FutureWarning) never reach stderr,
    whose lines are ours (README: errors are one line): ATTNSEL_DEBUG=1 shows them, one line each."""
    import warnings

    from attnsel.errors import DEBUG_ENV

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        if os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no"):
            _write_err(f"debug: {category.__name__}: {' '.join(str(message).split())} ({filename}:{lineno})\n")

    warnings.showwarning = show
