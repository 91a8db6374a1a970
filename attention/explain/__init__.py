"""What `attnsel explain` answers: per GPU, across releases, and live against the installed vLLM."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
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

__getattr__ = lazy_door(__name__)
