"""`attnsel probe`: GPUs through NVML, CUDA_VISIBLE_DEVICES mapping, NVLink/P2P, CI requirements.

Exit codes: 0 probe done (also when no GPU is found); 1 a --require-* check failed;
2 bad arguments (or an unreadable ATTNSEL_NVML_SCENARIO file); 3 the probe itself broke, or
(--ray) Ray is not installed or no cluster answers.
Import-light on purpose: no torch unless NVML is unavailable or --measure-p2p is given. A plain local
probe does not even come here: cli/entry.py runs cli/probe_local.py without Typer.
"""

from __future__ import annotations

import typer

from attnsel.cli.common import handle_errors
from attnsel.cli.fleet_cmd import (
    RAY_HELP,
    TIMEOUT_HELP,
    RayAddressCommand,
    refuse_timeout_without_ray,
)
from attnsel.cli.probe_local import check_capability_flag, probe_here


def register(app: typer.Typer) -> None:
    @app.command("probe", cls=RayAddressCommand)
    @handle_errors
    def probe(
        json_output: bool = typer.Option(False, "--json", help="Print one JSON object on stdout, nothing else."),
        measure_p2p: bool = typer.Option(
            False, "--measure-p2p", help="Also time a 1 GiB GPU-to-GPU copy per pair (needs torch and 2+ GPUs)."
        ),
        require_gpus: int | None = typer.Option(
            None, "--require-gpus", min=1, metavar="N", help="Exit 1 unless at least N usable GPUs are visible."
        ),
        require_capability: str | None = typer.Option(
            None, "--require-capability", metavar="X.Y", help="Exit 1 unless every visible GPU has compute capability >= X.Y."
        ),
        require_nvlink: bool = typer.Option(
            False, "--require-nvlink", help="Exit 1 unless vLLM's is_fully_connected is true for the visible GPUs."
        ),
        require_same_model: bool = typer.Option(
            False, "--require-same-model", help="Exit 1 if the visible GPUs are different models."
        ),
        ray: str | None = typer.Option(None, "--ray", metavar="[ADDRESS]", help=RAY_HELP),
        timeout: float | None = typer.Option(None, "--timeout", metavar="SECONDS", help=TIMEOUT_HELP),
    ) -> None:
        """GPUs seen through NVML (no CUDA context), the CUDA_VISIBLE_DEVICES mapping, NVLink/P2P and vLLM's verdicts."""
        check_capability_flag(require_capability)  # bad input fails before any probing
        if ray is not None or timeout is not None:
            refuse_timeout_without_ray(ray, timeout)
        if ray is not None:
            from attnsel.cli.fleet_cmd import run_probe

            return run_probe(ray, timeout, json_output, measure_p2p, require_gpus, require_capability,
                             require_nvlink, require_same_model)
        # the same body as the quick start's (cli/entry.py): both print the same bytes
        probe_here(json_output, measure_p2p, require_gpus, require_capability, require_nvlink, require_same_model)
