"""Preflight's `memory` check: would vLLM find room for the weights and one request of
`max_model_len` tokens on every GPU of the group (attention/memory/plan.py), and if not, which flag
fixes it. vLLM's own refusal text is kept verbatim; the smallest GPU of the group decides (every
rank asks for the same KV cache, vllm#34076)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnsel.attention.memory import (
    MAX_MODEL_LEN,
    NO_CACHE_MEMORY,
    WEIGHTS,
    MemoryFlags,
    Verdict,
    device_total_bytes,
    memory_for,
    why_not_planned,
)
from attnsel.attention.memory.checkpoint import checkpoint_folder
from attnsel.attention.preflight.status import FAIL, PASS, WARN, CheckStatus

if TYPE_CHECKING:
    from attnsel.attention.memory import MemoryPlan
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.preflight.deployment import Deployment
    from attnsel.attention.rules import Explanation
    from attnsel.attention.versions import RuleProfile
    from attnsel.probe import GpuInfo


def memory_flags(deployment: Deployment, model: str | None = None) -> MemoryFlags:
    """The deployment's flags the memory plan reads: each MemoryFlags field the deployment carries
    under the same name (the entry point stays MemoryFlags' default, `vllm serve`'s)."""
    flags = MemoryFlags(**{f.name: getattr(deployment, f.name) for f in dataclasses.fields(MemoryFlags)
                           if hasattr(deployment, f.name)})
    # a checkpoint folder: its safetensors headers give the weights (attention/memory/checkpoint.py)
    return dataclasses.replace(flags, model_dir=checkpoint_folder(model))


def not_planned(profile: RuleProfile, facts: ModelFacts, group: Sequence[GpuInfo]) -> str:
    """Why there is no plan (memory_for answered None)."""
    if not any(g.memory_total_bytes for g in group):
        return "no GPU memory size known (see gpu-count)"
    return why_not_planned(profile, facts)


def plan_for_group(profile: RuleProfile, hf_config: dict, facts: ModelFacts, explanation: Explanation | None,
                   deployment: Deployment, group: Sequence[GpuInfo], probed: bool,
                   model: str | None = None) -> MemoryPlan | None:
    """The plan of the group's smallest GPU; None without a GPU's memory or the release's memory data."""
    sized = [(g.memory_total_bytes, g) for g in group if g.memory_total_bytes]
    if not sized:
        return None
    total_bytes, smallest = min(sized, key=lambda sized_gpu: sized_gpu[0])
    total = device_total_bytes(smallest.name, total_bytes, probed)
    return memory_for(profile, hf_config, facts, explanation, memory_flags(deployment, model),
                      total_bytes=total, gpu_name=smallest.name,
                      capability=min((g.compute_capability for _, g in sized if g.compute_capability), default=None))


def memory_check_fields(plan: MemoryPlan | None, why_not: str) -> tuple[CheckStatus, str, str | None, str | None]:
    """(status, message, hint, vLLM's message) of the `memory` check; `why_not`: why there is no plan."""
    if plan is None:
        return WARN, f"not checked: {why_not}", None, None
    hint = "; or ".join(plan.fixes) if plan.fixes else None
    if plan.verdict == WEIGHTS:
        return (FAIL, f"the weights need {plan.weights_gib:.1f} GiB per GPU; the GPU has {plan.total_gib:.1f} GiB: "
                "vLLM stops with CUDA out of memory (torch.OutOfMemoryError) while loading them", hint, None)
    if plan.verdict == NO_CACHE_MEMORY:
        return (FAIL, f"{plan.weights_gib:.1f} GiB of weights and ~{plan.reserved_gib[1]:.1f} GiB of activations leave "
                f"nothing of {plan.gpu_memory_utilization:g} x {plan.total_gib:.1f} GiB for the KV cache", hint, plan.vllm_message)
    kv = f"KV cache {plan.kv_cache_gib:.1f} GiB = {plan.kv_cache_tokens:,} tokens (block {plan.block_size})"
    if plan.verdict == MAX_MODEL_LEN:
        return (FAIL, f"vLLM would refuse --max-model-len {plan.max_model_len}: one request needs {plan.needed_gib:.2f} GiB "
                f"of KV cache, {plan.kv_cache_gib:.2f} GiB is left per GPU (weights {plan.weights_gib:.1f} GiB)",
                hint, plan.vllm_message)
    if plan.verdict == Verdict.MAMBA_BLOCKS:
        return (FAIL, f"vLLM would refuse --max-num-seqs {plan.max_num_seqs}: the KV cache has {plan.mamba_block_bound:,} "
                f"blocks and every decode sequence needs its own Mamba block under full CUDA graphs ({kv})", hint,
                plan.vllm_message)
    if not plan.fits:  # a check of vLLM's config: it stops before loading anything
        return FAIL, f"vLLM would refuse these flags ({plan.verdict}): {plan.vllm_source}", hint, plan.vllm_message
    message = (f"weights {plan.weights_gib:.1f} GiB, {kv}; max concurrency {plan.max_concurrency:.2f}x "
               f"for {plan.max_model_len} tokens per request (--gpu-memory-utilization {plan.gpu_memory_utilization:g})")
    low = plan.kv_cache_tokens_range[0]
    if not plan.holds_surely:
        return (WARN, message + f"; close to the edge: the low estimate holds {low:,} tokens",
                f"pass --max-model-len below {plan.max_model_len} or --gpu-memory-utilization higher to be sure", None)
    return PASS, message, None, None
