"""`attnsel verify`: vLLM's own engine per candidate pair, its log read back, and the verdict."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.bench.verify.compare import EngineVerdict, Judgement
    from attnsel.bench.verify.records import VerifyDocument
    from attnsel.bench.verify.run import VerifyProgress, VerifyRequest, run_verify
    from attnsel.bench.verify.verdict import build_comparisons, summarize

__all__ = [
    "EngineVerdict",
    "Judgement",
    "VerifyProgress",
    "VerifyDocument",
    "VerifyRequest",
    "build_comparisons",
    "run_verify",
    "summarize",
]
__getattr__ = lazy_door(__name__, {
    "EngineVerdict": "compare",
    "Judgement": "compare",
    "VerifyProgress": "run",
    "VerifyDocument": "records",
    "VerifyRequest": "run",
    "build_comparisons": "verdict",
    "run_verify": "run",
    "summarize": "verdict",
})
