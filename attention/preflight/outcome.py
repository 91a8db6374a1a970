"""What `attnsel preflight` checks against, and how it ends: the machine (this one, or a target
named by --gpu), and exit 1 with one line naming each failed check once the checks are printed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.preflight.gpu_checks import target_report
from attnsel.attention.preflight.status import FAIL, WARN, Check
from attnsel.errors import CheckFailed, UserInputError
from attnsel.probe import ProbeReport

if TYPE_CHECKING:
    from attnsel.attention.preflight.deployment import PreflightResult
    from attnsel.attention.preflight.fleet import FleetPreflightResult, ScopedCheck


def _scoped(check: Check | ScopedCheck) -> tuple[str | None, Check]:
    """(the check's scope, the check): a cluster's checks carry a scope, one node's do not."""
    if isinstance(check, Check):
        return None, check
    return check.scope, check.check


def machine_report(gpu: str | None, num_gpus: int | None, tp: int) -> ProbeReport:
    """The GPUs to check: a target machine described by --gpu/--num-gpus (default: TP such GPUs), else
    this one, probed as `attnsel probe` does (NVML first; torch.cuda only if NVML is unavailable)."""
    if gpu is not None:
        return target_report(gpu, num_gpus if num_gpus is not None else tp)
    if num_gpus is not None:
        raise UserInputError("--num-gpus describes a target machine: pass it with --gpu NAME (e.g. --gpu H100 --num-gpus 8)")
    from attnsel.probe import collect_probe

    return collect_probe()


def raise_if_failed(result: PreflightResult | FleetPreflightResult) -> None:
    """Exit 1 when a check failed (one node's result, or a cluster's with scoped checks): the checks
    are on stdout; this one line goes to stderr, where a CI log shows it."""
    if result.ok:
        return
    failed = [_scoped(c) for c in result.checks]
    if any(c.status == FAIL for _, c in failed):
        failed, what = [(scope, c) for scope, c in failed if c.status == FAIL], "check(s) failed"
    else:  # --strict: the warnings fail the run
        failed, what = [(scope, c) for scope, c in failed if c.status == WARN], "warning(s), and --strict fails on them"
    raise CheckFailed(f"preflight: {len(failed)} {what}: " + "; ".join(
        f"{scope + ' ' if scope else ''}{c.name}: {c.message}" for scope, c in failed))
