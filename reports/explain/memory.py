"""explain's short memory block: what vLLM would give the KV cache on this GPU, and its verdict.
Renders attention/memory's MemoryPlan; computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from attnsel.attention.memory import MemoryPlan


def memory_lines(plan: MemoryPlan) -> list[str]:
    """Three to five lines: the budget, the KV cache, the verdict (with vLLM's words and the fix)."""
    low, mid, high = plan.reserved_gib
    lines = [
        f"Memory on {plan.gpu_name or 'the GPU'} ({plan.total_gib:.2f} GiB x --gpu-memory-utilization {plan.gpu_memory_utilization:g}, "
        f"per GPU): weights {plan.weights_gib:.2f} GiB, profile run + graphs ~{mid:.1f} GiB ({low:.1f}-{high:.1f})",
    ]
    if plan.fits:
        lines.append(
            f"  KV cache {plan.kv_cache_gib:.2f} GiB = {plan.kv_cache_blocks:,} blocks x {plan.block_size} = "
            f"{plan.kv_cache_tokens:,} tokens ({plan.kv_cache_tokens_range[0]:,}-{plan.kv_cache_tokens_range[1]:,}); "
            f"maximum concurrency for {plan.max_model_len:,} tokens per request: {plan.max_concurrency:.2f}x")
        return lines
    lines.append(f"  vLLM would not start: {plan.vllm_message or 'CUDA out of memory while loading the weights'}")
    lines += [f"  fix: {fix}" for fix in plan.fixes]
    return lines


def render_memory(plan: MemoryPlan, console: Console) -> None:
    for line in memory_lines(plan):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
