"""Shared CLI plumbing: the one funnel that turns every error into one line on stderr and a
documented exit code (README "Exit codes"; errors.py). Consoles, JSON output and the guarded
standard streams live in cli/streams.py (no Typer there) and are offered from here too.

    AttnselError            its own message, its exit code (1 verdict, 2 bad input, 3 environment)
    click usage errors      one line, exit 2 (never click's multi-line usage box)
    KeyboardInterrupt       "interrupted", exit 130; --json output is written whole or not at all
    stdout unwritable       one line, exit 2 (/dev/full, a closed stdout); a reader that left: 141
    anything else           one line naming the exception and where to report it, exit 70;
                            ATTNSEL_DEBUG=1 prints the traceback first
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeGuard, TypeVar, cast

import typer
from rich.console import Console

from attnsel import __version__

# the streams' plumbing (no Typer, no rich), offered to the commands from here as well
from attnsel.cli.streams import (  # noqa: F401
    print_json,
    sigint_deferred,
    stdout_console,
    terminal_width,
    write_error_line,
)
from attnsel.errors import (
    DEBUG_ENV,
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    REPORT_TO,
    AttnselError,
)

if TYPE_CHECKING:
    from typer._click import Command  # Typer >= 0.29 vendors click (cli/fast_params.py)

    from attnsel.attention.versions import RuleProfile

EXIT_SIGPIPE = 141  # what a shell reports for a process killed by SIGPIPE (`attnsel explain | head`)
_MAX_LINE = 400  # an error line stays readable whatever the exception carried


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


def stderr_console() -> Console:
    return Console(stderr=True, no_color=_no_color(), highlight=False)


def fail(message: str, code: int) -> typer.Exit:
    """Print a one-line error on stderr and return the Exit to raise."""
    write_error_line(message)
    return typer.Exit(code)


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _where(exc: BaseException) -> str:
    """The innermost frame of ours (attnsel's own file and line) the exception passed through."""
    import attnsel

    root = os.path.dirname(os.path.abspath(attnsel.__file__)) + os.sep
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(root)]
    chosen = ours or frames
    if not chosen:
        return "unknown place"
    frame = chosen[-1]
    parts = frame.filename.replace(os.sep, "/").split("/")
    return f"{'/'.join(parts[-2:])}:{frame.lineno}"


def internal_error(exc: BaseException) -> typer.Exit:
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


class _ClickError(Protocol):
    """click's UsageError / BadParameter as Typer raises them (click itself or Typer's vendored copy)."""

    exit_code: int

    def format_message(self) -> str: ...


class _HelpRequest(Protocol):
    """Typer's NoArgsIsHelpError: shows the help text, with its exit code."""

    exit_code: int

    def show(self) -> None: ...


def _usage_error(exc: _ClickError) -> typer.Exit:
    """click/Typer parse errors as one line (their own text), with where to look for help."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return fail(f"{exc.format_message()}{where}", getattr(exc, "exit_code", EXIT_BAD_INPUT))


def _is_click_error(exc: BaseException) -> TypeGuard[_ClickError]:
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def exit_for(exc: BaseException) -> typer.Exit:
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
        shown = cast(_HelpRequest, exc)
        shown.show()
        return typer.Exit(shown.exit_code)
    if _is_click_error(exc):
        return _usage_error(exc)
    if isinstance(exc, RecursionError):
        return fail("input nested too deeply to read (a JSON document thousands of levels deep?)", EXIT_BAD_INPUT)
    if isinstance(exc, OSError) and exc.filename is not None:
        # a path the user gave that the boundary checks did not foresee (they name most cases)
        return fail(f"cannot use {exc.filename}: {exc.strerror or exc}", EXIT_BAD_INPUT)
    return internal_error(exc)


_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def handle_errors(func: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
    """Decorator for commands: every exception -> one line on stderr + its exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except BaseException as exc:  # noqa: BLE001 -- the funnel: each kind gets its own line and code
            if isinstance(exc, (SystemExit, GeneratorExit)):
                raise
            raise exit_for(exc) from None

    return wrapper


ATTENTION_CONFIG_DOTTED_FLAG = "--attention-config-dotted"


def rewrite_dotted_attention_config(args: list[str]) -> list[str]:
    """vLLM's `--attention-config.KEY VALUE` (and `-ac.KEY=VALUE`) become one hidden option holding
    the merged object (attention/rules/serve_args.py reads it as vLLM does)."""
    import json

    from attnsel.attention.rules import split_dotted_attention_config

    kept, dotted = split_dotted_attention_config(args)
    if dotted is None:
        return kept
    end = kept.index("--") if "--" in kept else len(kept)
    return [*kept[:end], ATTENTION_CONFIG_DOTTED_FLAG, json.dumps(dotted), *kept[end:]]


def dotted_attention_config(text: str | None) -> dict | None:
    """The hidden option's object back (it only ever holds what rewrite_dotted_attention_config wrote)."""
    import json

    return json.loads(text) if text else None


SERVE_NOTE_FLAG = "--serve-line-note"


def _serve_release(own: list[str]) -> RuleProfile | None:
    """The release whose `vllm serve` reads the pasted line: the command's --vllm-version, else the installed
    vLLM, else the newest; None for `all` or a version the command itself will refuse."""
    from attnsel.attention.versions import select_profile

    version = None
    for i, arg in enumerate(own):
        if arg == "--vllm-version" and i + 1 < len(own):
            version = own[i + 1]
        elif arg.startswith("--vllm-version="):
            version = arg.split("=", 1)[1]
    if version is not None and version.strip().lower() == "all":
        return None
    try:
        return select_profile(version).profile
    except AttnselError:
        return None


def with_serve_line(command: Command, args: list[str]) -> list[str]:
    """`attnsel explain|preflight [options] -- [vllm serve] MODEL [serve flags...]`: the pasted line's flags
    become the command's own options (attention/rules/serve_line.py reads them as vLLM names them); the
    ones the command does not model go to a hidden note, listed as not checked."""
    if "--" not in args:
        return args
    from attnsel.attention.rules import (
        merge_serve_line,
        read_serve_line,
    )

    cut = args.index("--")
    if cut == len(args) - 1:  # a bare `--` at the end: nothing pasted
        return args[:cut]
    canonical: dict[str, str] = {}
    for param in command.params:
        names = [*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())]
        main = next((n for n in getattr(param, "opts", ()) if n.startswith("--")), None)
        canonical.update({name: main for name in names if main is not None})
        canonical.update({name: name for name in getattr(param, "secondary_opts", ())})
    release = _serve_release(args[:cut])
    declared = release.serve_flags if release is not None else frozenset()
    line = read_serve_line(args[cut + 1:], frozenset(canonical.values()), declared)
    if release is not None:
        from attnsel.attention.versions.serve_parser import check_pasted_line

        check_pasted_line(args[cut + 1:], line, release)
    merged = merge_serve_line(args[:cut], line, canonical)
    return merged + ([SERVE_NOTE_FLAG, line.note] if line.note else [])
