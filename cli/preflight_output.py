"""How a preflight result reaches the user, one node's (cli/preflight_cmd.py) or a Ray cluster's
(cli/fleet_cmd.py): printed as --format asks, then exit 1 if a check failed."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO, TypeVar

from attnsel.cli.common import print_json, terminal_width

if TYPE_CHECKING:
    from attnsel.attention.preflight import FleetPreflightResult, PreflightResult

R = TypeVar("R", "PreflightResult", "FleetPreflightResult")


def emit(result: R, fmt: str, quiet: bool, to_dict: Callable[[R], Mapping[str, object]],
         render_github: Callable[..., None], render_text: Callable[..., None]) -> None:
    """Print a preflight result (one node's or a cluster's) as --format asks; exit 1 if a check failed.
    `render_github(result, out, quiet=)` and `render_text(result, out, quiet=, verbose=, colour=, width=)`:
    reports/preflight_report.py and reports/fleet_report.py."""
    from attnsel.attention.preflight import raise_if_failed
    from attnsel.cli import settings

    out: TextIO = sys.stdout
    if fmt == "json":
        print_json(to_dict(result))
    elif fmt == "github":
        render_github(result, out, quiet=settings.is_quiet(quiet))
    else:
        colour = out.isatty() and not os.environ.get("NO_COLOR")
        render_text(result, out, quiet=settings.is_quiet(quiet), verbose=settings.is_verbose(), colour=colour,
                    width=terminal_width())
    sys.stdout.flush()
    raise_if_failed(result)
