"""vLLM's model-level facts for one vLLM version: `ModelRules`, built from the version's data.

Everything `attention/model/config.py` needs to turn a Hugging Face `config.json` into the
selector inputs vLLM derives (docs/vllm-rules.md §6, §7, §9). The lists themselves (use_mla model types,
mm-prefix list, float16 list, head_dim rules, ...) are data: the `models` section of each version
file in attention/versions/ (a release lists only what it changed, as `$add` / `$remove`).

Nothing here executes model code; the lists mirror vLLM's own lists and model-class flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import cast

from attnsel.attention.versions import choose_profile, profile_name_for

# Config keys that hold the text (language-model) sub-config, in the order transformers'
# `PretrainedConfig.get_text_config()` / vLLM's `get_hf_text_config()` look for them.
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "thinker_config")

# Architecture suffixes → runner, in vLLM's priority order (`_SUFFIX_TO_DEFAULTS`,
# vllm/config/model.py). "pooling" models prefer float16 under --dtype auto (§6).
ARCHITECTURE_SUFFIX_RUNNERS = (
    ("ForCausalLM", "generate"),
    ("ForConditionalGeneration", "generate"),
    ("ChatModel", "generate"),
    ("LMHeadModel", "generate"),
    ("ForTextEncoding", "pooling"),
    ("EmbeddingModel", "pooling"),
    ("ForSequenceClassification", "pooling"),
    ("ForTokenClassification", "pooling"),
    ("ForAudioClassification", "pooling"),
    ("ForImageClassification", "pooling"),
    ("ForVideoClassification", "pooling"),
    ("ClassificationModel", "pooling"),
    ("ForRewardModeling", "pooling"),
    ("RewardModel", "pooling"),
    ("Model", "pooling"),
)

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


def model_rules_from_data(profile: str, data: Mapping[str, object]) -> ModelRules:
    """A version's `models` data as ModelRules. The model types attnsel recognises are every type a
    list names plus `other_model_types` (decoders vLLM serves that no rule singles out)."""
    # The version files' JSON shapes (attention/versions/README.md): lists of names, and tables of
    # name -> value or name -> {key: value}; merged and checked when the version data loads.
    sets = {name: frozenset(cast("Iterable[str]", data.get(name, ()))) for name in _SET_FIELDS}
    float16 = MappingProxyType(dict(cast("Mapping[str, str]", data["float16_not_supported"])))
    type_sets = [values for name, values in sets.items() if not name.startswith("mamba_ssm_dtype_from")]
    known = frozenset(cast("Iterable[str]", data["other_model_types"])).union(*type_sets, float16)
    defaults = cast("Mapping[str, Mapping[str, object]]", data.get("transformers_defaults", {}))
    sub_configs = cast("Mapping[str, Mapping[str, str]]", data.get("sub_config_model_types", {}))
    sm10x = cast("Mapping[str, Mapping[str, str]]", data.get("sm10x_kv_cache_dtype_architectures", {}))
    return ModelRules(
        profile=profile,
        float16_not_supported=float16,
        mamba_ssm_dtype_hook_default=str(data["mamba_ssm_dtype_hook_default"]),
        known_model_types=known,
        transformers_defaults=MappingProxyType(
            {k: MappingProxyType(dict(v)) for k, v in defaults.items()}
        ),
        sub_config_model_types=MappingProxyType({
            k: MappingProxyType(dict(v)) for k, v in sub_configs.items() if not k.startswith("_")
        }),
        non_causal_disables_mla=bool(data.get("non_causal_disables_mla", False)),
        mamba_dtypes=tuple(cast("Iterable[str]", data.get("mamba_dtypes", ModelRules.mamba_dtypes))),
        sm10x_kv_cache_dtype_architectures=MappingProxyType({
            arch: MappingProxyType(dict(rule)) for arch, rule in sm10x.items()
        }),
        **sets,
    )


def rules_for(profile: str | ModelRules | None = None) -> ModelRules:
    """The model rules of one vLLM version (a version name or alias: "seed_0_17", "0.33"; None: the
    library default); unknown names are bad input."""
    if isinstance(profile, ModelRules):
        return profile

    if profile is None:
        return choose_profile(None).profile.model_rules
    name = profile_name_for(profile)
    if name is None:
        from attnsel.attention.versions import available_profiles
        from attnsel.errors import UserInputError

        valid = ", ".join(available_profiles())
        raise UserInputError(f"Unknown vLLM profile {profile!r}. Valid profiles: {valid}")
    return choose_profile(name).profile.model_rules
