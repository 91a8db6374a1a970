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
from attnsel.cli.fleet_cmd import RAY_HELP, TIMEOUT_HELP, RayAddressCommand, refuse_timeout_without_ray
from attnsel.errors import AttnselError, CheckFailed, EnvironmentProblem


def _parse_capability(text: str) -> tuple[int, int]:
    from attnsel.probe import parse_capability  # the one parser (range-checked)

    return parse_capability(text, "--require-capability")


def check_requirements(report, gpus: Optional[int], capability: Optional[str], nvlink: bool, same_model: bool) -> list:
    """One RequirementResult per --require-* option given (pure: reads the report only)."""
    from attnsel.reports import RequirementResult

    results = []
    healthy = [g for g in report.gpus if g.error is None]
    if gpus is not None:
        ok = len(healthy) >= gpus
        broken = len(report.gpus) - len(healthy)
        extra = f" ({broken} more visible but failing)" if broken else ""
        results.append(RequirementResult(f"--require-gpus {gpus}", ok, f"{len(healthy)} usable GPU(s) visible{extra}, need {gpus}"))
    if capability is not None:
        want = _parse_capability(capability)
        low = [g for g in report.gpus if g.compute_capability is None or g.compute_capability < want]
        if not report.gpus:
            results.append(RequirementResult(f"--require-capability {capability}", False, "no GPU visible"))
        else:
            detail = ", ".join(f"GPU {g.index} {g.name} has {g.capability_str or 'unknown'}" for g in low)
            results.append(RequirementResult(
                f"--require-capability {capability}", not low, detail or f"every visible GPU has CC >= {capability}"))
    if nvlink:
        fully = report.nvlink.fully_connected
        detail = f"vLLM's is_fully_connected would be {fully}: {report.nvlink.reason}"
        results.append(RequirementResult("--require-nvlink", fully is True, detail))
    if same_model:
        names = ", ".join(sorted({g.name for g in report.gpus})) or "no GPU"
        detail = f"visible models differ: {names}" if report.mixed_gpus else f"one model: {names}"
        results.append(RequirementResult("--require-same-model", not report.mixed_gpus, detail))
    return results


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
        if require_capability is not None:
            _parse_capability(require_capability)  # bad input fails before any probing
        refuse_timeout_without_ray(ray, timeout)
        if ray is not None:
            from attnsel.cli.fleet_cmd import run_probe

            return run_probe(ray, timeout, json_output, measure_p2p, require_gpus, require_capability,
                             require_nvlink, require_same_model)
        from attnsel.probe import collect_probe
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
            print_probe(report, stdout_console(), results)
        failed = [r for r in results if not r.ok]
        if failed:
            raise CheckFailed("requirement failed: " + "; ".join(f"{r.check}: {r.detail}" for r in failed))
