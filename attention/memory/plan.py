"""The memory plan vLLM makes on each GPU at start-up, and its verdict, from a config alone.

vLLM's start-up (docs/memory.md): it loads the weights, runs one dummy forward pass of
`max_num_batched_tokens` tokens plus a sampler pass of `max_num_seqs` requests (the profile run),
and gives the KV cache what is left of `gpu_memory_utilization x total memory` after the weights,
that run's activation peak, the memory outside torch's allocator and (where the release applies
it) its CUDA-graph estimate (gpu_worker.py determine_available_memory). Then it refuses to start
unless one request of `max_model_len` tokens fits (check_enough_kv_cache_memory). The parts not
computable from a config (activation peak, non-torch memory, graphs) are the release's data
(`memory` in attention/versions/vllm_0_X.json), fitted to recorded engines, with a low/high range.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from attnsel.attention.memory.cache import KvLayout, kv_layout
from attnsel.attention.memory.checks import (
    Refusal,
    check_derived_len,
    check_mamba_blocks,
    check_scheduler,
    check_startup_free,
    chunked_prefill_on,
    derived_max_model_len,
    effective_batching,
)
from attnsel.attention.memory.sizing import (
    Reserve,
    Sizing,
    capture_sizes,
    reserve,
    size_kv,
    warmup_peak,
)
from attnsel.attention.memory.verdict import (
    FITS,
    MAX_MODEL_LEN,
    NO_CACHE_MEMORY,
    WEIGHTS,
    Verdict,
)
from attnsel.attention.memory.weights import WeightBytes, weight_bytes
from attnsel.attention.rules import AUTO_MAX_MODEL_LEN, quantization_refusal
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.rules import Explanation
    from attnsel.attention.rules.quantization import QuantizationRules

GIB = 2**30
__all__ = ["FITS", "MAX_MODEL_LEN", "NO_CACHE_MEMORY", "WEIGHTS", "MemoryFlags", "MemoryPlan", "Verdict", "plan_memory"]
# What nvidia-smi / torch report as a card's total memory (MiB): a little under the name's GB.
REPORTED_TOTAL_MIB = {"H100": 81559, "H200": 143771, "L4": 23034, "A100 80": 81920, "A100 40": 40960,
                      "L40S": 46068, "A10G": 23028, "GH200": 97871}


@dataclass(frozen=True)
class MemoryFlags:
    """The `vllm serve` flags the plan reads; None: vLLM's default for the release and GPU."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    quantization: str | None = None
    allow_deprecated_quantization: bool = False  # vLLM's --allow-deprecated-quantization
    enforce_eager: bool = False
    entrypoint: str = "serve"  # "serve" (vllm serve) | "llm" (the LLM class): their defaults differ
    enable_chunked_prefill: bool | None = None  # None: on (a generative decoder model)
    enable_extensible_kv_cache: bool | None = None  # None: the release's default (0.34: on on CUDA)
    kv_cache_memory_bytes: int | None = None  # only read where it turns the extensible KV cache off
    model_dir: str | None = None  # the checkpoint folder: its *.safetensors headers give the weights


@dataclass(frozen=True)
class MemoryPlan:
    gpu_name: str | None
    total_gib: float
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    weights_gib: float
    reserved_gib: tuple[float, float, float]  # activation peak + non-torch + graphs: (low, mid, high)
    kv_cache_gib: float
    kv_cache_blocks: int
    kv_cache_tokens: int
    kv_cache_tokens_range: tuple[int, int]
    max_concurrency: float
    needed_gib: float  # one request of max_model_len
    verdict: Verdict
    estimated_max_model_len: int | None = None
    vllm_message: str | None = None
    vllm_source: str | None = None  # the release's module that raises vllm_message (`error_module`)
    fixes: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    kv_sizing: str = "profiled"  # "profiled" | "extensible" (0.34's extensible KV cache)
    capacity_blocks: int | None = None  # extensible: the blocks the reservation holds
    mamba_block_bound: int | None = None  # hybrid models under full CUDA graphs: max_num_seqs' bound
    derived_max_model_len: int | None = None
    reserve_parts_gib: dict = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    @property
    def holds_surely(self) -> bool:
        """Even the low estimate of the KV cache holds one request of max_model_len: the one margin that
        preflight's "close to the edge" warning and explain's suggested --max-model-len both use."""
        return self.kv_cache_tokens_range[0] >= self.max_model_len

    def to_dict(self) -> dict:
        doc = {k: getattr(self, k) for k in (
            "gpu_name", "total_gib", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
            "max_num_batched_tokens", "block_size", "weights_gib", "kv_cache_gib", "kv_cache_blocks",
            "kv_cache_tokens", "max_concurrency", "needed_gib", "verdict", "estimated_max_model_len",
            "vllm_message", "vllm_source", "kv_sizing", "capacity_blocks", "mamba_block_bound",
            "derived_max_model_len")}
        doc["verdict"] = str(self.verdict)
        doc["reserve_parts_gib"] = {k: round(v, 2) for k, v in self.reserve_parts_gib.items()}
        doc["reserved_gib"] = dict(zip(("low", "mid", "high"), (round(r, 2) for r in self.reserved_gib)))
        doc["kv_cache_tokens_range"] = list(self.kv_cache_tokens_range)
        doc["fixes"], doc["notes"] = list(self.fixes), list(self.notes)
        return _rounded(doc)


def _rounded(doc: dict) -> dict:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in doc.items()}


def check_memory_flags(flags: MemoryFlags) -> None:
    """Bad values are bad input (exit 2), checked before anything runs."""
    util = flags.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise UserInputError(f"--gpu-memory-utilization must be in (0, 1], got {util}")
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        value = getattr(flags, name)
        if name == "max_model_len" and value == AUTO_MAX_MODEL_LEN:  # `auto` / -1: vLLM fits it (auto_fit.py)
            continue
        if value is not None and value < 1:
            raise UserInputError(f"--{name.replace('_', '-')} must be a positive number of tokens, got {value}")


def device_total_bytes(gpu_name: str | None, table_bytes: int, probed: bool) -> int:
    """A probed GPU's total as NVML reports it; a --gpu target's as the card reports it (the table
    holds the marketing size: an "80GB" H100 has 79.65 GiB)."""
    if probed or not gpu_name:
        return table_bytes
    for key, mib in REPORTED_TOTAL_MIB.items():
        if all(part in gpu_name for part in key.split()):
            return mib * 2**20
    return table_bytes


def scheduler_defaults(rules: Mapping, total_bytes: int, gpu_name: str | None, entrypoint: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs): vLLM's usage-context defaults for this GPU (arg_utils.py
    _set_default_max_num_seqs_and_batched_tokens_args)."""
    tier = "other"
    for name, bound in rules["gpu_tiers"]:
        excluded = any(x in (gpu_name or "").lower() for x in rules.get("tier_excludes", {}).get(name, ()))
        if total_bytes >= bound * GIB and not excluded:
            tier = name
            break
    row = rules["scheduler_defaults"][tier]
    return int(row["max_num_batched_tokens"][entrypoint]), int(row["max_num_seqs"][entrypoint])


def plan_memory(hf_config: Mapping, facts: ModelFacts, explanation: Explanation | None, rules: Mapping, flags: MemoryFlags, *,
                total_bytes: int, gpu_name: str | None = None, cudagraph: Mapping | None = None,
                quantization: QuantizationRules | None = None, capability: tuple[int, int] | None = None) -> MemoryPlan:
    """The plan of the busiest GPU (the largest pipeline stage's TP shard) of a group of `total_bytes` GPUs;
    `cudagraph`: the release's CUDA-graph data (its capture sizes follow max_num_seqs); `quantization`:
    the release's QuantizationRules, checked on a GPU of `capability` (attention/rules/quantization.py)."""
    tp, pp = flags.tensor_parallel_size, flags.pipeline_parallel_size
    derived = derived_max_model_len(hf_config)
    max_len = flags.max_model_len or derived.default_len
    default_tokens, seqs = scheduler_defaults(rules, total_bytes, gpu_name, flags.entrypoint)
    seqs = flags.max_num_seqs or seqs
    tokens = effective_batching(rules, flags, default_tokens, seqs, max_len)
    weights = weight_bytes(hf_config, facts, tp=tp, pp=pp, quantization=flags.quantization, model_dir=flags.model_dir)
    res = reserve(hf_config, facts, rules, tokens=tokens, seqs=seqs, tp=tp, eager=flags.enforce_eager,
                  graph_sizes=capture_sizes(cudagraph, seqs, tokens), quantization=weights.quantization)
    sizing = size_kv(rules, flags, total=total_bytes, weights=weights.total, res=res,
                     warmup=warmup_peak(facts, rules.get("extensible_kv_cache") or {}, tokens, tp))
    cache = kv_layout(hf_config, facts, explanation, rules, tp=tp, pp=pp, kv_cache_dtype=flags.kv_cache_dtype,
                      batched_tokens=tokens)
    capacity = [max(0, int(b // cache.block_bytes)) for b in sizing.capacity]
    blocks = [min(max(0, int(b // cache.block_bytes)), c) for b, c in zip(sizing.final, capacity)]
    per_request = cache.blocks_per_request(max_len)
    # vLLM reports int(concurrency x max_model_len) tokens (kv_cache_utils.py get_kv_cache_capacity):
    # blocks x block size for a full-attention model whose length is a multiple of the block
    token_counts = [int(b / per_request * max_len) for b in blocks]
    plan = MemoryPlan(
        gpu_name=gpu_name, total_gib=total_bytes / GIB, gpu_memory_utilization=sizing.utilization, max_model_len=max_len,
        max_num_seqs=seqs, max_num_batched_tokens=tokens, block_size=cache.block_size,
        weights_gib=weights.gib, reserved_gib=tuple(r / GIB for r in res.total),  # type: ignore[arg-type]
        kv_cache_gib=max(0.0, sizing.final[1]) / GIB, kv_cache_blocks=blocks[1], kv_cache_tokens=token_counts[1],
        kv_cache_tokens_range=(token_counts[0], token_counts[2]), max_concurrency=blocks[1] / per_request,
        needed_gib=cache.needed_bytes(max_len) / GIB, verdict=Verdict.FITS, notes=_notes(weights, facts, res, sizing),
        kv_sizing=sizing.name, capacity_blocks=capacity[1] if sizing.extensible else None,
        derived_max_model_len=int(derived.value), reserve_parts_gib={k: v / GIB for k, v in res.parts.items()})
    refusal = _quantization(quantization, flags, hf_config, capability) or check_derived_len(
        rules.get("checks") or {}, derived, flags.max_model_len) or check_scheduler(
        rules.get("checks") or {}, batched_tokens=tokens, seqs=seqs, max_len=max_len, chunked_prefill=chunked_prefill_on(flags))
    cuda_total = total_bytes - float(rules.get("cuda_total_gap_gib") or 0.0) * GIB
    refusal = refusal or check_startup_free(rules.get("checks") or {}, sizing.utilization, cuda_total, sizing.extensible)
    if refusal is not None:  # raised while vLLM builds its config or its worker: nothing is loaded
        return _refused(plan, refusal)
    return _judge(plan, rules, cache, weights, sizing, total_bytes, flags, explanation)


def _quantization(rules: QuantizationRules | None, flags: MemoryFlags, hf_config: Mapping, capability: tuple[int, int] | None
                  ) -> Refusal | None:
    refused = quantization_refusal(rules, flags.quantization, hf_config, capability, flags.model_dir,
                                   allow_deprecated=flags.allow_deprecated_quantization)
    if refused is None:
        return None
    return Refusal(Verdict.QUANTIZATION, refused.message, refused.source, refused.fix)


def _notes(weights: WeightBytes, facts: ModelFacts, res: Reserve, sizing: Sizing) -> tuple[str, ...]:
    source = "the checkpoint's safetensors headers" if weights.from_checkpoint else "config.json"
    notes = [f"weights counted from {source}: {weights.parameters / 1e9:.1f}B parameters, "
             f"{weights.linear_bytes_per_param:g} bytes each in linear layers ({weights.quantization or facts.dtype})"]
    if weights.note:
        notes.append(weights.note)
    if res.parts:
        parts = ", ".join(f"{k} {v / GIB:.2f}" for k, v in res.parts.items() if v)
        notes.append(f"profile run derived per component (GiB): {parts}; non-torch memory and CUDA-graph memory "
                     f"are measured ranges ({res.non_torch[0] / GIB:.2f}-{res.non_torch[2] / GIB:.2f} and "
                     f"{res.graphs[0] / GIB:.2f}-{res.graphs[2] / GIB:.2f} GiB)")
    if sizing.extensible:
        notes.append(f"extensible KV cache: reserved from the profiled budget at --gpu-memory-utilization "
                     f"{sizing.utilization:g}, committed from what is free after warm-up and CUDA-graph capture")
    if sizing.note:
        notes.append(f"vLLM: {sizing.note}")
    return tuple(notes)


def _refused(plan: MemoryPlan, refusal: Refusal, **changes: Any) -> MemoryPlan:
    return replace(plan, verdict=refusal.verdict, vllm_message=refusal.message, vllm_source=refusal.source,
                   fixes=(refusal.fix,), **changes)


def _judge(plan: MemoryPlan, rules: Mapping, cache: KvLayout, weights: WeightBytes, sizing: Sizing,
           total_bytes: int, flags: MemoryFlags, explanation: Explanation | None) -> MemoryPlan:
    """vLLM's checks in the order it runs them: loading, the KV check (on the reservation, for the
    extensible cache), the Mamba blocks at CUDA-graph set-up, the KV check after warm-up (extensible)."""
    if weights.total > total_bytes:
        # vLLM dies in torch's allocator (CUDA out of memory, naming one tensor): no text of its own to quote
        return replace(plan, verdict=Verdict.WEIGHTS, kv_cache_gib=0.0)
    refused = _kv_check(plan, rules, cache, cache.check_bytes(sizing.capacity[1]), _hint(rules, sizing, False))
    if refused is not None:
        return refused
    pool = plan.capacity_blocks if plan.capacity_blocks is not None else plan.kv_cache_blocks
    mamba = check_mamba_blocks(rules.get("checks") or {}, cache, pool, plan.max_num_seqs, flags, explanation)
    if cache.has_state:
        plan = replace(plan, mamba_block_bound=pool)
    if mamba is not None:
        return _refused(plan, mamba)
    if sizing.extensible:  # kv_cache_planning.py:1825-1862 @ 0.34.0 shrink_kv_cache_configs: the null block held back
        refused = _kv_check(plan, rules, cache, (plan.kv_cache_blocks - 1) * cache.block_bytes, _hint(rules, sizing, True))
        if refused is not None:
            return refused
    return plan


def _hint(rules: Mapping, sizing: Sizing, after_warmup: bool) -> str:
    """`_more_kv_cache_memory_hint` (kv_cache_planning.py:64-96 @ 0.34.0), the data's `kv_cache_hints`: its
    returned texts in source order (extensible below 1.0, extensible at 1.0, sized by profiling) and the
    words it fills in (before / after warm-up). Releases before 0.34 have the advice inside their texts."""
    hints = rules.get("kv_cache_hints")
    if not hints:
        return ""
    returns, words = hints["returns"], hints["words"]
    if not sizing.extensible:
        return returns[2]
    text = returns[0] if sizing.utilization < 1.0 else returns[1]
    step = 1 if after_warmup else 0
    return text.format(used_by=words["used_by"][step], graphs_hint=words["graphs_hint"][step], utilization=sizing.utilization)


def _kv_check(plan: MemoryPlan, rules: Mapping, cache: KvLayout, available: float, hint: str) -> MemoryPlan | None:
    """`_check_enough_kv_cache_memory`: no memory at all, or one request of max_model_len does not fit."""
    if available <= 0:
        return replace(plan, verdict=Verdict.NO_CACHE_MEMORY, vllm_message=rules["no_cache_memory"].format(hint=hint),
                       kv_cache_gib=0.0, vllm_source=_raised_in(rules))
    needed = cache.needed_bytes(plan.max_model_len)
    if needed <= available:
        return None
    estimated = cache.search_max_len(available, plan.max_model_len)
    estimated_msg = rules["estimated_msg"].format(estimated=estimated) if estimated > 0 else ""
    text = rules["max_model_len_error"].format(
        max_model_len=plan.max_model_len, needed_gib=format_gib(needed), available_gib=format_gib(available),
        estimated_msg=estimated_msg, hint=hint)
    return replace(plan, verdict=Verdict.MAX_MODEL_LEN, vllm_message=text, estimated_max_model_len=estimated,
                   vllm_source=_raised_in(rules))


def format_gib(n: float) -> str:
    """vLLM's utils/mem_utils.py format_gib: rounded to 2 places (16.0, 9.35)."""
    return f"{round(n / GIB, 2)}"


def _raised_in(rules: Mapping) -> str | None:
    """Where the release raises its refusal: kv_cache_utils.py up to 0.32, kv_cache_planning.py from 0.33."""
    module = rules.get("error_module")
    return f"{module} _check_enough_kv_cache_memory" if module else None
