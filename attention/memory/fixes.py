"""Which flag turns vLLM's refusal into a start: the same plan again with one flag changed.

Tried in the order a user would reach for them: a shorter `--max-model-len` (vLLM's own estimate,
rounded down to a multiple of 1024), `--kv-cache-dtype fp8` (half the bytes per token), a higher
`--gpu-memory-utilization`, then more GPUs (`-tp`, then `-pp` over 8-GPU groups). The re-plans reuse
the model facts and block size of the original answer (TP changes neither the block size of a
dense model nor, beyond rounding, a hybrid model's pages).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from attnsel.attention.memory.auto_fit import auto_fit, wants_auto_fit
from attnsel.attention.memory.plan import MemoryFlags, MemoryPlan, plan_memory
from attnsel.attention.memory.verdict import MAX_MODEL_LEN, NO_CACHE_MEMORY, WEIGHTS
from attnsel.attention.model import with_text_defaults
from attnsel.attention.rules import is_fp8

if TYPE_CHECKING:
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.rules import Explanation
    from attnsel.attention.versions import RuleProfile

TP_CHOICES = (2, 4, 8)
PP_CHOICES = (2, 3, 4, 6, 8)
HIGH_UTILIZATION = 0.95
MIN_USEFUL_LEN = 4096  # a shorter --max-model-len is only offered down to this many tokens
MEMORY_VERDICTS = (MAX_MODEL_LEN, NO_CACHE_MEMORY, WEIGHTS)  # what more memory (or less need) fixes


def memory_for(profile: RuleProfile, hf_config: Mapping, facts: ModelFacts, explanation: Explanation | None, flags: MemoryFlags, *,
               total_bytes: int, gpu_name: str | None, capability: tuple[int, int] | None = None
               ) -> MemoryPlan | None:
    """The plan with its fixes; None when the release's memory flow is not modelled (no `memory` data).
    `capability`: the GPU's, for vLLM's --quantization checks (None: not checked)."""
    rules = profile.memory
    if not rules or facts is None or facts.is_attention_free:  # Mamba-only state caches: not modelled
        return None
    hf_config = with_text_defaults(hf_config, profile.model_rules)  # a text_config's omitted sizes
    if wants_auto_fit(flags):  # --max-model-len auto / -1: the length vLLM fits to the memory
        return auto_fit(lambda fitted: memory_for(profile, hf_config, facts, explanation, fitted,
                                                  total_bytes=total_bytes, gpu_name=gpu_name, capability=capability), flags)
    try:
        plan = plan_memory(hf_config, facts, explanation, rules, flags, total_bytes=total_bytes, gpu_name=gpu_name,
                           cudagraph=profile.cudagraph, quantization=profile.quantization, capability=capability)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        # a config without a size the plan reads (llava's text_config leaves them to transformers'
        # defaults) or with nonsense in one: not modelled, rather than a guess
        return None
    if plan.fits or plan.verdict not in MEMORY_VERDICTS:  # a start-up check's refusal carries its own fix
        return plan
    return dataclasses.replace(plan, fixes=suggest_fixes(plan, hf_config, facts, explanation, rules, flags,
                                                         total_bytes=total_bytes, gpu_name=gpu_name,
                                                         cudagraph=profile.cudagraph))


def why_not_planned(profile: RuleProfile, facts: ModelFacts) -> str:
    """Why memory_for answered None, in one line (explain and preflight say it the same way)."""
    if not profile.memory:
        return f"vLLM {profile.vllm_version}'s memory flow is not modelled"
    if facts is not None and facts.is_attention_free:
        return "an attention-free model: its Mamba state cache is not modelled yet"
    return "the config lacks a size the memory plan reads (hidden_size, num_hidden_layers, ...)"


def suggest_fixes(plan: MemoryPlan, hf_config: Mapping, facts: ModelFacts, explanation: Explanation | None, rules: Mapping,
                  flags: MemoryFlags, *, total_bytes: int, gpu_name: str | None,
                  cudagraph: Mapping | None = None) -> tuple[str, ...]:
    def again(**changes: Any) -> MemoryPlan:
        return plan_memory(hf_config, facts, explanation, rules, dataclasses.replace(flags, **changes),
                           total_bytes=total_bytes, gpu_name=gpu_name, cudagraph=cudagraph)

    fixes = []
    if plan.verdict == MAX_MODEL_LEN and plan.estimated_max_model_len:
        shorter, retry = _at_the_estimate(plan, again)
        shorter = _surely(retry, shorter, again)
        fixes.append(f"--max-model-len {shorter} (vLLM's estimate of what fits: {plan.estimated_max_model_len})")
    if plan.verdict == MAX_MODEL_LEN and not is_fp8(flags.kv_cache_dtype or "auto") and not facts.kv_cache_dtype_forced:
        fp8 = again(kv_cache_dtype="fp8")
        if fp8.fits:
            fixes.append(f"--kv-cache-dtype fp8 (keeps max_model_len {plan.max_model_len}: {fp8.kv_cache_tokens:,} tokens)")
    if plan.gpu_memory_utilization < HIGH_UTILIZATION and again(gpu_memory_utilization=HIGH_UTILIZATION).fits:
        fixes.append(f"--gpu-memory-utilization {HIGH_UTILIZATION}")
    fixes.append(_more_gpus(facts, flags, again))
    return tuple(fixes)


def _surely(plan: MemoryPlan, length: int, again: Callable[..., MemoryPlan]) -> int:
    """A length the low estimate holds too (MemoryPlan.holds_surely), so that the suggestion passes
    preflight without its "close to the edge" warning: one planner, one margin."""
    for _ in range(3):
        if not plan.fits or plan.holds_surely:
            break
        low = plan.kv_cache_tokens_range[0]
        length = low // 1024 * 1024 or low
        plan = again(max_model_len=length)
    return length


def _at_the_estimate(plan: MemoryPlan, again: Any, minimum: int = 1, **changes: Any) -> tuple[int, MemoryPlan]:
    """The length vLLM's estimate names (rounded down to 1024) and the re-plan at it. With 0.34's extensible
    cache the estimate of the check on the reservation can still fail the check after warm-up
    (kv_cache_planning.py shrink_kv_cache_configs): that one's estimate, when at least `minimum`, holds."""
    shorter = _shorter(plan)
    retry = again(max_model_len=shorter, **changes)
    if retry.verdict == MAX_MODEL_LEN and (retry.estimated_max_model_len or 0) >= minimum:
        shorter = _shorter(retry)
        retry = again(max_model_len=shorter, **changes)
    return shorter, retry


def _shorter(plan: MemoryPlan) -> int:
    estimate = plan.estimated_max_model_len or 0
    return estimate // 1024 * 1024 or estimate


def _starts(plan: MemoryPlan, again: Any, **changes: Any) -> tuple[str, MemoryPlan] | None:
    """How a re-plan starts and the plan it starts with: as is, or with a shorter --max-model-len that the
    re-plan at that length confirms (None: it does not start)."""
    if plan.fits:
        return "", plan
    if plan.verdict == MAX_MODEL_LEN and (plan.estimated_max_model_len or 0) >= MIN_USEFUL_LEN:
        shorter, retry = _at_the_estimate(plan, again, MIN_USEFUL_LEN, **changes)
        if retry.fits:
            return f" with --max-model-len {shorter}", retry
    return None


def _more_gpus(facts: ModelFacts, flags: MemoryFlags, again: Callable[..., MemoryPlan]) -> str:
    heads = int(facts.num_attention_heads or 1)
    for tp in TP_CHOICES:
        if tp > flags.tensor_parallel_size and heads % tp == 0:
            started = _starts(again(tensor_parallel_size=tp), again, tensor_parallel_size=tp)
            if started is not None:
                starts, plan = started
                return (f"-tp {tp}{starts} ({tp} GPUs: {plan.weights_gib:.1f} GiB of weights and "
                        f"{plan.kv_cache_tokens:,} KV tokens per GPU)")
    tp = max([t for t in TP_CHOICES if heads % t == 0] or [flags.tensor_parallel_size])
    for pp in PP_CHOICES:
        if pp > flags.pipeline_parallel_size:
            started = _starts(again(tensor_parallel_size=tp, pipeline_parallel_size=pp), again,
                              tensor_parallel_size=tp, pipeline_parallel_size=pp)
            if started is not None:
                starts, plan = started
                return (f"-tp {tp} -pp {pp}{starts} ({tp * pp} GPUs: {plan.weights_gib:.1f} GiB of weights per GPU), "
                        "or GPUs with more memory")
    return f"GPUs with more memory: it does not fit on {tp * PP_CHOICES[-1]} of these"
