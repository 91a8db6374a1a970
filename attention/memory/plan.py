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

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from attnsel.attention.memory.weights import DTYPE_BYTES, WeightBytes, weight_bytes
from attnsel.attention.rules import AUTO_MAX_MODEL_LEN, is_fp8
from attnsel.errors import UserInputError

GIB = 2**30
FITS, MAX_MODEL_LEN, NO_CACHE_MEMORY, WEIGHTS = "fits", "max_model_len_too_long", "no_cache_memory", "weights_do_not_fit"
# What nvidia-smi / torch report as a card's total memory (MiB): a little under the name's GB.
REPORTED_TOTAL_MIB = {"H100": 81559, "H200": 143771, "L4": 23034, "A100 80": 81920, "A100 40": 40960,
                      "L40S": 46068, "A10G": 23028, "GH200": 97871}


@dataclass(frozen=True)
class MemoryFlags:
    """The `vllm serve` flags the plan reads; None: vLLM's default for the release and GPU."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[int] = None
    kv_cache_dtype: Optional[str] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    quantization: Optional[str] = None
    enforce_eager: bool = False
    entrypoint: str = "serve"  # "serve" (vllm serve) | "llm" (the LLM class): their defaults differ


@dataclass(frozen=True)
class MemoryPlan:
    gpu_name: Optional[str]
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
    verdict: str
    estimated_max_model_len: Optional[int] = None
    vllm_message: Optional[str] = None
    vllm_source: Optional[str] = None  # the release's module that raises vllm_message (`error_module`)
    fixes: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    def to_dict(self) -> dict:
        doc = {k: getattr(self, k) for k in (
            "gpu_name", "total_gib", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
            "max_num_batched_tokens", "block_size", "weights_gib", "kv_cache_gib", "kv_cache_blocks",
            "kv_cache_tokens", "max_concurrency", "needed_gib", "verdict", "estimated_max_model_len",
            "vllm_message", "vllm_source")}
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


def device_total_bytes(gpu_name: Optional[str], table_bytes: int, probed: bool) -> int:
    """A probed GPU's total as NVML reports it; a --gpu target's as the card reports it (the table
    holds the marketing size: an "80GB" H100 has 79.65 GiB)."""
    if probed or not gpu_name:
        return table_bytes
    for key, mib in REPORTED_TOTAL_MIB.items():
        if all(part in gpu_name for part in key.split()):
            return mib * 2**20
    return table_bytes


def scheduler_defaults(rules: Mapping, total_bytes: int, gpu_name: Optional[str], entrypoint: str) -> tuple[int, int]:
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


def _text(hf_config: Mapping) -> Mapping:
    text = hf_config.get("text_config")
    return text if isinstance(text, Mapping) and "hidden_size" in text else hf_config


def config_max_model_len(hf_config: Mapping) -> int:
    """The config's context length, as vLLM derives max_model_len by default (the smallest of these keys)."""
    c = _text(hf_config)
    keys = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")
    values = [int(c[k]) for k in keys if isinstance(c.get(k), int)]
    return min(values) if values else 2048


def activation_peak_bytes(hf_config: Mapping, facts: Any, tokens: int, seqs: int, tp: int) -> float:
    """The profile run's peak beyond the weights: the widest intermediate of one layer for `tokens`
    tokens (a gated MLP holds gate+up and their product; a Mamba layer its in_proj output; an MoE
    layer each token's top-k expert inputs) plus the sampler's float32 logits for `seqs` requests."""
    c = _text(hf_config)
    hidden = int(c["hidden_size"])
    dtype_bytes = DTYPE_BYTES.get(facts.dtype, 2.0)
    widths = [3 * int(c.get("intermediate_size") or 4 * hidden) / tp]
    if c.get("moe_intermediate_size") or c.get("num_experts_per_tok"):
        topk = int(c.get("num_experts_per_tok") or 2)
        expert = c.get("moe_intermediate_size") or c.get("intermediate_size") or 4 * hidden
        widths.append(topk * 3 * int(expert) / tp)
    layout = facts.hybrid_layout
    if layout is not None and "intermediate_size" in dict(layout.sizes):
        widths.append(3 * layout.size("intermediate_size") / tp)
    vocab = int(c.get("vocab_size") or hf_config.get("vocab_size") or 0)
    return tokens * max(widths) * dtype_bytes + seqs * vocab * 4


def _kv_bytes_per_token_layer(facts: Any, kv_cache_dtype: Optional[str], tp: int) -> float:
    item = 1.0 if is_fp8(kv_cache_dtype or "auto") else DTYPE_BYTES.get(facts.dtype, 2.0)
    if facts.use_mla:  # one latent head, replicated on every rank (MLAAttentionSpec)
        return ((facts.kv_lora_rank or 512) + (facts.qk_rope_head_dim or 64)) * item
    kv_heads = max(1, facts.num_kv_heads // tp)
    return 2 * kv_heads * facts.head_size * item


@dataclass(frozen=True)
class _Cache:
    """How the KV cache of one GPU is laid out. Layers of one kind (full attention, sliding window,
    Mamba state) share block ids in groups of `group_size` layers (vLLM's hybrid allocator: one
    tensor per group slot, kv_cache_utils.py); a block id costs `page_bytes x group_size`."""

    block_size: int
    page_bytes: float  # one layer's page (one block of it)
    group_size: int
    full_layers: int
    sliding_layers: int = 0
    window: int = 0  # sliding window (tokens)
    batched_tokens: int = 0
    state_layers: int = 0
    state_blocks: int = 0  # blocks a request pins in the state groups (hybrid)

    @property
    def block_bytes(self) -> float:
        return self.page_bytes * self.group_size

    def _sliding_blocks(self, n: int) -> int:
        """SlidingWindowSpec.max_memory_usage_bytes: the window plus a step's tokens, one spare block."""
        return math.ceil(min(self.window - 1 + self.batched_tokens, n) / self.block_size) + 1

    def needed_bytes(self, n: int) -> float:
        """vLLM's max_memory_usage_bytes summed over the layers: full attention cdiv(n, block)
        pages, sliding window its window's, a state layer one page."""
        pages = self.full_layers * math.ceil(n / self.block_size) + self.state_layers
        if self.sliding_layers:
            pages += self.sliding_layers * self._sliding_blocks(n)
        return pages * self.page_bytes

    def blocks_per_request(self, n: int) -> int:
        """Block ids one request of n tokens holds, over the groups (get_max_concurrency_for_kv_cache_config)."""
        groups = math.ceil(self.full_layers / self.group_size) * math.ceil(n / self.block_size) + self.state_blocks
        if self.sliding_layers:
            groups += math.ceil(self.sliding_layers / self.group_size) * self._sliding_blocks(n)
        return groups


def group_size(counts: list[int]) -> int:
    """vLLM's group size for layers of several kinds: the smallest count, or the largest when the
    counts are within 1.5x of each other (kv_cache_utils.py, the same rule as attention/hybrid/groups.py)."""
    counts = [n for n in counts if n > 0]
    size = min(counts)
    return max(counts) if max(counts) < size * 1.5 else size


def sliding_split(hf_config: Mapping, facts: Any, layers: int) -> int:
    """How many layers use the sliding window: the config's layer_types, Gemma-3's pattern (every
    Nth layer global), Gemma-2's alternation, else all of them when vLLM applies the window."""
    if not facts.sliding_window:
        return 0
    c = _text(hf_config)
    types = c.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types[:layers] if t == "sliding_attention")
    pattern = c.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0:
        return layers - layers // pattern
    if facts.model_type in ("gemma2", "gemma3", "gemma3_text"):
        return layers // 2
    return layers


def _cache_layout(hf_config: Mapping, facts: Any, explanation: Any, flags: MemoryFlags, batched_tokens: int) -> _Cache:
    tp, pp = flags.tensor_parallel_size, flags.pipeline_parallel_size
    hybrid = getattr(explanation, "hybrid", None) if explanation is not None else None
    if hybrid is not None:
        groups, layout = hybrid.groups, facts.hybrid_layout
        return _Cache(hybrid.block_size, hybrid.attention_page_bytes, max(1, math.ceil(groups.group_size / pp)),
                      math.ceil(layout.attention_layers / pp), state_layers=math.ceil(layout.mamba_layers / pp),
                      state_blocks=groups.blocks_pinned_per_request - groups.attention_groups)
    block = (getattr(explanation, "block_size", None) if explanation is not None else None) or 16
    layers = math.ceil(int(_text(hf_config).get("num_hidden_layers") or 1) / pp)
    page = _kv_bytes_per_token_layer(facts, flags.kv_cache_dtype or facts.kv_cache_dtype_forced, tp) * block
    sliding = sliding_split(hf_config, facts, layers)
    full = layers - sliding
    return _Cache(block, page, group_size([full, sliding]), full, sliding, int(facts.sliding_window or 0), batched_tokens)


def format_gib(n: float) -> str:
    """vLLM's utils/mem_utils.py format_gib: rounded to 2 places (16.0, 9.35)."""
    return f"{round(n / GIB, 2)}"


def _search_max_len(cache: _Cache, available: float, limit: int) -> int:
    """vLLM's estimate_max_model_len: the longest request whose KV cache fits (binary search)."""
    if cache.needed_bytes(1) > available:
        return 0
    low, high, best = 1, limit, 1
    while low <= high:
        mid = (low + high) // 2
        if cache.needed_bytes(mid) <= available:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def _reserved(rules: Mapping, activation: float, flags: MemoryFlags) -> tuple[float, float, float]:
    """Activation peak (+-its share of uncertainty), non-torch memory and the CUDA-graph estimate."""
    spread = float(rules["activation_spread"])
    graphs = (0.0, 0.0) if flags.enforce_eager else tuple(rules["cudagraph_gib"])
    non_torch = tuple(rules["non_torch_gib"])
    low = activation * (1 - spread) + (non_torch[0] + graphs[0]) * GIB
    high = activation * (1 + spread) + (non_torch[1] + graphs[1]) * GIB
    return low, (low + high) / 2, high


def plan_memory(hf_config: Mapping, facts: Any, explanation: Any, rules: Mapping, flags: MemoryFlags, *,
                total_bytes: int, gpu_name: Optional[str] = None) -> MemoryPlan:
    """The plan of the busiest GPU (the largest pipeline stage's TP shard) of a group of `total_bytes` GPUs."""
    tp = flags.tensor_parallel_size
    util = flags.gpu_memory_utilization if flags.gpu_memory_utilization is not None else float(rules["gpu_memory_utilization"])
    tokens, seqs = scheduler_defaults(rules, total_bytes, gpu_name, flags.entrypoint)
    tokens, seqs = flags.max_num_batched_tokens or tokens, flags.max_num_seqs or seqs
    max_len = flags.max_model_len or config_max_model_len(hf_config)
    weights = weight_bytes(hf_config, facts, tp=tp, pp=flags.pipeline_parallel_size, quantization=flags.quantization)
    reserved = _reserved(rules, activation_peak_bytes(hf_config, facts, tokens, seqs, tp), flags)
    requested = util * total_bytes
    cache = _cache_layout(hf_config, facts, explanation, flags, tokens)
    kv = [requested - weights.total - r for r in reversed(reserved)]  # low, mid, high
    blocks = [max(0, int(b // cache.block_bytes)) for b in kv]
    per_request = cache.blocks_per_request(max_len)
    concurrency = blocks[1] / per_request if per_request else 0.0
    # vLLM reports int(concurrency x max_model_len) tokens (get_kv_cache_capacity): blocks x block
    # size for a full-attention model whose length is a multiple of the block
    token_counts = [int(b / per_request * max_len) for b in blocks]
    needed = cache.needed_bytes(max_len)
    plan = MemoryPlan(
        gpu_name=gpu_name, total_gib=total_bytes / GIB, gpu_memory_utilization=util, max_model_len=max_len,
        max_num_seqs=seqs, max_num_batched_tokens=tokens, block_size=cache.block_size,
        weights_gib=weights.gib, reserved_gib=tuple(r / GIB for r in reserved),  # type: ignore[arg-type]
        kv_cache_gib=max(0.0, kv[1]) / GIB, kv_cache_blocks=blocks[1], kv_cache_tokens=token_counts[1],
        kv_cache_tokens_range=(token_counts[0], token_counts[2]), max_concurrency=concurrency,
        needed_gib=needed / GIB, verdict=FITS, notes=_notes(weights, facts),
    )
    return _judge(plan, rules, cache, weights, kv[1], total_bytes, requested)


def _notes(weights: WeightBytes, facts: Any) -> tuple[str, ...]:
    notes = [f"weights counted from config.json: {weights.parameters / 1e9:.1f}B parameters, "
             f"{weights.linear_bytes_per_param:g} bytes each in linear layers ({weights.quantization or facts.dtype})"]
    return tuple(notes)


def _judge(plan: MemoryPlan, rules: Mapping, cache: _Cache, weights: WeightBytes, available: float,
           total_bytes: int, requested: float) -> MemoryPlan:
    from dataclasses import replace

    if weights.total > total_bytes:
        # vLLM dies in torch's allocator (CUDA out of memory, naming one tensor): no text of its own to quote
        return replace(plan, verdict=WEIGHTS, kv_cache_gib=0.0)
    if available <= 0:
        return replace(plan, verdict=NO_CACHE_MEMORY, vllm_message=rules["no_cache_memory"].format(hint=_hint(rules)),
                       kv_cache_gib=0.0, vllm_source=_raised_in(rules))
    needed = cache.needed_bytes(plan.max_model_len)
    if needed <= available:
        return plan
    estimated = _search_max_len(cache, available, plan.max_model_len)
    estimated_msg = rules["estimated_msg"].format(estimated=estimated) if estimated > 0 else ""
    text = rules["max_model_len_error"].format(
        max_model_len=plan.max_model_len, needed_gib=format_gib(needed), available_gib=format_gib(available),
        estimated_msg=estimated_msg, hint=_hint(rules))
    return replace(plan, verdict=MAX_MODEL_LEN, vllm_message=text, estimated_max_model_len=estimated,
                   vllm_source=_raised_in(rules))


def _hint(rules: Mapping) -> str:
    """The advice a refusal ends with from 0.34.0 (`{hint}`): the last of the release's texts, the one for
    a cache sized by profiling, which this plan models (kv_cache_planning.py:64 @ 0.34.0)."""
    return (rules.get("kv_cache_hints") or {}).get("returns", [""])[-1]


def _raised_in(rules: Mapping) -> Optional[str]:
    """Where the release raises its refusal: kv_cache_utils.py up to 0.32, kv_cache_planning.py from 0.33."""
    module = rules.get("error_module")
    return f"{module} _check_enough_kv_cache_memory" if module else None
