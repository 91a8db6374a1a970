"""`attnsel tune` end to end: the request, the result document, rows, the recommendation, a saved run read back."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
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

__all__ = [
    "DOCUMENT_FILE",
    "SUMMARY_FILE",
    "Choice",
    "DecisionRecord",
    "DeviceEnvironment",
    "Environment",
    "GpuEnvironment",
    "PlanRecord",
    "RecommendationRecord",
    "Record",
    "ResultRow",
    "Scalar",
    "Timing",
    "TuneDocument",
    "TuneFlags",
    "Verdict",
    "Workload",
    "advised_flags",
    "required_field",
    "resolve_request",
    "with_recommendation",
]
__getattr__ = lazy_door(__name__, {
    "Choice": "records",
    "DOCUMENT_FILE": "document",
    "DecisionRecord": "records",
    "DeviceEnvironment": "records",
    "Environment": "records",
    "GpuEnvironment": "records",
    "PlanRecord": "records",
    "RecommendationRecord": "records",
    "Record": "records",
    "ResultRow": "records",
    "SUMMARY_FILE": "run",
    "Scalar": "records",
    "Timing": "records",
    "TuneDocument": "records",
    "TuneFlags": "flags",
    "Verdict": "verdict",
    "Workload": "records",
    "advised_flags": "saved",
    "resolve_request": "flags",
    "required_field": "records",
    "with_recommendation": "saved",
})
