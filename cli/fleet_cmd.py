"""`--ray [ADDRESS]` for `probe` and `preflight`: routing to probe/fleet/collect.py and
attention/preflight/fleet.py, and the option's optional value.

Exit codes as for one node, plus 3 when Ray is not installed or no cluster answers. Import-light:
Ray is imported only when --ray is given.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from typer.core import TyperCommand

from attnsel.cli.common import print_json, stdout_console
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from typer._click.core import Context

    from attnsel.attention.preflight import PreflightRequest

RAY_OPTION = "--ray"
DEFAULT_ADDRESS = "auto"  # as Ray itself: RAY_ADDRESS, else the cluster started on this machine
RAY_HELP = ("Run on every alive node of an existing Ray cluster: ADDRESS as `ray start` printed it (host:6379), "
            "ray://host:10001, or auto (the default: RAY_ADDRESS, else the local cluster). Needs attnsel[ray].")
TIMEOUT_HELP = "With --ray: seconds to wait for every node's answer (all nodes are probed at once)."


class RayAddressCommand(TyperCommand):
    """A command whose --ray takes an optional value: `--ray` alone means `--ray auto`.
    (Typer has no options with optional values; click's flag_value is not passed through.)"""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, with_default_address(args))


def with_default_address(args: list[str]) -> list[str]:
    """`--ray` followed by nothing or by another option gets the default address.

    >>> with_default_address(["--ray", "--json"])
    ['--ray', 'auto', '--json']
    >>> with_default_address(["--ray", "10.0.0.1:6379"])
    ['--ray', '10.0.0.1:6379']
    >>> with_default_address(["--json", "--ray"])
    ['--json', '--ray', 'auto']
    """
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == RAY_OPTION and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out.insert(i + 1, DEFAULT_ADDRESS)
            break
    return out


def ray_timeout(timeout: float | None) -> float:
    from attnsel.probe.fleet import DEFAULT_TIMEOUT_S

    if timeout is None:
        return DEFAULT_TIMEOUT_S
    if not math.isfinite(timeout) or timeout <= 0:  # NaN compares false both ways; inf would wait forever
        raise UserInputError(f"--timeout must be more than 0 seconds, got {timeout:g}")
    return timeout


def refuse_timeout_without_ray(address: str | None, timeout: float | None) -> None:
    from attnsel.attention.model import check_names

    if address is None and timeout is not None:
        raise UserInputError("--timeout is for --ray (how long to wait for the cluster's nodes)")
    if timeout is not None:
        ray_timeout(timeout)  # before any cluster is asked
    check_names((("--ray", address),))


def check_ray_flags(address: str | None, timeout: float | None, pipeline_parallel_size: int,
                    gpu: str | None, num_gpus: int | None) -> None:
    """preflight's flags that only make sense with (or without) --ray."""
    if pipeline_parallel_size < 1:
        raise UserInputError("--pipeline-parallel-size must be >= 1")
    refuse_timeout_without_ray(address, timeout)
    if address is not None and (gpu is not None or num_gpus is not None):
        raise UserInputError("--ray checks the cluster's own GPUs: leave out --gpu/--num-gpus")


# ---------------------------------------------------------------------------------------------
# probe --ray


def run_probe(address: str, timeout: float | None, json_output: bool, measure_p2p: bool,
              gpus: int | None, capability: str | None, nvlink: bool, same_model: bool) -> None:
    from attnsel.probe import fleet_requirements, raise_if_unmet
    from attnsel.probe.fleet import fleet_verdict, probe_fleet
    from attnsel.reports import fleet_probe_json, print_fleet

    if measure_p2p:
        raise UserInputError("--measure-p2p times copies on the GPUs, which a probe over Ray does not hold: "
                             "run `attnsel probe --measure-p2p` on the node itself")
    fleet = probe_fleet(address, ray_timeout(timeout))
    verdict = fleet_verdict(fleet)
    results = fleet_requirements(fleet, verdict, gpus, capability, nvlink, same_model)
    if json_output:
        print_json(fleet_probe_json(fleet, verdict, results))
    else:
        print_fleet(fleet, verdict, stdout_console(), results)
    raise_if_unmet(results)


# ---------------------------------------------------------------------------------------------
# preflight --ray


def run_ray_preflight(request: PreflightRequest, fmt: str, quiet: bool) -> None:
    """Every node of the Ray cluster at `request.ray`, TP inside nodes and PP across them."""
    from attnsel.attention.preflight import run_fleet_preflight
    from attnsel.cli import settings
    from attnsel.cli.preflight_output import emit
    from attnsel.probe.fleet import probe_fleet
    from attnsel.reports import fleet_report as view

    assert request.ray is not None  # preflight routes here only with --ray
    fleet = probe_fleet(request.ray, ray_timeout(request.timeout))
    settings.debug(f"preflight --ray: {len(fleet.nodes)} node(s) in {fleet.elapsed_s:.2f} s")
    deployment = request.deployment
    result = run_fleet_preflight(fleet, request.hf_config, deployment, deployment.pipeline_parallel_size,
                                 profile=request.profile, model=request.model, profile_reason=request.choice.reason)
    emit(result, fmt, quiet, view.fleet_preflight_json, view.render_preflight_github, view.render_preflight_text)
