"""What kind of model a config describes, and the per-feature facts vLLM reads from it (docs/vllm-rules.md §6,
§7): model type and text config, pooling, MLA, hybrid, mm-prefix, attention type, Mamba cache
dtypes, a forced KV-cache dtype, sliding window, the vision encoder, attention layer count."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import cast

from attnsel.attention.model.facts import VisionFacts
from attnsel.attention.model.heads import positive_int
from attnsel.attention.model.rules import (
    ARCHITECTURE_SUFFIX_RUNNERS,
    TEXT_CONFIG_KEYS,
    ModelRules,
)
from attnsel.attention.model.validation import shown
from attnsel.errors import UserInputError


def optional_int(config: Mapping, key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_type(hf_config: Mapping) -> str:
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UserInputError(
            'The model config has no "model_type": vLLM needs it to pick the model class '
            "(is this a Hugging Face config.json?)"
        )
    return model_type


def text_config(hf_config: Mapping, model_type: str, rules: ModelRules) -> tuple[dict, str]:
    """`hf_text_config` (§6: every head/heads rule reads it), with transformers defaults."""
    where, section_key = "", ""
    section: Mapping = hf_config
    for key in TEXT_CONFIG_KEYS:
        nested = hf_config.get(key)
        if isinstance(nested, Mapping):
            section, where, section_key = nested, f"nested {key!r}", key
            break
    sub_types = rules.sub_config_model_types.get(model_type, {})
    if not section_key and "text_config" in hf_config and hf_config["text_config"] is None and sub_types:
        section, where, section_key = {}, "nested 'text_config' (null)", "text_config"  # LlavaConfig: LlamaConfig()
    built_as = sub_types.get(section_key)  # LlavaConfig: "llama"
    text_model_type = section.get("model_type") or built_as or model_type
    defaults = rules.transformers_defaults.get(text_model_type, {})
    merged = dict(defaults)
    merged.update({k: v for k, v in section.items() if v is not None or k not in defaults})
    if where and "model_type" not in merged:
        merged["model_type"] = built_as or model_type
    filled = sorted(k for k in defaults if section.get(k) is None)
    if filled:
        shown = ", ".join(f"{k}={defaults[k]}" for k in filled)
        where = (where + "; " if where else "") + f"transformers defaults for {text_model_type!r}: {shown}"
    return merged, where


def with_text_defaults(hf_config: Mapping, rules: ModelRules) -> Mapping:
    """The config with its nested text config as transformers builds it (its config class's defaults
    for the keys the file leaves out: LlavaConfig's LlamaConfig, Gemma3Config's Gemma3TextConfig), so
    that what reads sizes from it (the memory plan) sees what vLLM's model sees."""
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str):
        return hf_config
    for key in TEXT_CONFIG_KEYS:
        if key in hf_config and (hf_config[key] is None or isinstance(hf_config[key], Mapping)):
            merged, _ = text_config(hf_config, model_type, rules)
            return {**hf_config, key: merged}
    return hf_config


def check_known_model_type(model_type: str, text_model_type: str, rules: ModelRules, allow: bool) -> None:
    if allow or model_type in rules.known_model_types or text_model_type in rules.known_model_types:
        return
    close = difflib.get_close_matches(model_type, sorted(rules.known_model_types), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UserInputError(f"Unknown model type {model_type!r}: attnsel has no vLLM rules for it.{hint}")


def is_pooling(architectures: tuple[str, ...], notes: list[str]) -> bool:
    if not architectures:
        return False
    for suffix, runner in ARCHITECTURE_SUFFIX_RUNNERS:
        if architectures[0].endswith(suffix):
            if runner == "pooling":
                notes.append(f"{architectures[0]} is a pooling model (suffix {suffix!r}): --dtype auto prefers float16")
            return runner == "pooling"
    return False


def mla_disabled(env: Mapping[str, str]) -> bool:
    # vllm/envs.py: bool(int(os.getenv("VLLM_MLA_DISABLE", "0")))
    raw = env.get("VLLM_MLA_DISABLE", "0")
    try:
        return bool(int(raw))
    except ValueError:
        raise UserInputError(f"VLLM_MLA_DISABLE must be an integer such as 0 or 1, got {raw!r}") from None


def is_deepseek_mla(text_config: Mapping, text_model_type: str, rules: ModelRules) -> bool:
    if text_model_type in rules.mla_head_dim_model_types:
        return text_config.get("head_dim") is not None  # V4 models need head_dim (§9)
    if text_model_type in rules.mla_model_types:
        return text_config.get("kv_lora_rank") is not None
    if text_model_type == "eagle":
        inner = text_config.get("model")
        inner_type = inner.get("model_type") if isinstance(inner, Mapping) else None
        return inner_type in rules.mla_eagle_inner_model_types and text_config.get("kv_lora_rank") is not None
    return False


def is_hybrid(hf_config: Mapping, model_type: str, text_model_type: str, rules: ModelRules, notes: list[str]) -> bool:
    if model_type not in rules.hybrid_model_types and text_model_type not in rules.hybrid_model_types:
        return False
    layer_types = hf_config.get("layer_types")
    if isinstance(layer_types, list) and layer_types and all(t == "attention" for t in layer_types):
        notes.append(f"hybrid: {model_type!r} is hybrid, but layer_types are all 'attention' → not hybrid")
        return False
    notes.append(f"hybrid: {model_type!r} model class is IsHybrid (attention + mamba/linear layers)")
    return True


def use_mm_prefix(hf_config: Mapping, model_type: str, rules: ModelRules, notes: list[str]) -> bool:
    if "is_mm_prefix_lm" in hf_config:
        value = bool(hf_config["is_mm_prefix_lm"])
        notes.append(f"use_mm_prefix: config is_mm_prefix_lm = {value}")
        return value
    if model_type in rules.mm_prefix_model_types:
        notes.append(f"use_mm_prefix: {model_type!r} uses bidirectional attention over image tokens")
        return True
    return False


def attn_type(text_config: Mapping, text_model_type: str, rules: ModelRules, notes: list[str]) -> str:
    if text_model_type in rules.encoder_only_model_types:
        notes.append(f"attn_type: {text_model_type!r} is built on EncoderOnlyAttention → encoder_only")
        return "encoder_only"
    if text_model_type in rules.is_causal_switch_model_types and text_config.get("is_causal") is False:
        notes.append(f"attn_type: {text_model_type!r} with is_causal false → encoder_only")
        return "encoder_only"
    return "decoder"


def mamba_cache_dtypes(
    hf_config: Mapping,
    architectures: tuple[str, ...],
    ssm_flag: str,
    conv_flag: str,
    is_hybrid: bool,
    rules: ModelRules,
    notes: list[str],
) -> tuple[str, str]:
    for name, value in (("mamba_ssm_cache_dtype", ssm_flag), ("mamba_cache_dtype", conv_flag)):
        if value not in rules.mamba_dtypes:
            raise UserInputError(f"Unknown {name} {value!r}. Valid: {', '.join(rules.mamba_dtypes)}")
    ssm = ssm_flag
    if ssm == "auto" and set(architectures) & rules.mamba_ssm_dtype_from_config_architectures:
        ssm = hf_config.get("mamba_ssm_cache_dtype", rules.mamba_ssm_dtype_hook_default)
        notes.append(f"mamba_ssm_cache_dtype: 'auto' → {ssm!r} (NemotronH config hook)")
    elif ssm == "auto" and set(architectures) & rules.mamba_ssm_dtype_from_text_config_architectures:
        inner = hf_config.get("text_config")
        text = inner if isinstance(inner, Mapping) else hf_config
        if text.get("mamba_ssm_dtype") is not None:
            ssm = text["mamba_ssm_dtype"]
            notes.append(f"mamba_ssm_cache_dtype: 'auto' → {ssm!r} (Qwen3.5 config hook: text config mamba_ssm_dtype)")
    if ssm not in rules.mamba_dtypes:  # the config hook hands it to CacheConfig, whose MambaDType refuses others
        raise UserInputError(f"the model config's Mamba SSM cache dtype {shown(ssm)} (mamba_ssm_cache_dtype / "
                             f"mamba_ssm_dtype) is not one vLLM takes: use one of {', '.join(rules.mamba_dtypes)}")
    if is_hybrid and "float32" in (ssm, conv_flag):
        notes.append("mamba cache float32 on a hybrid model: FLASH_ATTN kernel blocks become [16, 32, 64]")
    return ssm, conv_flag


def sm10x_kv_cache_dtype(architectures: tuple[str, ...], text_config: Mapping, capability: tuple[int, int] | None,
                         rules: ModelRules, notes: list[str]) -> str | None:
    """The KV-cache dtype a model's config hook picks for --kv-cache-dtype auto on CC 10.x (None elsewhere)."""
    if capability is None or int(capability[0]) != 10:
        return None
    for arch in architectures:
        rule = rules.sm10x_kv_cache_dtype_architectures.get(arch)
        if rule is not None and text_config.get(rule["when_text_config_has"]) is not None:
            notes.append(f"kv_cache_dtype: {arch} on CC 10.x with {rule['when_text_config_has']} → "
                         f"{rule['kv_cache_dtype']} (vLLM's model config hook, when --kv-cache-dtype is auto)")
            return rule["kv_cache_dtype"]
    return None


def kv_cache_dtype_forced(hf_config: Mapping, text_config: Mapping, notes: list[str]) -> str | None:
    for section in (hf_config, text_config):
        quant = section.get("quantization_config") or section.get("compression_config")
        if isinstance(quant, Mapping) and quant.get("kv_cache_scheme") is not None:
            scheme = quant["kv_cache_scheme"]
            strategy = scheme.get("strategy") if isinstance(scheme, Mapping) else None
            notes.append(
                "kv_cache_dtype: quantization_config has a kv_cache_scheme → fp8"
                + (f" (strategy {strategy!r})" if strategy else "")
            )
            return "fp8"
    return None


def sliding_window(text_config: Mapping, notes: list[str]) -> int | None:
    window = text_config.get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return None
    if text_config.get("use_sliding_window") is False:
        # Qwen2-style configs carry a window they do not use (transformers drops it).
        notes.append(f"sliding_window: {window} in config but use_sliding_window is false → none")
        return None
    notes.append(f"sliding_window: {window}")
    return window


def vision_facts(hf_config: Mapping, dtype: str, rules: ModelRules, notes: list[str]) -> VisionFacts | None:
    vision = hf_config.get("vision_config")
    built_as = rules.sub_config_model_types.get(str(hf_config.get("model_type")), {}).get("vision_config")
    if vision is None and "vision_config" in hf_config and built_as:
        vision = {}  # LlavaConfig(vision_config=None): the default vision tower
    if not isinstance(vision, Mapping):
        return None
    vision_type = vision.get("model_type") or built_as  # LlavaConfig: a CLIP vision config
    merged = dict(rules.transformers_defaults.get(cast(str, vision_type), {}))  # model_type as config.json has it
    merged.update({k: v for k, v in vision.items() if v is not None})
    heads_key = "num_attention_heads" if merged.get("num_attention_heads") is not None else "num_heads"
    heads = positive_int(merged, heads_key, "the vision encoder's heads")
    if merged.get("head_dim") is not None:
        head_size = positive_int(merged, "head_dim", "the vision head size")
    else:
        hidden = positive_int(merged, "hidden_size", "the vision head size")
        if hidden % heads:
            raise UserInputError(
                f"Impossible vision head size: vision_config hidden_size {hidden} is not divisible by {heads_key} {heads}"
            )
        head_size = hidden // heads
    notes.append(f"vision encoder ({vision_type or 'vision_config'}): head_size {head_size}, {heads} heads, dtype {dtype}")
    return VisionFacts(head_size=head_size, dtype=dtype, num_heads=heads, model_type=vision_type)


def attention_layer_count(hf_config: Mapping) -> int | None:
    """How many decoder layers call the attention kernel in one step (`attnsel verify`: kernel
    time x layers / step time). Hybrid configs say which layers attend: `layer_types`
    ("attention", "full_attention", "sliding_attention"; not "linear_attention"), Nemotron-H's
    `hybrid_override_pattern` ('*'), Jamba's `attn_layer_period` / `attn_layer_offset`,
    `attn_layer_indices`; attention-free models (Mamba) have none. None: the config does not say.

    >>> attention_layer_count({"num_hidden_layers": 32, "attn_layer_period": 8, "attn_layer_offset": 4})
    4
    """
    inner = hf_config.get("text_config")
    text = inner if isinstance(inner, Mapping) else hf_config
    layers = text.get("num_hidden_layers")
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if isinstance(t, str) and "attention" in t and "linear" not in t)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*")
    indices = text.get("attn_layer_indices")
    if isinstance(indices, list):
        return len(indices)
    period, offset = text.get("attn_layer_period"), text.get("attn_layer_offset")
    if isinstance(layers, int) and isinstance(period, int) and period > 0 and isinstance(offset, int):
        return 0 if not 0 <= offset < layers else (layers - 1 - offset) // period + 1  # no loop: layers may be 2**31
    if str(text.get("model_type") or hf_config.get("model_type") or "") in ("mamba", "mamba2", "falcon_mamba"):
        return 0
    return layers if isinstance(layers, int) and layers > 0 else None
