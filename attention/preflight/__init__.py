"""`attnsel preflight`: the checks of one deployment, on one host or over a Ray cluster."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
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

__getattr__ = lazy_door(__name__)
