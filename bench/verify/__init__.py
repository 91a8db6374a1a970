"""`attnsel verify`: vLLM's own engine per candidate pair, its log read back, and the verdict."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.bench.verify.compare import EngineVerdict, Judgement
    from attnsel.bench.verify.engine_log import parse_engine_log, read_log
    from attnsel.bench.verify.engine_process import run_engine
    from attnsel.bench.verify.flags import check_verify_flags, check_verify_possible
    from attnsel.bench.verify.protocol import Message
    from attnsel.bench.verify.records import (
        BestPair,
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
        ShapeVerdict,
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
        comparison_records,
        engine_start_spreads,
        is_aa_check,
        start_spread_records,
        summarize,
        verdict_record,
    )

__getattr__ = lazy_door(__name__)
