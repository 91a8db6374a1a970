"""vLLM's model-level facts, as data keyed by profile (vLLM era).

Everything `attention/model_config.py` needs to turn a Hugging Face `config.json` into the
selector inputs vLLM derives (vllm-rules §6, §7, §9). One `ModelRules` per profile:
"seed" = vLLM main, February 2026 (v0.16.0/v0.17.0 code, §6); "0.33" = vLLM 0.33.0 (§9 "HEAD"
column: use_mla list, mm-prefix list, float16 list, head_dim rules).

Nothing here executes model code; the lists mirror vLLM's own lists and model-class flags.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

# Config keys that hold the text (language-model) sub-config, in the order transformers'
# `PretrainedConfig.get_text_config()` / vLLM's `get_hf_text_config()` look for them.
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "thinker_config")

# `--dtype` strings vLLM accepts (`_STR_DTYPE_TO_TORCH_DTYPE`, vllm/config/model.py) plus "auto".
VLLM_DTYPE_STRINGS: Mapping[str, str] = MappingProxyType(
    {
        "half": "float16",
        "float16": "float16",
        "float": "float32",
        "float32": "float32",
        "bfloat16": "bfloat16",
    }
)
# attnsel's own short spellings (not vLLM's): accepted and shown as what they map to.
ATTNSEL_DTYPE_ALIASES: Mapping[str, str] = MappingProxyType(
    {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
)

# CudaPlatform.supported_dtypes (§5g): by compute capability, in preference order.
SUPPORTED_DTYPES_CC80 = ("bfloat16", "float16", "float32")
SUPPORTED_DTYPES_CC60 = ("float16", "float32")
SUPPORTED_DTYPES_OLDER = ("float32",)

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

_NUMERICAL_INSTABILITY = "Numerical instability. Please use bfloat16 or float32 instead."


@dataclass(frozen=True)
class ModelRules:
    """Model-type lists and per-type defaults for one vLLM era."""

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
    # 0.33 (§9 use_mla / head_size): MLA model types that need `head_dim` (not kv_lora_rank)
    # and take it as the head size (DeepSeek-V4 with compress ratios).
    mla_head_dim_model_types: frozenset[str] = frozenset()
    # 0.33 (§9 use_mla): `hf_text_config.is_causal == False` turns MLA off.
    non_causal_disables_mla: bool = False


_SEED_MLA = frozenset(
    {
        "AXK1",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_mtp",
        "glm_moe_dsa",
        "glm4_moe_lite",
        "glm4_moe_lite_mtp",
        "kimi_k2",
        "kimi_linear",
        "longcat_flash",
        "pangu_ultra_moe",
        "pangu_ultra_moe_mtp",
        "bailing_hybrid",
    }
)

_SEED_HYBRID = frozenset(
    {
        "bamba",
        "falcon_h1",
        "granitemoehybrid",
        "jamba",
        "kimi_linear",
        "lfm2",
        "lfm2_moe",
        "minimax_text_01",
        "nemotron_h",
        "plamo2",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
        "zamba2",
    }
)

_SEED_ATTENTION_FREE = frozenset({"mamba", "mamba2", "falcon_mamba", "terratorch"})

_SEED_ENCODER_ONLY = frozenset(
    {
        # BertModel / BertEmbeddingModel / BertForSequenceClassification (models/bert.py)
        "bert",
        # models/roberta.py builds on the BERT encoder
        "roberta",
        "xlm-roberta",
        # models/modernbert.py
        "modernbert",
        # models/bert_with_rope.py (nomic-embed, gte "new")
        "nomic_bert",
        "new",
    }
)

# Decoder model types attnsel knows vLLM serves (plus every type named in a list above).
_SEED_KNOWN_DECODERS = frozenset(
    {
        "llama",
        "llama4",
        "mistral",
        "mixtral",
        "ministral",
        "qwen",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3_vl",
        "qwen3_vl_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma3n",
        "paligemma",
        "phi",
        "phi3",
        "phi3_v",
        "phi4mm",
        "phimoe",
        "gpt2",
        "gpt_bigcode",
        "gpt_neox",
        "gptj",
        "gpt_oss",
        "mimo",
        "mimo_v2_flash",
        "falcon",
        "starcoder2",
        "olmo",
        "olmo2",
        "olmo3",
        "olmoe",
        "cohere",
        "cohere2",
        "command-r",
        "dbrx",
        "internlm2",
        "internvl_chat",
        "baichuan",
        "chatglm",
        "glm",
        "glm4",
        "glm4_moe",
        "exaone",
        "exaone4",
        "granite",
        "granitemoe",
        "minicpm",
        "minicpm3",
        "minicpmv",
        "minimax_m2",
        "nemotron",
        "nemotron-nas",
        "stablelm",
        "solar",
        "seed_oss",
        "ernie4_5",
        "ernie4_5_moe",
        "hunyuan_v1_dense",
        "hunyuan_v1_moe",
        "arcee",
        "apertus",
        "smollm3",
        "llava",
        "llava_next",
        "llava_onevision",
        "mllama",
        "pixtral",
        "molmo",
        "molmo2",
        "idefics3",
        "aria",
        "deepseek",
        "deepseek_vl_v2",
        "step3p5",
        "whisper",
        "eagle",
        "medusa",
        "timm_wrapper",
        "t5",
        "bart",
    }
)

# Field defaults of the transformers config classes, for keys the catalog configs omit.
# Only attention-relevant keys. `None` means "derived" (num_key_value_heads falls back to
# num_attention_heads, head_dim to hidden_size // num_attention_heads).
_SEED_TRANSFORMERS_DEFAULTS: Mapping[str, Mapping[str, object]] = MappingProxyType(
    {
        # LlamaConfig: vicuna-style text_config of llava-1.5 only names a few keys.
        "llama": {"hidden_size": 4096, "num_attention_heads": 32},
        "mistral": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8},
        "qwen2": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32},
        "qwen3": {
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "head_dim": 128,
        },
        "gemma2": {
            "hidden_size": 2304,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
        },
        # Gemma3TextConfig: gemma-3-{4b,12b,27b}-it text_config omit head_dim (256).
        "gemma3_text": {
            "hidden_size": 2304,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
        },
        "siglip_vision_model": {"hidden_size": 768, "num_attention_heads": 12},
        "clip_vision_model": {"hidden_size": 768, "num_attention_heads": 12},
        "bert": {"hidden_size": 768, "num_attention_heads": 12},
    }
)

SEED = ModelRules(
    profile="seed",
    mla_model_types=_SEED_MLA,
    mla_eagle_inner_model_types=frozenset(
        {"AXK1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp"}
    ),
    mm_prefix_model_types=frozenset({"gemma3", "molmo2", "paligemma"}),
    hybrid_model_types=_SEED_HYBRID,
    attention_free_model_types=_SEED_ATTENTION_FREE,
    float16_not_supported=MappingProxyType(
        {
            "gemma2": _NUMERICAL_INSTABILITY,
            "gemma3": _NUMERICAL_INSTABILITY,
            "gemma3_text": _NUMERICAL_INSTABILITY,
            "plamo2": _NUMERICAL_INSTABILITY,
            "glm4": _NUMERICAL_INSTABILITY,
        }
    ),
    sink_model_types=frozenset({"gpt_oss", "mimo_v2_flash"}),
    encoder_only_model_types=_SEED_ENCODER_ONLY,
    is_causal_switch_model_types=frozenset({"llama", "qwen2", "qwen3"}),
    zero_head_size_model_types=frozenset({"mamba", "falcon_mamba", "timm_wrapper", "medusa"}),
    attention_head_dim_model_types=frozenset({"zamba2"}),
    mamba_ssm_dtype_from_config_architectures=frozenset(
        {"NemotronHForCausalLM", "NemotronHPuzzleForCausalLM"}
    ),
    # The hook's default when the HF config has no key; "float16" in the code read for the
    # seed era (later releases changed it to "float32").
    mamba_ssm_dtype_hook_default="float16",
    known_model_types=(
        _SEED_KNOWN_DECODERS
        | _SEED_MLA
        | _SEED_HYBRID
        | _SEED_ATTENTION_FREE
        | _SEED_ENCODER_ONLY
        | {"gemma3", "molmo2", "paligemma", "mimo_v2_flash", "nemotron_h"}
    ),
    transformers_defaults=_SEED_TRANSFORMERS_DEFAULTS,
)

# --- vLLM 0.33 (vllm-rules §9 "use_mla", "head_size", "mm_prefix models", "dtype") -----------------
_V033_MLA_ADDED = frozenset(
    {
        "deepseek_v4",
        "deepseek_v41",
        "dots3_note",
        "k3_dspark",
        "glm5_next",
        "glm5_next_text",
        "bailing_hybrid_mtp",
        "bailing_hybrid_v3_mtp",
        "hy_v4",
        "hy_v4_mtp",
    }
)
# §9: "AXK1 is spelled axk1"
_V033_MLA = (_SEED_MLA - {"AXK1"}) | {"axk1"} | _V033_MLA_ADDED

V033 = dataclasses.replace(
    SEED,
    profile="0.33",
    mla_model_types=_V033_MLA,
    mla_eagle_inner_model_types=frozenset({"axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp"}),
    # §9: adds bagel, moondream3
    mm_prefix_model_types=frozenset({"gemma3", "molmo2", "paligemma", "bagel", "moondream3"}),
    # §9: plamo2 dropped from _FLOAT16_NOT_SUPPORTED_MODELS
    float16_not_supported=MappingProxyType(
        {k: v for k, v in SEED.float16_not_supported.items() if k != "plamo2"}
    ),
    known_model_types=(SEED.known_model_types - {"AXK1"}) | _V033_MLA | {"bagel", "moondream3"},
    mla_head_dim_model_types=frozenset({"deepseek_v4", "deepseek_v41"}),
    non_causal_disables_mla=True,
)

PROFILES: Mapping[str, ModelRules] = MappingProxyType({"seed": SEED, "0.33": V033})


def rules_for(profile: str) -> ModelRules:
    """The model rules of one vLLM profile; unknown names are bad input."""
    from attnsel.errors import UserInputError

    try:
        return PROFILES[profile]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        raise UserInputError(f"Unknown vLLM profile {profile!r}. Valid profiles: {valid}") from None
