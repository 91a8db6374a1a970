"""A release's model-level data as one typed value: `ModelRules`, parsed once per release from the
`models` section of its data file (attention/versions/*.json) and cached on the version object
(`RuleProfile.model_rules`). attention/model/ applies these rules to a model's config.json
(docs/vllm-rules.md §6, §7, §9); it sits above this folder and reads them, never the other way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class ModelRules:
    """Model-type lists and per-type defaults for one vLLM version."""

    profile: str
    # §6 use_mla: `is_deepseek_mla` model types (and kv_lora_rank set).
    mla_model_types: frozenset[str]
    # §6: an `eagle` draft whose inner model_type is one of these is MLA too.
    mla_eagle_inner_model_types: frozenset[str]
    # §6 use_mm_prefix: fallback list when hf_config has no `is_mm_prefix_lm`.
    mm_prefix_model_types: frozenset[str]
    # §6 hybrid: model classes with the `IsHybrid` flag, by model_type.
    hybrid_model_types: frozenset[str]
    # §6 attention-free: `IsAttentionFree` model classes, by model_type.
    attention_free_model_types: frozenset[str]
    # §6 dtype: `_FLOAT16_NOT_SUPPORTED_MODELS` (model_type → reason, verbatim).
    float16_not_supported: Mapping[str, str]
    # §6 has_sink: model code that passes `sinks=` to Attention (layer time).
    sink_model_types: frozenset[str]
    # §6 attn_type: models built on EncoderOnlyAttention.
    encoder_only_model_types: frozenset[str]
    # §6 attn_type: Llama/Qwen2/Qwen3 become encoder-only when `is_causal` is False.
    is_causal_switch_model_types: frozenset[str]
    # §6 head_size: per-model-type head size overrides (`MODEL_ARCH_CONFIG_CONVERTORS`).
    zero_head_size_model_types: frozenset[str]
    attention_head_dim_model_types: frozenset[str]
    # vllm/model_executor/models/config.py: NemotronHForCausalLMConfig copies the HF config's
    # `mamba_ssm_cache_dtype` into CacheConfig when the flag is "auto"; this is its default
    # when the HF config has none. Keyed by architecture (the hook is registered per class).
    mamba_ssm_dtype_from_config_architectures: frozenset[str]
    mamba_ssm_dtype_hook_default: str
    # Model types attnsel recognises. Unknown types are refused (bad input) with the closest
    # names, because the derivation would silently be wrong for them.
    known_model_types: frozenset[str]
    # transformers config-class defaults that config.json files rely on by omission
    # (e.g. gemma-3 text configs omit head_dim: Gemma3TextConfig(head_dim=256)).
    transformers_defaults: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    # transformers' composite configs (LlavaConfig, Gemma3Config): the type a text_config /
    # vision_config without "model_type" is built as, whose defaults then fill it
    sub_config_model_types: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # §9 use_mla / head_size: MLA model types that need `head_dim` (not kv_lora_rank)
    # and take it as the head size (DeepSeek-V4 with compress ratios).
    mla_head_dim_model_types: frozenset[str] = frozenset()
    # §9 use_mla: `hf_text_config.is_causal == False` turns MLA off (later releases).
    non_causal_disables_mla: bool = False
    # models/config.py Qwen3_5ForConditionalGenerationConfig (0.18+): a text config's
    # `mamba_ssm_dtype` becomes the "auto" --mamba-ssm-cache-dtype. Keyed by architecture.
    mamba_ssm_dtype_from_text_config_architectures: frozenset[str] = frozenset()
    # config/cache.py `MambaDType`: the values --mamba-ssm-cache-dtype / --mamba-cache-dtype take
    mamba_dtypes: tuple[str, ...] = ("auto", "float32", "float16")
    # models/config.py `MODELS_CONFIG_MAP` hooks that turn --kv-cache-dtype auto into a dtype on
    # CC 10.x (`is_device_capability_family(100)`): architecture -> {kv_cache_dtype, when_text_config_has}.
    sm10x_kv_cache_dtype_architectures: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


_SET_FIELDS = (
    "mla_model_types",
    "mla_eagle_inner_model_types",
    "mm_prefix_model_types",
    "hybrid_model_types",
    "attention_free_model_types",
    "sink_model_types",
    "encoder_only_model_types",
    "is_causal_switch_model_types",
    "zero_head_size_model_types",
    "attention_head_dim_model_types",
    "mamba_ssm_dtype_from_config_architectures",
    "mla_head_dim_model_types",
    "mamba_ssm_dtype_from_text_config_architectures",
)


def model_rules_from_data(profile: str, data: Mapping[str, Any]) -> ModelRules:
    """A version's `models` data as ModelRules. The model types attnsel recognises are every type a
    list names plus `other_model_types` (decoders vLLM serves that no rule singles out)."""
    sets = {name: frozenset(data.get(name, ())) for name in _SET_FIELDS}
    float16 = MappingProxyType(dict(data["float16_not_supported"]))
    type_sets = [values for name, values in sets.items() if not name.startswith("mamba_ssm_dtype_from")]
    known = frozenset(data["other_model_types"]).union(*type_sets, float16)
    defaults = data.get("transformers_defaults", {})
    return ModelRules(
        profile=profile,
        float16_not_supported=float16,
        mamba_ssm_dtype_hook_default=str(data["mamba_ssm_dtype_hook_default"]),
        known_model_types=known,
        transformers_defaults=MappingProxyType(
            {k: MappingProxyType(dict(v)) for k, v in defaults.items()}
        ),
        sub_config_model_types=MappingProxyType({
            k: MappingProxyType(dict(v))
            for k, v in data.get("sub_config_model_types", {}).items() if not k.startswith("_")
        }),
        non_causal_disables_mla=bool(data.get("non_causal_disables_mla", False)),
        mamba_dtypes=tuple(data.get("mamba_dtypes", ModelRules.mamba_dtypes)),
        sm10x_kv_cache_dtype_architectures=MappingProxyType({
            arch: MappingProxyType(dict(rule))
            for arch, rule in data.get("sm10x_kv_cache_dtype_architectures", {}).items()
        }),
        **sets,
    )
