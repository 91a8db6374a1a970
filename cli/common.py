"""Shared CLI plumbing: consoles, JSON output, and the one funnel that turns every error into one
line on stderr and a documented exit code (README "Exit codes"; errors.py).

    AttnselError            its own message, its exit code (1 verdict, 2 bad input, 3 environment)
    click usage errors      one line, exit 2 (never click's multi-line usage box)
    KeyboardInterrupt       "interrupted", exit 130; --json output is written whole or not at all
    stdout unwritable       one line, exit 2 (/dev/full, a closed stdout); a reader that left: 141
    anything else           one line naming the exception and where to report it, exit 70;
                            ATTNSEL_DEBUG=1 prints the traceback first
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import io
import json
import os
import shutil
import sys
import traceback
from typing import Any, Callable, Iterator, Optional

import typer
from rich.console import Console

from attnsel.errors import (
    DEBUG_ENV,
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    REPORT_TO,
    AttnselError,
    OutputUnwritable,
)
from attnsel import __version__

EXIT_SIGPIPE = 141  # what a shell reports for a process killed by SIGPIPE (`attnsel explain | head`)
_MAX_LINE = 400  # an error line stays readable whatever the exception carried


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


def stdout_console() -> Console:
    """Rich console for human output; plain text when NO_COLOR is set or stdout is not a TTY."""
    from attnsel.reports.narrow import FittingConsole

    return FittingConsole(no_color=_no_color(), highlight=False, soft_wrap=False)  # too-wide tables stacked


def terminal_width() -> Optional[int]:
    """The width plain-text output wraps at: COLUMNS when set (as rich reads it), else the
    terminal's when stdout is one; None for a pipe (one line per message, for grep)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def stderr_console() -> Console:
    return Console(stderr=True, no_color=_no_color(), highlight=False)


def drop_unusable_terminal_size() -> None:
    """COLUMNS/LINES that no terminal has are dropped before anything reads them: rich (our output
    and Typer's help) int()s any digit string, and one of thousands of digits raises."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name, "")
        if value.isdigit() and len(value) > 4:
            del os.environ[name]


def print_json(obj: Any) -> None:
    """--json prints exactly one JSON document on stdout and nothing else: whole or not at all.
    A Ctrl-C while it is written waits until the document is out (then exits 130)."""
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"
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
    caught: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda _signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            _deliver_sigint(previous, caught[0])


def _deliver_sigint(handler: Any, frame: Any) -> None:
    """What the handler in place before the block would have done with the held-back Ctrl-C."""
    import signal

    if callable(handler):
        handler(signal.SIGINT, frame)  # Python's default_int_handler raises KeyboardInterrupt
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def fail(message: str, code: int) -> "typer.Exit":
    """Print a one-line error on stderr and return the Exit to raise."""
    line = " ".join(str(message).split())
    if len(line) > _MAX_LINE * 4:
        line = line[: _MAX_LINE * 4] + " ..."
    _write_err(f"error: {line}\n")
    return typer.Exit(code)


def _write_err(text: str) -> None:
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # stderr itself cannot be written: the exit code still says it
        pass


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _where(exc: BaseException) -> str:
    """The innermost frame of ours (attnsel's own file and line) the exception passed through."""
    import attnsel

    root = os.path.dirname(os.path.abspath(attnsel.__file__)) + os.sep
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(root)]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "unknown place"
    parts = frame.filename.replace(os.sep, "/").split("/")
    return f"{'/'.join(parts[-2:])}:{frame.lineno}"


def internal_error(exc: BaseException) -> "typer.Exit":
    """The safety net: an exception nobody foresaw. One line, exit 70, never read as a verdict."""
    if _debug():
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    detail = " ".join(str(exc).split())[:_MAX_LINE]
    return fail(
        f"internal error {type(exc).__name__}{': ' + detail if detail else ''} (at {_where(exc)}). "
        f"This is a bug in attnsel {__version__}, not a verdict on your setup (exit {EXIT_INTERNAL}): please report "
        f"it to {REPORT_TO} with the command you ran; {DEBUG_ENV}=1 prints the traceback",
        EXIT_INTERNAL,
    )


def _usage_error(exc: Exception) -> "typer.Exit":
    """click/Typer parse errors as one line (their own text), with where to look for help."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return fail(f"{exc.format_message()}{where}", getattr(exc, "exit_code", EXIT_BAD_INPUT))


def _is_click_error(exc: BaseException) -> bool:
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def exit_for(exc: BaseException) -> "typer.Exit":
    """Every exception a command can end with -> the Exit to raise (its line already on stderr)."""
    if isinstance(exc, typer.Exit):
        return exc
    if isinstance(exc, AttnselError):
        return fail(exc.message, exc.exit_code)
    if isinstance(exc, (KeyboardInterrupt, typer.Abort)):
        return fail("interrupted", EXIT_INTERRUPTED)
    if isinstance(exc, BrokenPipeError):
        return typer.Exit(EXIT_SIGPIPE)  # the reader left: nothing to say, as a SIGPIPE death says nothing
    if type(exc).__name__ == "NoArgsIsHelpError":  # `attnsel` alone: the help text, not an error line
        exc.show()
        return typer.Exit(exc.exit_code)
    if _is_click_error(exc):
        return _usage_error(exc)
    if isinstance(exc, RecursionError):
        return fail("input nested too deeply to read (a JSON document thousands of levels deep?)", EXIT_BAD_INPUT)
    if isinstance(exc, OSError) and exc.filename is not None:
        # a path the user gave that the boundary checks did not foresee (they name most cases)
        return fail(f"cannot use {exc.filename}: {exc.strerror or exc}", EXIT_BAD_INPUT)
    return internal_error(exc)


def handle_errors(func: Callable) -> Callable:
    """Decorator for commands: every exception -> one line on stderr + its exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except BaseException as exc:  # noqa: BLE001 -- the funnel: each kind gets its own line and code
            if isinstance(exc, (SystemExit, GeneratorExit)):
                raise
            raise exit_for(exc) from None

    return wrapper


# ---------------------------------------------------------------------------------------------
# stdout that cannot be written


class GuardedStdout:
    """Wraps sys.stdout: a failed write (ENOSPC on /dev/full, EBADF on a closed descriptor, EIO)
    becomes OutputUnwritable (one line, exit 2) and later writes are dropped, so neither our own
    code nor Python's final flush prints a traceback. Everything else passes through."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._broken: OSError | None = None

    def _failed(self, exc: OSError) -> None:
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


def _discard_stream(stream: Any) -> None:
    """Point a broken stdout at /dev/null so the interpreter's last flush has nowhere to fail."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    previous = sys.stdout
    sys.stdout = GuardedStdout(previous)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = previous


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
