"""`--max-model-len auto` (or -1): vLLM fits max_model_len to the KV cache memory instead of refusing.

vLLM 0.34.0 vllm/v1/core/kv_cache_planning.py:1381 `_auto_fit_max_model_len`: it starts from the
derived (config) length; where that fits it is kept, else the length becomes the largest that fits
(`estimate_max_model_len`'s binary search, the estimate vLLM's max_model_len error quotes); where not
one token fits it raises ("Cannot auto-fit max_model_len: not enough GPU memory available to serve
even a single token"). The plan does the same with its own estimate (cache.py `KvLayout.search_max_len`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from attnsel.attention.memory.plan import MAX_MODEL_LEN, MemoryFlags, MemoryPlan
from attnsel.attention.rules import AUTO_MAX_MODEL_LEN

AUTO_FIT_ERROR = "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token."


def wants_auto_fit(flags: MemoryFlags) -> bool:
    return flags.max_model_len == AUTO_MAX_MODEL_LEN


def auto_fit(plan_for: Callable[[MemoryFlags], MemoryPlan | None], flags: MemoryFlags) -> MemoryPlan | None:
    """The plan vLLM ends with under `--max-model-len auto`; `plan_for` plans one set of flags."""
    plan = plan_for(dataclasses.replace(flags, max_model_len=None))  # the config's length first
    if plan is None or plan.fits:
        return plan and _noted(plan, f"--max-model-len auto: the config's {plan.max_model_len:,} tokens fit")
    if plan.verdict != MAX_MODEL_LEN:  # the weights, or nothing left for the cache: no length helps
        return plan
    estimated = plan.estimated_max_model_len or 0
    if estimated <= 0:
        return dataclasses.replace(plan, vllm_message=AUTO_FIT_ERROR)
    fitted = plan_for(dataclasses.replace(flags, max_model_len=estimated))
    if fitted is not None and fitted.verdict == MAX_MODEL_LEN and (fitted.estimated_max_model_len or 0) > 0:
        # 0.34's extensible cache fits the length again to the memory measured after warm-up
        # (kv_cache_planning.py:1864-1900 @ 0.34.0 finalize_extensible_kv_cache, `after_warmup=True`)
        estimated = int(fitted.estimated_max_model_len or 0)
        fitted = plan_for(dataclasses.replace(flags, max_model_len=estimated))
    if fitted is None or not fitted.fits:
        return plan
    return _noted(fitted, f"--max-model-len auto: vLLM reduces max_model_len from {plan.max_model_len:,} "
                          f"(the config's) to {estimated:,}, the longest that fits")


def _noted(plan: MemoryPlan, note: str) -> MemoryPlan:
    return dataclasses.replace(plan, notes=(*plan.notes, note))

