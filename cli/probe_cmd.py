"""`attnsel probe`: GPUs through NVML, CUDA_VISIBLE_DEVICES mapping, NVLink/P2P, CI requirements.

Exit codes: 0 probe done (also when no GPU is found); 1 a --require-* check failed;
2 bad arguments (or an unreadable ATTNSEL_NVML_SCENARIO file); 3 the probe itself broke, or
(--ray) Ray is not installed or no cluster answers.
Import-light on purpose: no torch unless NVML is unavailable or --measure-p2p is given.
"""

from __future__ import annotations

import os
from typing import Optional

import typer

from attnsel.cli.common import handle_errors, print_json, stdout_console
from attnsel.cli.settings import is_quiet
from attnsel.cli.fleet_cmd import RAY_HELP, TIMEOUT_HELP, RayAddressCommand, refuse_timeout_without_ray
from attnsel.errors import AttnselError, EnvironmentProblem


def register(app: typer.Typer) -> None:
    @app.command("probe", cls=RayAddressCommand)
    @handle_errors
    def probe(
        json_output: bool = typer.Option(False, "--json", help="Print one JSON object on stdout, nothing else."),
        measure_p2p: bool = typer.Option(
            False, "--measure-p2p", help="Also time a 1 GiB GPU-to-GPU copy per pair (needs torch and 2+ GPUs)."
        ),
        require_gpus: Optional[int] = typer.Option(
            None, "--require-gpus", min=1, metavar="N", help="Exit 1 unless at least N usable GPUs are visible."
        ),
        require_capability: Optional[str] = typer.Option(
            None, "--require-capability", metavar="X.Y", help="Exit 1 unless every visible GPU has compute capability >= X.Y."
        ),
        require_nvlink: bool = typer.Option(
            False, "--require-nvlink", help="Exit 1 unless vLLM's is_fully_connected is true for the visible GPUs."
        ),
        require_same_model: bool = typer.Option(
            False, "--require-same-model", help="Exit 1 if the visible GPUs are different models."
        ),
        ray: Optional[str] = typer.Option(None, "--ray", metavar="[ADDRESS]", help=RAY_HELP),
        timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help=TIMEOUT_HELP),
    ) -> None:
        """GPUs seen through NVML (no CUDA context), the CUDA_VISIBLE_DEVICES mapping, NVLink/P2P and vLLM's verdicts."""
        from attnsel.probe import parse_required_capability

        if require_capability is not None:
            parse_required_capability(require_capability)  # bad input fails before any probing
        refuse_timeout_without_ray(ray, timeout)
        if ray is not None:
            from attnsel.cli.fleet_cmd import run_probe

            return run_probe(ray, timeout, json_output, measure_p2p, require_gpus, require_capability,
                             require_nvlink, require_same_model)
        from attnsel.probe import check_requirements, collect_probe, raise_if_unmet
        from attnsel.reports import print_probe, probe_json

        try:
            report = collect_probe(os.environ, measure_p2p=measure_p2p)
        except AttnselError:
            raise
        except Exception as exc:  # noqa: BLE001 -- a probe must end with one line, never a traceback
            raise EnvironmentProblem(f"probe failed: {type(exc).__name__}: {exc}") from None
        results = check_requirements(report, require_gpus, require_capability, require_nvlink, require_same_model)
        if json_output:
            print_json(probe_json(report, results))
        else:
            print_probe(report, stdout_console(), results, notes=not is_quiet())
        raise_if_unmet(results)
