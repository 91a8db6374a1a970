"""Shared CLI plumbing: consoles, JSON output, and turning AttnselError into exit codes."""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any, Callable

import typer
from rich.console import Console

from attnsel.errors import EXIT_BAD_INPUT, AttnselError


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


def stdout_console() -> Console:
    """Rich console for human output; plain text when NO_COLOR is set or stdout is not a TTY."""
    return Console(no_color=_no_color(), highlight=False, soft_wrap=False)


def stderr_console() -> Console:
    return Console(stderr=True, no_color=_no_color(), highlight=False)


def print_json(obj: Any) -> None:
    """--json prints exactly one JSON document on stdout and nothing else."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def fail(message: str, code: int) -> "typer.Exit":
    """Print a one-line error on stderr and return the Exit to raise."""
    line = " ".join(str(message).split("\n")).strip()
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def handle_errors(func: Callable) -> Callable:
    """Decorator for commands: AttnselError -> one line on stderr + its exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except AttnselError as exc:
            raise fail(exc.message, exc.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except FileNotFoundError as exc:
            raise fail(f"file not found: {exc.filename}", EXIT_BAD_INPUT) from None

    return wrapper
