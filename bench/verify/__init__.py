"""`attnsel verify`: vLLM's own engine per candidate pair, its log read back, and the verdict."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.bench.verify.compare import EngineVerdict, Judgement
    from attnsel.bench.verify.engine_log import parse_engine_log, read_log
    from attnsel.bench.verify.engine_process import run_engine
    from attnsel.bench.verify.flags import check_verify_flags, check_verify_possible
    from attnsel.bench.verify.protocol import Message
    from attnsel.bench.verify.records import (
        Candidate,
        Comparison,
        EngineFacts,
        EngineStart,
        Figure,
        GpuFacts,
        Judged,
        ModelFacts,
        ShapeFigures,
        ShapeResult,
        StartFigure,
        StartSpread,
        VerdictRecord,
        VerifyDocument,
        VerifyOptions,
        VllmFacts,
    )
    from attnsel.bench.verify.request import VerifyRequest, write_model_dir
    from attnsel.bench.verify.run import VerifyProgress, run_verify
    from attnsel.bench.verify.status import RunStatus
    from attnsel.bench.verify.verdict import (
        build_comparisons,
        engine_start_spreads,
        is_aa_check,
        summarize,
    )

__all__ = [
    "Candidate",
    "Comparison",
    "EngineFacts",
    "EngineStart",
    "EngineVerdict",
    "Figure",
    "GpuFacts",
    "Judged",
    "Judgement",
    "Message",
    "ModelFacts",
    "RunStatus",
    "ShapeFigures",
    "ShapeResult",
    "StartFigure",
    "StartSpread",
    "VerdictRecord",
    "VerifyDocument",
    "VerifyOptions",
    "VerifyProgress",
    "VerifyRequest",
    "VllmFacts",
    "build_comparisons",
    "check_verify_flags",
    "check_verify_possible",
    "engine_start_spreads",
    "is_aa_check",
    "parse_engine_log",
    "read_log",
    "run_engine",
    "run_verify",
    "summarize",
    "write_model_dir",
]
__getattr__ = lazy_door(__name__, {
    "Candidate": "records",
    "Comparison": "records",
    "EngineFacts": "records",
    "EngineStart": "records",
    "EngineVerdict": "compare",
    "Figure": "records",
    "GpuFacts": "records",
    "Judged": "records",
    "Judgement": "compare",
    "Message": "protocol",
    "ModelFacts": "records",
    "RunStatus": "status",
    "ShapeFigures": "records",
    "ShapeResult": "records",
    "StartFigure": "records",
    "StartSpread": "records",
    "VerdictRecord": "records",
    "VerifyDocument": "records",
    "VerifyOptions": "records",
    "VerifyProgress": "run",
    "VerifyRequest": "request",
    "VllmFacts": "records",
    "build_comparisons": "verdict",
    "check_verify_flags": "flags",
    "check_verify_possible": "flags",
    "engine_start_spreads": "verdict",
    "is_aa_check": "verdict",
    "parse_engine_log": "engine_log",
    "read_log": "engine_log",
    "run_engine": "engine_process",
    "run_verify": "run",
    "summarize": "verdict",
    "write_model_dir": "request",
})
