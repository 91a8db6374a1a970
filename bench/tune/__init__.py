"""`attnsel tune` end to end: the request, the result document, rows, the recommendation, a saved run read back."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.bench.tune.document import DOCUMENT_FILE
    from attnsel.bench.tune.flags import TuneFlags, check_flags, check_real_sweep_flags, request_from_flags
    from attnsel.bench.tune.records import (DecisionRecord, Record, RecommendationRecord, ResultRow, Scalar,
                                            TuneDocument, required_field)
    from attnsel.bench.tune.run import SUMMARY_FILE
    from attnsel.bench.tune.saved import advised_flags, with_recommendation
    from attnsel.bench.tune.verdict import Verdict

__all__ = [
    "DOCUMENT_FILE",
    "DecisionRecord",
    "Record",
    "RecommendationRecord",
    "ResultRow",
    "SUMMARY_FILE",
    "Scalar",
    "TuneDocument",
    "TuneFlags",
    "Verdict",
    "advised_flags",
    "check_flags",
    "check_real_sweep_flags",
    "request_from_flags",
    "required_field",
    "with_recommendation",
]
__getattr__ = lazy_door(__name__, {
    "DOCUMENT_FILE": "document",
    "DecisionRecord": "records",
    "Record": "records",
    "RecommendationRecord": "records",
    "ResultRow": "records",
    "Scalar": "records",
    "TuneDocument": "records",
    "SUMMARY_FILE": "run",
    "TuneFlags": "flags",
    "Verdict": "verdict",
    "advised_flags": "saved",
    "check_flags": "flags",
    "check_real_sweep_flags": "flags",
    "request_from_flags": "flags",
    "required_field": "records",
    "with_recommendation": "saved",
})
