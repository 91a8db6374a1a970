"""`attnsel tune` end to end: the request, the result document, rows, the recommendation, a saved run read back."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.bench.tune.document import DOCUMENT_FILE
    from attnsel.bench.tune.flags import TuneFlags, resolve_request
    from attnsel.bench.tune.records import (
        Choice,
        DecisionRecord,
        DeviceEnvironment,
        Environment,
        GpuEnvironment,
        PlanRecord,
        RecommendationRecord,
        Record,
        ResultRow,
        Scalar,
        Timing,
        TuneDocument,
        Workload,
        required_field,
    )
    from attnsel.bench.tune.run import SUMMARY_FILE
    from attnsel.bench.tune.saved import advised_flags, with_recommendation
    from attnsel.bench.tune.verdict import Verdict

__getattr__ = lazy_door(__name__)
