"""`attnsel preflight`: the checks of one deployment, on one host or over a Ray cluster."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.attention.preflight.deployment import (
        Deployment,
        PreflightResult,
        run_preflight,
    )
    from attnsel.attention.preflight.fleet import (
        FleetPreflightResult,
        ScopedCheck,
        run_fleet_preflight,
    )
    from attnsel.attention.preflight.gpu_checks import target_report
    from attnsel.attention.preflight.outcome import machine_report, raise_if_failed
    from attnsel.attention.preflight.request import PreflightRequest
    from attnsel.attention.preflight.status import FAIL, PASS, WARN, Check, CheckStatus

__all__ = [
    "FAIL",
    "PASS",
    "WARN",
    "Check",
    "CheckStatus",
    "Deployment",
    "FleetPreflightResult",
    "PreflightRequest",
    "PreflightResult",
    "ScopedCheck",
    "machine_report",
    "raise_if_failed",
    "run_fleet_preflight",
    "run_preflight",
    "target_report",
]
__getattr__ = lazy_door(__name__, {
    "Check": "status",
    "CheckStatus": "status",
    "Deployment": "deployment",
    "FAIL": "status",
    "FleetPreflightResult": "fleet",
    "PASS": "status",
    "PreflightRequest": "request",
    "PreflightResult": "deployment",
    "ScopedCheck": "fleet",
    "WARN": "status",
    "machine_report": "outcome",
    "raise_if_failed": "outcome",
    "run_fleet_preflight": "fleet",
    "run_preflight": "deployment",
    "target_report": "gpu_checks",
})
