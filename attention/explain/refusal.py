"""explain's verdict follows the memory plan: where vLLM's start-up would stop for memory
(attention/memory, docs/memory.md), the explanation carries that refusal as vLLM's error, so that
the exit code, `--json`'s `exit_code`/`error` and the line on stderr all say what the plan says
(README "Exit codes": explain's 0 means vLLM would start)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from attnsel.attention.memory import WEIGHTS

if TYPE_CHECKING:
    from attnsel.attention.memory import MemoryPlan
    from attnsel.attention.rules import Explanation

MEMORY_PHASE = "memory"
# vLLM 0.34 vllm/v1/core/kv_cache_planning.py:106,123 `_check_enough_kv_cache_memory` raises ValueError
# for both cache refusals; the weights that do not fit stop torch's allocator while the model loads.
CACHE_ERROR_TYPE = "ValueError"
WEIGHTS_ERROR_TYPE = "torch.OutOfMemoryError"


def memory_refusal(plan: MemoryPlan | None) -> tuple[str, str] | None:
    """(error type, vLLM's message) where the plan says vLLM would not start; None where it fits
    or there is no plan."""
    if plan is None or plan.fits:
        return None
    if plan.verdict == WEIGHTS:
        return WEIGHTS_ERROR_TYPE, (f"CUDA out of memory while loading the weights: {plan.weights_gib:.2f} GiB per GPU, "
                                    f"the GPU has {plan.total_gib:.2f} GiB")
    return CACHE_ERROR_TYPE, plan.vllm_message or f"the KV cache does not fit ({plan.verdict})"


def with_memory_refusal(expl: Explanation, plan: MemoryPlan | None) -> Explanation:
    """The explanation, with the memory plan's refusal as its error when the selection itself
    raised nothing (the selection happens first in vLLM's start-up: its error wins)."""
    refusal = memory_refusal(plan)
    if refusal is None or expl.error is not None:
        return expl
    error_type, message = refusal
    return dataclasses.replace(expl, error=message, error_type=error_type, error_phase=MEMORY_PHASE)
