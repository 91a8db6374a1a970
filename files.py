"""Reading what a user points us at, bounded: a path, `-` (standard input), a /dev/fd pipe.

Every input file goes through `read_input()`: the work is bounded by a size limit and (for pipes)
a time limit, never by the input. Regular files, pipes and FIFOs (`--model <(cat config.json)`,
`mkfifo`) are read; devices and sockets are refused; a FIFO nobody writes to ends at once as
empty instead of waiting forever. Path problems (too long, a NUL byte, a loop of links, no
permission) are one line each, exit 2. `parse_json()` turns what was read into JSON with the same
care: nesting too deep, numbers of thousands of digits and invalid JSON are one line each.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import select
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnsel.errors import UserInputError

STDIN = "-"
READ_TIMEOUT_S = 60.0  # a pipe that stays silent this long ends the read (a writer that never writes)
_CHUNK = 1 << 16


@dataclass(frozen=True)
class PathInfo:
    """What a user's path is, from one stat(): "file" | "dir" | "pipe" | "missing"."""

    path: str
    kind: str


def path_info(path: str, flag: str = "path") -> PathInfo:
    """stat() a user's path, turning every way it can fail into a one-line error (or "missing")."""
    if "\0" in path:
        raise UserInputError(f"{flag} {shown_path(path)} contains a NUL byte: no file can have that name")
    try:
        mode = os.stat(os.path.expanduser(path)).st_mode
    except FileNotFoundError:
        return PathInfo(path, "missing")
    except NotADirectoryError:
        return PathInfo(path, "missing")
    except OSError as exc:
        raise UserInputError(f"cannot use {flag} {shown_path(path)}: {_why(exc)}") from None
    if stat.S_ISREG(mode):
        return PathInfo(path, "file")
    if stat.S_ISDIR(mode):
        return PathInfo(path, "dir")
    if stat.S_ISFIFO(mode):
        return PathInfo(path, "pipe")
    kind = "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else \
        "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise UserInputError(f"{flag} {shown_path(path)} is {kind}, not a file or a folder")


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is longer than the file system allows"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (a folder on the way, or the file, is not readable by you)"
    return exc.strerror or str(exc)


def shown_path(path: str, limit: int = 120) -> str:
    text = repr(path)
    return text if len(text) <= limit else text[: limit - 5] + "...'" + f" ({len(path)} characters)"


def read_input(path: str, *, what: str, limit: int, flag: str = "path", timeout: float = READ_TIMEOUT_S) -> str:
    """The UTF-8 text of a file, a pipe or standard input (`-`), at most `limit` bytes.

    `what` names the expected content in messages ("a config.json"). Directories are the
    caller's business (a model folder, a tune folder): here they are an error.
    """
    if path == STDIN:
        return _decode(_read_stdin(what, limit, timeout), "standard input", what)
    info = path_info(path, flag)
    if info.kind == "missing":
        raise UserInputError(f"{flag} {shown_path(path)} does not exist")
    if info.kind == "dir":
        raise UserInputError(f"{flag} {shown_path(path)} is a folder, not {what}")
    try:
        if info.kind == "pipe":
            fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK)
            try:
                data = _read_fd(fd, limit, timeout, f"{flag} {shown_path(path)}", what)
            finally:
                os.close(fd)
        else:
            with open(os.path.expanduser(path), "rb") as fh:
                data = fh.read(limit + 1)
    except OSError as exc:
        raise UserInputError(f"cannot read {flag} {shown_path(path)}: {_why(exc)}") from None
    if len(data) > limit:
        raise UserInputError(f"{flag} {shown_path(path)} is larger than {_size(limit)}: not {what}")
    return _decode(data, shown_path(path), what)


def _read_stdin(what: str, limit: int, timeout: float) -> bytes:
    stream = sys.stdin
    if stream is None:
        raise UserInputError(f"`-` reads {what} from standard input, but standard input is closed")
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:  # an in-memory stdin (tests, embedding): read it, bounded
        raw = stream.buffer.read(limit + 1) if hasattr(stream, "buffer") else stream.read(limit + 1).encode()
    else:
        if os.isatty(fd):
            raise UserInputError(f"`-` reads {what} from standard input, but standard input is a terminal: "
                                 f"pipe the file in (`< config.json`, or `cat config.json | ...`)")
        raw = _read_fd(fd, limit, timeout, "standard input", what)
    if len(raw) > limit:
        raise UserInputError(f"standard input holds more than {_size(limit)}: not {what}")
    return raw


def _read_fd(fd: int, limit: int, timeout: float, where: str, what: str) -> bytes:
    """Read a descriptor to its end, at most limit + 1 bytes, giving up after `timeout` seconds
    without data. A non-blocking descriptor is read first: a FIFO that no writer ever opened
    reads as end-of-file at once, where select() would wait (Linux reports no hang-up for it)."""
    chunks: list[bytes] = []
    size = 0
    eager = stat.S_ISREG(os.fstat(fd).st_mode) or not os.get_blocking(fd)
    while size <= limit:
        chunk = _try_read(fd) if eager else None
        if chunk is None:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise UserInputError(f"{where} sent nothing for {timeout:g} s: gave up waiting for {what}")
            chunk = _try_read(fd)
            if chunk is None:
                continue
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _try_read(fd: int) -> bytes | None:
    try:
        return os.read(fd, _CHUNK)
    except BlockingIOError:  # a writer is there, with nothing to say yet
        return None


def _decode(data: bytes, where: str, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserInputError(f"{where} is not a UTF-8 text file: not {what}") from None


def _size(limit: int) -> str:
    return f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit} bytes"


def parse_json(text: str, where: str, what: str) -> Any:
    """json.loads with every way it can fail as one line (exit 2)."""
    if not text.strip():
        raise UserInputError(f"{where} is empty: not {what}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserInputError(f"Invalid JSON in {where} at line {exc.lineno} column {exc.colno}: {exc.msg} "
                             f"(expected {what})") from None
    except RecursionError:
        raise UserInputError(f"{where} nests JSON deeper than it can be read: not {what}") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits (int max str digits)
        raise UserInputError(f"{where} holds a value JSON cannot read here ({_first_line(exc)}): not {what}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).split(";")[0].split("\n")[0]
    return text[:160]


def load_json_file(path: str, *, what: str, limit: int, flag: str = "path") -> Any:
    where = "standard input" if path == STDIN else shown_path(path)
    return parse_json(read_input(path, what=what, limit=limit, flag=flag), where, what)


def check_output_folder(path: str, flag: str = "--output") -> None:
    """A folder we are about to create (or fill): refused in one line before any work starts when
    it is a file, sits under a file, or lies where we may not write. Creates nothing."""
    info = path_info(path, flag)
    if info.kind == "dir":
        if not os.access(os.path.expanduser(path), os.W_OK | os.X_OK):
            raise UserInputError(f"cannot write into {flag} {shown_path(path)}: permission denied")
        return
    if info.kind != "missing":
        raise UserInputError(f"{flag} {shown_path(path)} is a file, not a folder: choose a folder name")
    parent = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserInputError(f"cannot create {flag} {shown_path(path)}: {shown_path(parent)} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserInputError(f"cannot create {flag} {shown_path(path)}: permission denied in {shown_path(parent)}")


def optional_info(path: str, flag: str = "path") -> PathInfo | None:
    """path_info, or None for `-`."""
    return None if path == STDIN else path_info(path, flag)


# ---------------------------------------------------------------------------------------------
# Writing a file the user named


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (the same path, a symlink to it or a hard link)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def write_whole(text: str, output: Path, flag: str = "-o") -> None:
    """Whole or not at all: a temporary file next to the target, renamed over it once written
    (a Ctrl-C or a full disk never leaves half a file under the name). A device or a FIFO the user
    named (/dev/stdout, /dev/full, `mkfifo`) is written in place. Failures: one line, exit 2."""
    not_a_folder = next((p for p in reversed(output.parents) if p.exists() and not p.is_dir()), None)
    if not_a_folder is not None:
        raise UserInputError(f"cannot write {str(output)[:200]!r}: {str(not_a_folder)[:200]} is not a folder; "
                             f"choose another {flag} path")
    missing = next((p for p in reversed(output.parents) if not p.exists()), None)
    if missing is not None:  # a typo in a folder name would otherwise leave new folders behind
        raise UserInputError(f"cannot write {str(output)[:200]!r}: the folder {str(missing)[:200]} does not exist; "
                             f"create it first or choose another {flag} path")
    try:
        if output.is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        if output.exists() and not output.is_file():
            _write_in_place(text, output, flag)
            return
        partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
        try:
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, output)
        finally:
            with contextlib.suppress(OSError):
                partial.unlink()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise UserInputError(f"cannot write {str(output)[:200]!r}: {getattr(exc, 'strerror', None) or exc}; "
                             f"choose another {flag} path") from None


def _write_in_place(text: str, output: Path, flag: str) -> None:
    # non-blocking open: a named pipe nobody reads is refused at once (ENXIO) instead of waiting
    try:
        fd = os.open(output, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserInputError(f"{flag} {str(output)[:200]!r} is a named pipe that nobody reads: start its reader "
                                 "first, or choose a file") from None
        raise
    os.set_blocking(fd, True)
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def json_text(obj: Any, *, default: Any = str, indent: int | None = 2, sort_keys: bool = False) -> str:
    """The one place a JSON document is written (--json on stdout, `report --format json`, tune.json,
    results.jsonl, verify.json): RFC 8259 JSON, never Python's NaN / Infinity. A value that is not
    finite has no JSON spelling and is written as null (readers refuse such values in their inputs:
    reports/tune/loaders.py). No trailing newline (a JSON Lines row is one line)."""
    try:
        return json.dumps(obj, indent=indent, default=default, sort_keys=sort_keys, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: null, the value that says "no number"
        plain = json.loads(json.dumps(obj, default=default))
        return json.dumps(_finite(plain), indent=indent, sort_keys=sort_keys, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
