"""How much memory a release gives the KV cache: what the profile run reserves, and the two sizings.

The reserve beyond the weights (v1/worker/gpu_worker.py determine_available_memory, 0.33.0:
`requested - non_kv_cache_memory - cudagraph_memory_estimate`):
- the profile run's activation peak (`transient_peak_headroom`): one dummy forward of
  max_num_batched_tokens tokens (v1/worker/gpu/model_runner.py:1022-1052 profile_run) and the sampler
  over min(max_num_seqs, max_num_batched_tokens) requests, run twice, the second time with every
  sampling feature on (`_dummy_sampler_run`, :993-1014, `SamplingParams.for_sampler_warmup`);
- memory outside torch's allocator (CUDA context growth, cuBLAS / NCCL workspaces): measured only;
- the CUDA-graph estimate (`profile_cudagraph_memory`, gpu/cudagraph_utils.py:922-1000: piecewise
  graphs captured in full, the largest full graphs sampled and extrapolated): measured only; its size
  follows the number of capture sizes, which follows max_num_seqs (config/vllm.py:2398-2470
  `_set_cudagraph_sizes`: [1, 2, 4] + every 8th to 248 + every 16th up to min(2 x max_num_seqs, 512)).

Two sizings, named by the release data's `memory.sizing`:
- `profiled` (0.17-0.33): KV = utilization x total - weights - that reserve;
- `extensible_when_supported` (0.34): the extensible KV cache (docs/memory.md). The address range is
  reserved first from the profiled figure at a utilization of 1.0 (no CUDA-graph estimate taken off:
  v1/worker/gpu/model_runner.py:1121-1125 @ 0.34.0), then the cache is committed from the memory free
  after warm-up and CUDA-graph capture, less max(1 GiB, 0.75 x the profiled peak) and the peak itself
  (v1/worker/extensible_kv_cache.py:64-71, 596-617 @ 0.34.0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnsel.attention.memory.cache import text_config
from attnsel.attention.memory.weights import DTYPE_BYTES

if TYPE_CHECKING:
    from attnsel.attention.memory.plan import MemoryFlags
    from attnsel.attention.model.facts import ModelFacts

GIB = 2**30
DEFAULT_CAPTURE_SIZES = 51  # [1, 2, 4] + 31 steps of 8 + 17 of 16: max_num_seqs >= 256, 512 tokens


@dataclass(frozen=True)
class Reserve:
    """The profile run's figures, bytes, each (low, mid, high)."""

    activation: tuple[float, float, float]
    non_torch: tuple[float, float, float]
    graphs: tuple[float, float, float]
    parts: dict = field(default_factory=dict)  # the activation's components (bytes), for the notes

    @property
    def total(self) -> tuple[float, float, float]:
        return tuple(a + n + g for a, n, g in zip(self.activation, self.non_torch, self.graphs))  # type: ignore[return-value]


def capture_sizes(cudagraph: Mapping | None, seqs: int, batched_tokens: int) -> int:
    """How many batch sizes vLLM captures (the version data's `cudagraph.capture_size_rule`)."""
    largest = min(2 * seqs, int((cudagraph or {}).get("max_capture_size") or 512), batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, min(256, largest + 1), 8)) + list(range(256, largest + 1, 16))
    return len(sizes)


def _moe_workspace(c: Mapping, tokens: int, tp: int, kernel: str = "triton") -> float:
    """Elements of the fused-MoE workspaces, no chunking of M in 0.33 (modular_kernel.py:1354-1367):
    - "triton" (fused_moe/experts/triton_moe.py:240-255 @ 0.33.0): (M, topk, max(I, H)) + (M, topk, max(2I, H));
    - "gpt_oss_triton" (mxfp4 experts, gpt_oss_triton_kernels_moe.py:1107-1123): (M x topk, I) and the
      (M, H) output; the kernel allocates the rest inside."""
    if not (c.get("num_experts_per_tok") and (c.get("moe_intermediate_size") or c.get("num_local_experts")
                                               or c.get("n_routed_experts") or c.get("num_experts"))):
        return 0.0
    hidden, topk = int(c["hidden_size"]), int(c["num_experts_per_tok"])
    inter = int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 4 * hidden) / tp
    if kernel == "gpt_oss_triton":
        return tokens * topk * inter + tokens * hidden
    return tokens * topk * (max(inter, hidden) + max(2 * inter, hidden))


def _widest_layer(hf_config: Mapping, facts: ModelFacts, tp: int) -> float:
    """Elements per token of the widest dense intermediate: a gated MLP's gate+up and their product,
    a Mamba layer's in_proj."""
    c = text_config(hf_config)
    hidden = int(c["hidden_size"])
    widths = [3 * int(c.get("intermediate_size") or 4 * hidden) / tp]
    layout = facts.hybrid_layout
    if layout is not None and "intermediate_size" in dict(layout.sizes):
        widths.append(3 * layout.size("intermediate_size") / tp)
    return max(widths)


def activation_parts(hf_config: Mapping, facts: ModelFacts, act: Mapping, tokens: int, reqs: int, tp: int,
                     quantization: str | None = None) -> dict:
    """The profile run's memory, component by component (bytes): `peak` is the transient peak
    (`transient_peak_headroom`), `kept` what stays allocated after it (vLLM counts it as consumed):
    the sampler's max-batch buffers and the fused-MoE workspace the workspace manager locks."""
    c = text_config(hf_config)
    item = DTYPE_BYTES.get(facts.dtype, 2.0)
    hidden = int(c["hidden_size"])
    vocab = int(c.get("vocab_size") or hf_config.get("vocab_size") or 0)
    residual = tokens * hidden * item * float(act.get("hidden_copies", 2))
    kernels = act.get("moe_kernel") or {}
    moe = _moe_workspace(c, tokens, tp, kernels.get(quantization or "", kernels.get("default", "triton"))) * item
    forward = residual + tokens * _widest_layer(hf_config, facts, tp) * item
    sampler = reqs * vocab * float(act["sampler_bytes_per_logit"])
    kept_sampler = reqs * vocab * float(act.get("sampler_kept_bytes_per_logit", 0))
    kept_moe = moe if act.get("moe_workspace_kept") else 0.0
    peak = max(forward if kept_moe else max(forward, residual + moe), residual + sampler)
    return {"forward": forward, "moe_workspace": moe, "sampler": sampler, "sampler_kept": kept_sampler,
            "peak": peak, "kept": kept_sampler + kept_moe}


def legacy_activation(hf_config: Mapping, facts: ModelFacts, tokens: int, seqs: int, tp: int) -> float:
    """The 0.24-fitted estimate (`activation_model` "widest_layer"): the widest intermediate (MoE: top-k
    expert inputs) plus the sampler's float32 logits."""
    c = text_config(hf_config)
    hidden = int(c["hidden_size"])
    widths = [_widest_layer(hf_config, facts, tp)]
    if c.get("moe_intermediate_size") or c.get("num_experts_per_tok"):
        topk = int(c.get("num_experts_per_tok") or 2)
        widths.append(topk * 3 * int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 4 * hidden) / tp)
    vocab = int(c.get("vocab_size") or hf_config.get("vocab_size") or 0)
    return tokens * max(widths) * DTYPE_BYTES.get(facts.dtype, 2.0) + seqs * vocab * 4


def reserve(hf_config: Mapping, facts: ModelFacts, rules: Mapping, *, tokens: int, seqs: int, tp: int, eager: bool,
            graph_sizes: int, quantization: str | None = None) -> Reserve:
    spread = float(rules["activation_spread"])
    kept = 0.0
    if rules.get("activation_model") == "components":
        parts = activation_parts(hf_config, facts, rules["activation"], tokens, min(seqs, tokens), tp, quantization)
        peak, kept = parts["peak"], parts["kept"]
    else:
        parts, peak = {}, legacy_activation(hf_config, facts, tokens, seqs, tp)
    low, high = tuple(rules["non_torch_gib"])
    graphs = (0.0, 0.0) if eager else tuple(g * graph_sizes / DEFAULT_CAPTURE_SIZES for g in rules["cudagraph_gib"])
    return Reserve((peak * (1 - spread), peak, peak * (1 + spread)),
                   (low * GIB + kept, (low + high) / 2 * GIB + kept, high * GIB + kept),
                   (graphs[0] * GIB, (graphs[0] + graphs[1]) / 2 * GIB, graphs[1] * GIB), parts)


@dataclass(frozen=True)
class Sizing:
    """The KV bytes of one GPU, (low, mid, high) each: `capacity` is what the profile-based figure
    gives (the address range the extensible cache reserves); `final` what the cache ends with."""

    name: str
    utilization: float
    capacity: tuple[float, float, float]
    final: tuple[float, float, float]
    extensible: bool = False
    note: str | None = None


def extensible_on(rules: Mapping, flags: MemoryFlags) -> tuple[bool, str | None]:
    """config/vllm.py `_resolve_extensible_kv_cache` (0.34.0:3180-3271): on where supported when unset;
    (on, why it is off). Flags that turn it off are the data's `off_when` (flag -> vLLM's reason)."""
    ext = rules.get("extensible_kv_cache") or {}
    if rules.get("sizing") != "extensible_when_supported":
        return False, None
    requested = getattr(flags, "enable_extensible_kv_cache", None)
    if requested is False:
        return False, "--no-enable-extensible-kv-cache"
    for flag, reason in (ext.get("off_when") or {}).items():
        if getattr(flags, flag, None) is not None:
            return False, reason
    return bool(ext.get("default_on", True)) if requested is None else True, None


def warmup_peak(facts: ModelFacts, ext: Mapping, tokens: int, tp: int) -> float:
    """The transient of 0.34's sizing warm-up beyond the profile run's (gpu_worker.py:1072-1093: full-batch
    steps with the real attention and Mamba metadata, where the profile run skips them): for a Mamba-2
    model, the chunked scan's states of max_num_batched_tokens tokens (chunks x heads x head_dim x state)
    at the data's fitted bytes per state element; 0 for other models."""
    layout = getattr(facts, "hybrid_layout", None)
    per_state = float(ext.get("mamba_warmup_bytes_per_state", 0))
    if layout is None or layout.kind != "mamba2" or not per_state:
        return 0.0
    chunks = math.ceil(tokens / layout.chunk_size)
    return chunks * layout.size("num_heads") / tp * layout.size("head_dim") * layout.size("state_size") * per_state


def size_kv(rules: Mapping, flags: MemoryFlags, *, total: int, weights: float, res: Reserve, warmup: float = 0.0) -> Sizing:
    """The release's sizing of the KV cache (its data's `sizing`)."""
    on, why_off = extensible_on(rules, flags)
    ext = rules.get("extensible_kv_cache") or {}
    util = flags.gpu_memory_utilization
    if util is None:
        util = float(rules["gpu_memory_utilization_extensible"]) if on else float(rules["gpu_memory_utilization"])
    # what CUDA reports as the device's total (vLLM's MemorySnapshot) is a little below NVML's
    total = int(total - float(rules.get("cuda_total_gap_gib") or 0.0) * GIB)
    # low KV = high reserve; the extensible cache takes no CUDA-graph estimate off its reservation
    # (v1/worker/gpu/model_runner.py:1121-1125 @ 0.34.0: it measures the graphs after capture)
    reserved = res.total if not on else tuple(a + n for a, n in zip(res.activation, res.non_torch))
    capacity = tuple(util * total - weights - r for r in reversed(reserved))
    if not on:
        note = ext.get("off_warning", "").format(reason=why_off) if why_off and ext else None
        return Sizing("profiled", util, capacity, capacity, note=note)  # type: ignore[arg-type]
    final, unbounded = [], []
    startup_context = float(rules["checks"]["startup_free"]["context_gib"])
    for act, non_torch, graphs, ctx, growth in zip(reversed(res.activation), reversed(res.non_torch),
                                                   reversed(res.graphs), reversed(_span(ext["context_gib"])),
                                                   _span(ext["reservation_growth_gib"])):
        # gpu_worker.py:771-773, 946-948: the profiled transient (+ the graph estimate, 0 with this cache),
        # or warm-up's if larger (record_transient_peak, extensible_kv_cache.py:268-277)
        peak = max(act, warmup)
        used = weights + non_torch + graphs  # the graphs captured before the commit
        margin = max(float(ext["margin_floor_gib"]) * GIB, float(ext["margin_fraction"]) * peak)
        device = total - ctx * GIB - used - margin  # free + committed after warm-up, less the margin
        # measure_kv_cache_bytes (extensible_kv_cache.py:591-618): the budget's non-KV use is counted from
        # the first snapshot, so it holds what warm-up left beyond the CUDA context; then the larger of the
        # allocated peak and torch's reservation growth stays free (the growth: measured, `reservation_growth_gib`)
        budget = util * total - used - max(ctx - startup_context, 0.0) * GIB
        kept = peak + growth * GIB
        final.append(min(budget, device) - kept)
        unbounded.append(min(total - ctx * GIB - used, device) - kept)
    note = None
    withheld = unbounded[1] - final[1]
    if "capped_warning" in ext and 0.7 < util < 1.0 and withheld >= GIB:  # extensible_kv_cache.py:650-676
        note = ext["capped_warning"].format(utilization=util, requested_gib=round(util * total / GIB, 2),
                                            withheld_gib=round(withheld / GIB, 2))
    return Sizing("extensible", util, capacity, tuple(final), extensible=True, note=note)  # type: ignore[arg-type]


def _span(pair: Sequence[float]) -> tuple[float, float, float]:
    low, high = float(pair[0]), float(pair[1])
    return low, (low + high) / 2, high
