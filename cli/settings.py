"""Global output settings set by the root `--quiet/-q` and `--verbose/-v` options.

Commands read them (`is_quiet()`, `is_verbose()`); `log()` / `debug()` write to stderr only, so
`--json` output on stdout stays pure JSON.
"""

from __future__ import annotations

import sys

QUIET, NORMAL, VERBOSE = -1, 0, 1
_state = {"verbosity": NORMAL}


def set_verbosity(quiet: bool = False, verbose: bool = False) -> None:
    """--quiet wins over --verbose (a CI script that asks for silence gets it)."""
    _state["verbosity"] = QUIET if quiet else VERBOSE if verbose else NORMAL


def verbosity() -> int:
    return _state["verbosity"]


def is_quiet(local: bool = False) -> bool:
    return local or _state["verbosity"] == QUIET


def is_verbose() -> bool:
    return _state["verbosity"] == VERBOSE


def log(message: str, *, quiet: bool = False) -> None:
    """A progress/info line on stderr, unless quiet."""
    if not is_quiet(quiet):
        sys.stderr.write(message.rstrip("\n") + "\n")
        sys.stderr.flush()


def debug(message: str) -> None:
    """A detail line on stderr, only with --verbose."""
    if is_verbose():
        sys.stderr.write(message.rstrip("\n") + "\n")
        sys.stderr.flush()
