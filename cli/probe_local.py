"""`attnsel probe` on this machine (not --ray): the probe, its --require-* checks and its output.

One body for both ways in -- the Typer command (cli/probe_cmd.py) and the quick start that skips
Typer (cli/entry.py) -- so both print the same bytes and end with the same exit code. Imports
neither Typer nor rich (rich only for the table, when it is printed).
"""

from __future__ import annotations

import os

from attnsel.cli.settings import is_quiet
from attnsel.cli.streams import print_json, stdout_console
from attnsel.errors import AttnselError, EnvironmentProblem


def check_capability_flag(require_capability: str | None) -> None:
    """--require-capability X.Y is checked before any probing (bad input: exit 2)."""
    if require_capability is not None:
        from attnsel.probe import parse_required_capability

        parse_required_capability(require_capability)


def probe_here(json_output: bool, measure_p2p: bool, require_gpus: int | None, require_capability: str | None,
               require_nvlink: bool, require_same_model: bool) -> None:
    """Probe, print (JSON or the table), then raise CheckFailed (exit 1) for an unmet --require-*."""
    from attnsel.probe import check_requirements, collect_probe, raise_if_unmet

    try:
        report = collect_probe(os.environ, measure_p2p=measure_p2p)
    except AttnselError:
        raise
    except Exception as exc:  # noqa: BLE001 -- a probe must end with one line, never a traceback
        raise EnvironmentProblem(f"probe failed: {type(exc).__name__}: {exc}") from None
    results = check_requirements(report, require_gpus, require_capability, require_nvlink, require_same_model)
    if json_output:
        from attnsel.reports import probe_json

        print_json(probe_json(report, results))
    else:
        from attnsel.reports import print_probe

        print_probe(report, stdout_console(), results, notes=not is_quiet())
    raise_if_unmet(results)
