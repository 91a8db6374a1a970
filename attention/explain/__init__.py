"""What `attnsel explain` answers: per GPU, across releases, and live against the installed vLLM."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.attention.explain.answers import (
        DEFAULT_SOURCE,
        GpuAnswer,
        MatrixRow,
        ModelChoice,
        explain_gpu,
        explain_matrix,
        explain_one,
        ignored_flags,
        model_choice,
        model_doc,
        model_facts,
        model_section,
        resolve_gpu,
        saved_flags,
    )
    from attnsel.attention.explain.history import (
        ReleaseChange,
        ReleaseHistory,
        ReleaseVerdict,
        explain_for_release,
        release_history,
    )
    from attnsel.attention.explain.live import Mismatch, ask_vllm, compare
    from attnsel.attention.explain.live_runtime import require_vllm, vllm_runtime
    from attnsel.attention.explain.refusal import MEMORY_PHASE, memory_refusal

__all__ = [
    "DEFAULT_SOURCE",
    "MEMORY_PHASE",
    "GpuAnswer",
    "MatrixRow",
    "Mismatch",
    "ModelChoice",
    "ReleaseChange",
    "ReleaseHistory",
    "ReleaseVerdict",
    "ask_vllm",
    "compare",
    "explain_for_release",
    "explain_gpu",
    "explain_matrix",
    "explain_one",
    "ignored_flags",
    "memory_refusal",
    "model_choice",
    "model_doc",
    "model_facts",
    "model_section",
    "release_history",
    "require_vllm",
    "resolve_gpu",
    "saved_flags",
    "vllm_runtime",
]
__getattr__ = lazy_door(__name__, {
    "DEFAULT_SOURCE": "answers",
    "GpuAnswer": "answers",
    "MEMORY_PHASE": "refusal",
    "MatrixRow": "answers",
    "Mismatch": "live",
    "ModelChoice": "answers",
    "ReleaseChange": "history",
    "ReleaseHistory": "history",
    "ReleaseVerdict": "history",
    "ask_vllm": "live",
    "compare": "live",
    "explain_for_release": "history",
    "explain_gpu": "answers",
    "explain_matrix": "answers",
    "explain_one": "answers",
    "ignored_flags": "answers",
    "saved_flags": "answers",
    "model_choice": "answers",
    "model_doc": "answers",
    "model_facts": "answers",
    "memory_refusal": "refusal",
    "model_section": "answers",
    "release_history": "history",
    "require_vllm": "live_runtime",
    "resolve_gpu": "answers",
    "vllm_runtime": "live_runtime",
})
