"""What attnsel derives from a model config, in the names vLLM's selector uses (docs/vllm-rules.md §6):
`ModelFacts` (and the ViT inputs, `VisionFacts`). Built by `model_config.derive_model_facts`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from attnsel.attention.hybrid import HybridLayout


@dataclass(frozen=True)
class VisionFacts:
    """Inputs of the ViT backend choice (§8): `get_vit_attn_backend(head_size, dtype)`."""

    head_size: int
    dtype: str
    num_heads: int
    model_type: str | None = None


@dataclass(frozen=True)
class ModelFacts:
    """What vLLM derives from a model config, in the names the selector uses (§6)."""

    model_type: str
    text_model_type: str
    architectures: tuple[str, ...]
    head_size: int
    num_attention_heads: int  # total, from the config
    num_kv_heads: int  # what the attention layers see (1 for MLA layers)
    num_heads_per_gpu: int  # total // tensor_parallel_size: the `num_heads` vLLM passes
    tensor_parallel_size: int
    dtype: str  # "float16" | "bfloat16" | "float32"
    dtype_source: str
    use_mla: bool
    use_sparse: bool
    has_sink: bool
    use_mm_prefix: bool
    attn_type: str  # "decoder" | "encoder_only" | ...
    is_hybrid: bool
    is_attention_free: bool
    is_pooling_model: bool
    mamba_ssm_cache_dtype: str
    mamba_cache_dtype: str
    mamba_cache_float32: bool
    qk_nope_head_dim: int | None
    has_index_topk: bool
    kv_cache_dtype_forced: str | None
    sliding_window: int | None
    vision: VisionFacts | None
    profile: str
    capability: tuple[int, int] | None
    dtype_error: str | None  # vLLM's bf16-on-old-GPU error (§5g), if it applies
    warnings: tuple[str, ...]  # vLLM warning lines, formatted
    infos: tuple[str, ...]  # vLLM info lines, formatted
    notes: tuple[str, ...]  # how each value was derived
    # MLA dims and the sparse indexer's top-k (later rules: TOKENSPEED_MLA, sparse MLA backends)
    qk_rope_head_dim: int | None = None
    kv_lora_rank: int | None = None
    v_head_dim: int | None = None
    index_topk: int | None = None
    hybrid_layout: HybridLayout | None = None  # attention/hybrid/layout.py (hybrid models)

    def selector_fields(self) -> dict[str, object]:
        """The model-derived fields of `AttentionSelectorConfig` (§2), in its field order."""
        return {
            "head_size": self.head_size,
            "dtype": self.dtype,
            "use_mla": self.use_mla,
            "has_sink": self.has_sink,
            "use_sparse": self.use_sparse,
            "use_mm_prefix": self.use_mm_prefix,
            "attn_type": self.attn_type,
        }

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["architectures"] = list(self.architectures)
        d["hybrid_layout"] = self.hybrid_layout.to_dict() if self.hybrid_layout is not None else None
        d["capability"] = None if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"
        for key in ("warnings", "infos", "notes"):
            d[key] = list(d[key])
        return d
