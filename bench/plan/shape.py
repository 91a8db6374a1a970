"""The attention shape `attnsel tune` times: one model layer group per GPU (after tensor
parallelism), from explicit flags (`make_shape`) or a model config (`shape_from_model`).
Torch-free (`--dry-run` works without a GPU).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from attnsel.attention.rules import parse_dtype
from attnsel.errors import CheckFailed, UserInputError

if TYPE_CHECKING:
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.model.rules import ModelRules
    from attnsel.attention.versions import RuleProfile


def check_kv_cache_dtype(kv_cache_dtype: str, profile: RuleProfile, capability: tuple[int, int] | None = None) -> None:
    """tune's --kv-cache-dtype against the release whose rules filter the grid (`profile`, the version
    object `explain` asks too). A value that release does not know is bad input (exit 2) listing that
    release's own values; one it knows that tune cannot time is CheckFailed (exit 1, as a grid with
    nothing to time: README, tune's exit codes), "not timed: <why>"."""
    if kv_cache_dtype not in profile.cache_dtypes:
        # selector.get_attn_backend's assert names the same list (docs/vllm-rules.md §4 CacheDType)
        raise UserInputError(f"unknown --kv-cache-dtype {kv_cache_dtype!r} for vLLM {profile.vllm_version} "
                             f"(rule profile {profile.name}); one of {', '.join(profile.cache_dtypes)}")
    why = untimed_kv_cache_dtype(kv_cache_dtype, profile, capability)
    if why:
        raise CheckFailed(f"not timed: {why}")


def untimed_kv_cache_dtype(kv_cache_dtype: str, profile: RuleProfile, capability: tuple[int, int] | None) -> str | None:
    """Why tune cannot time a cache dtype the release accepts; None when it can."""
    from attnsel.attention.kernels import TIMED_KV_CACHE_DTYPES

    explain = f"`attnsel explain --kv-cache-dtype {kv_cache_dtype}` gives vLLM's verdict without timing"
    if kv_cache_dtype not in TIMED_KV_CACHE_DTYPES:
        return (f"vLLM {profile.vllm_version} accepts --kv-cache-dtype {kv_cache_dtype}, but tune's kernel adapters "
                f"build only {', '.join(TIMED_KV_CACHE_DTYPES)} caches (attention/kernels/kv_quant.py); {explain}")
    if kv_cache_dtype == "bfloat16" and capability is not None and tuple(capability) < (8, 0):
        # CudaPlatformBase: bf16 needs compute capability 8.0 (probe/capability.py supported_dtypes)
        return (f"a bfloat16 KV cache needs compute capability 8.0; this GPU has {capability[0]}.{capability[1]} "
                f"(--kv-cache-dtype float16 or auto)")
    return None


@dataclass(frozen=True)
class TuneShape:
    """The attention shape of one model layer group, per GPU (after tensor parallelism)."""

    head_size: int
    num_q_heads: int  # per GPU
    num_kv_heads: int  # per GPU
    dtype: str  # "bfloat16" | "float16" | "float32"
    kv_cache_dtype: str = "auto"
    use_mla: bool = False
    model: str | None = None
    assumed: str | None = None  # what tune assumed that the user did not say (default head layout)
    tensor_parallel_size: int = 1
    # Model-derived selector facts that change vLLM's verdict (docs/vllm-rules.md §2, §6); the kernels
    # timed here do not model them (no sinks, no sliding window): rows say so in their notes.
    has_sink: bool = False
    use_sparse: bool = False
    use_mm_prefix: bool = False
    attn_type: str = "decoder"
    is_hybrid: bool = False
    mamba_cache_float32: bool = False
    sliding_window: int | None = None
    # MLA layers (bench/plan/mla.py): head_size = kv_lora_rank + qk_rope_head_dim, one KV head
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    index_topk: int | None = None  # sparse MLA: the indexer's top-k, which later releases' rules check
    # hybrid models: {"layout": HybridLayout.to_json(), "mamba_ssm_cache_dtype", "mamba_cache_dtype",
    # "prefix_caching", "mamba_cache_mode"}: what vLLM's block-size alignment reads (attention/hybrid;
    # bench/plan/rules.py)
    hybrid: dict | None = None

    def describe(self) -> str:
        src = f"{self.model}, TP={self.tensor_parallel_size}: " if self.model else ""
        if self.use_mla and self.kv_lora_rank is not None:
            return f"{src}{describe_mla(self)}, {self.dtype}, kv cache {self.kv_cache_dtype}"
        gqa = f"{self.num_q_heads}/{self.num_kv_heads} heads"
        return f"{src}head_size {self.head_size}, {gqa} per GPU, {self.dtype}, kv cache {self.kv_cache_dtype}"

    def to_dict(self) -> dict:
        return asdict(self)


# `attnsel tune --head-size N --dtype D` with no head counts times one representative layout per
# head size: the query / KV heads (per GPU) of widely served models with that head size. The output
# names it; --num-heads / --num-kv-heads or --model tune the real one.
DEFAULT_HEAD_LAYOUTS: dict[int, tuple[int, int, str]] = {
    64: (32, 8, "Llama-3.2-1B, gpt-oss-20b at TP 2"),
    80: (32, 32, "Phi-2, StableLM-3B"),
    96: (32, 32, "Phi-3-mini"),
    128: (32, 8, "Llama-3.1-8B, Qwen3-8B, Mistral-7B"),
    256: (16, 8, "Gemma-2-9B, Gemma-3-12B"),
}
# other head sizes: GQA group 4 (32 query / 8 KV heads), the most common group among served models
FALLBACK_HEAD_LAYOUT = (32, 8, "GQA group 4, the most common among served models")


def default_head_layout(head_size: int) -> tuple[int, int, str]:
    """(query heads, KV heads, the note the output prints) assumed when only --head-size is given.

    >>> default_head_layout(128)[:2]
    (32, 8)
    """
    q, kv, like = DEFAULT_HEAD_LAYOUTS.get(head_size, FALLBACK_HEAD_LAYOUT)
    note = (f"no --num-heads given: assumed {q} query / {kv} KV heads per GPU at head size {head_size} "
            f"({like}); pass --num-heads/--num-kv-heads or --model to tune your model's layout")
    return q, kv, note


def make_shape(
    head_size: int,
    num_heads: int,
    num_kv_heads: int | None,
    dtype: str,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
) -> TuneShape:
    """A shape from explicit flags; heads are model totals, divided by TP like vLLM does
    (heads per GPU = total // TP, KV heads per GPU = max(1, kv // TP): attention/selector heads_per_gpu)."""
    kv = num_heads if num_kv_heads is None else num_kv_heads
    if head_size <= 0 or num_heads <= 0 or kv <= 0:
        raise UserInputError("--head-size, --num-heads and --num-kv-heads must be positive")
    if tensor_parallel_size <= 0:
        raise UserInputError("--tensor-parallel-size must be positive")
    if num_heads % kv:
        raise UserInputError(f"--num-heads {num_heads} is not a multiple of --num-kv-heads {kv} (GQA groups must be equal)")
    from attnsel.attention.selector import (
        heads_per_gpu,  # vLLM's split, the one explain uses
    )

    q_per_gpu, kv_per_gpu = heads_per_gpu(num_heads, kv, tensor_parallel_size)
    return TuneShape(
        head_size=head_size,
        num_q_heads=int(q_per_gpu or 0),
        num_kv_heads=int(kv_per_gpu or 0),
        dtype=parse_dtype(dtype),
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel_size=tensor_parallel_size,
    )


def shape_from_model(
    model: str,
    *,
    capability: tuple[int, int] | None,
    dtype: str = "auto",
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    model_rules: ModelRules | None = None,
    mamba_ssm_cache_dtype: str = "auto",
) -> TuneShape:
    """The same derivation as `explain --model` (attention/model/config.py); `model_rules`: the
    version's (default: the library's)."""
    from attnsel.attention.model import config as model_config

    hf = model_config.load_model_config(model)
    facts = model_config.derive_model_facts(
        hf, capability=capability, dtype=dtype, tensor_parallel_size=tensor_parallel_size, profile=model_rules,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
    )
    if facts.dtype_error:
        raise UserInputError(facts.dtype_error)
    if facts.is_attention_free:
        raise UserInputError(f"{model} has no attention layers (model_type {facts.model_type}): vLLM picks no "
                             "attention backend for it, so there is nothing to tune")
    from attnsel.attention.selector import heads_per_gpu

    return TuneShape(
        head_size=int(facts.head_size),
        num_q_heads=int(facts.num_heads_per_gpu),
        num_kv_heads=int(heads_per_gpu(None, int(facts.num_kv_heads), tensor_parallel_size)[1] or 0),
        dtype=parse_dtype(str(facts.dtype)),
        kv_cache_dtype=(getattr(facts, "kv_cache_dtype_forced", None) if kv_cache_dtype == "auto" else None)
        or kv_cache_dtype,
        use_mla=bool(facts.use_mla),
        model=str(model),
        tensor_parallel_size=tensor_parallel_size,
        has_sink=bool(facts.has_sink),
        use_sparse=bool(facts.use_sparse),
        use_mm_prefix=bool(facts.use_mm_prefix),
        attn_type=str(facts.attn_type),
        is_hybrid=bool(facts.is_hybrid),
        mamba_cache_float32=bool(facts.mamba_cache_float32),
        sliding_window=getattr(facts, "sliding_window", None),
        hybrid=_hybrid_fields(facts),
        **mla_fields_from_facts(facts),
    )


def _hybrid_fields(facts: ModelFacts) -> dict[str, Any] | None:
    layout = getattr(facts, "hybrid_layout", None)
    if layout is None:
        return None
    return {"layout": layout.to_json(), "mamba_ssm_cache_dtype": facts.mamba_ssm_cache_dtype,
            "mamba_cache_dtype": facts.mamba_cache_dtype, "prefix_caching": None, "mamba_cache_mode": None}


def with_kv_cache_dtype(shape: TuneShape, kv_cache_dtype: str) -> TuneShape:
    return replace(shape, kv_cache_dtype=kv_cache_dtype)


def mla_fields_from_facts(facts: ModelFacts) -> dict[str, Any]:
    """The MLA sizes `explain --model` derived (attention/model/config.py: head_size is
    kv_lora_rank + qk_rope_head_dim for an MLA model)."""
    if not facts.use_mla:
        return {}
    rope = int(facts.qk_rope_head_dim or 0)
    return dict(kv_lora_rank=int(facts.head_size) - rope, qk_rope_head_dim=rope,
                qk_nope_head_dim=facts.qk_nope_head_dim, v_head_dim=facts.v_head_dim, index_topk=facts.index_topk)


def describe_mla(shape: TuneShape) -> str:
    """"MLA, 16 query heads per GPU over one latent cache (kv_lora_rank 512 + rope 64 = 576)"."""
    return (f"MLA, {shape.num_q_heads} query heads per GPU over one latent cache (kv_lora_rank {shape.kv_lora_rank} "
            f"+ rope {shape.qk_rope_head_dim} = {shape.head_size})")
