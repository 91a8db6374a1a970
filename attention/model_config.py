"""From a Hugging Face `config.json` to the attention-selector inputs vLLM derives.

`load_model_config()` reads a config file, a model folder or a catalog name (never model code).
`derive_model_facts()` applies vLLM's rules (vllm-rules §6 and §7, lists in `model_rules.py`)
and returns a `ModelFacts`: head size, heads, dtype, MLA/sparse/sink/mm-prefix flags, attention
type, hybrid/attention-free, plus `notes` saying how each value was found.

Pure Python: no torch, no transformers. Where vLLM relies on a transformers config-class default
for a key the file omits, the default comes from `ModelRules.transformers_defaults`.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from attnsel.attention.model_rules import (
    ARCHITECTURE_SUFFIX_RUNNERS,
    ATTNSEL_DTYPE_ALIASES,
    SUPPORTED_DTYPES_CC60,
    SUPPORTED_DTYPES_CC80,
    SUPPORTED_DTYPES_OLDER,
    TEXT_CONFIG_KEYS,
    VLLM_DTYPE_STRINGS,
    ModelRules,
    rules_for,
)
from attnsel import files
from attnsel.attention.hybrid.layout import hybrid_layout
from attnsel.attention.model_source import CATALOG_DIR, WHAT, ModelSource, catalog_names, read_model
from attnsel.attention.validation import check_heads, validate_config
from attnsel.errors import CheckFailed, UserInputError

DEFAULT_MODEL = "llama-3.1-8b"
SOURCE_KEY = "_attnsel_source"

# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class VisionFacts:
    """Inputs of the ViT backend choice (§8): `get_vit_attn_backend(head_size, dtype)`."""

    head_size: int
    dtype: str
    num_heads: int
    model_type: Optional[str] = None


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
    qk_nope_head_dim: Optional[int]
    has_index_topk: bool
    kv_cache_dtype_forced: Optional[str]
    sliding_window: Optional[int]
    vision: Optional[VisionFacts]
    profile: str
    capability: Optional[tuple[int, int]]
    dtype_error: Optional[str]  # vLLM's bf16-on-old-GPU error (§5g), if it applies
    warnings: tuple[str, ...]  # vLLM warning lines, formatted
    infos: tuple[str, ...]  # vLLM info lines, formatted
    notes: tuple[str, ...]  # how each value was derived
    # MLA dims and the sparse indexer's top-k (later rules: TOKENSPEED_MLA, sparse MLA backends)
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    index_topk: Optional[int] = None
    hybrid_layout: Optional[Any] = None  # attention/hybrid/layout.py HybridLayout (hybrid models)

    def selector_fields(self) -> dict[str, Any]:
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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["architectures"] = list(self.architectures)
        d["hybrid_layout"] = self.hybrid_layout.to_dict() if self.hybrid_layout is not None else None
        d["capability"] = None if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"
        for key in ("warnings", "infos", "notes"):
            d[key] = list(d[key])
        return d


# ---------------------------------------------------------------------------------------------
# Catalog and loading


def list_catalog() -> list[str]:
    """Names of the shipped real model configs (`attention/models/<name>.json`)."""
    return catalog_names()


def catalog_path(name: str) -> Path:
    path = CATALOG_DIR / f"{name}.json"
    if name in list_catalog():
        return path
    raise UserInputError(_unknown_name_message(f"Unknown catalog model {name!r}.", name, list_catalog()))


def catalog_source(name: str) -> Optional[str]:
    """Where a catalog config came from (its `_attnsel_source` key)."""
    raw = json.loads(catalog_path(name).read_text(encoding="utf-8"))
    return raw.get(SOURCE_KEY)


def load_model_config(path_or_name: str | Path) -> dict:
    """A config.json file, a folder holding one, a catalog name, `-` (stdin), a pipe, or a Hugging
    Face id (attention/model_source.py) → the config dict, its types checked (attention/validation.py).

    attnsel's own `_attnsel_source` key is dropped (vLLM ignores unknown keys too).
    """
    return load_model_source(path_or_name)[1]


def load_model_source(path_or_name: str | Path) -> tuple[ModelSource, dict]:
    """`load_model_config` plus where the config came from (for the `Model:` line)."""
    source = read_model(str(path_or_name))
    config = files.parse_json(source.text, source.where, WHAT)
    if not isinstance(config, dict):
        raise UserInputError(f"{source.where} is not a JSON object (found {_json_kind(config)})")
    config.pop(SOURCE_KEY, None)
    validate_config(config, source.where)
    return source, config


def _json_kind(value: Any) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _closest(name: str, valid: list[str], cutoff: float = 0.4) -> list[str]:
    """Up to three suggestions: names that extend what was typed first, then look-alikes."""
    extending = [v for v in valid if name and v.startswith(name)]
    similar = difflib.get_close_matches(name, valid, n=3, cutoff=cutoff)
    return list(dict.fromkeys(extending + similar))[:3]


def _unknown_name_message(first: str, name: str, valid: list[str]) -> str:
    close = _closest(name, valid, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"{first}{hint} Catalog: {', '.join(valid)}"


# ---------------------------------------------------------------------------------------------
# dtype (§6 `_get_and_verify_dtype`, §5g)


def supported_dtypes(capability: Optional[tuple[int, int]]) -> tuple[str, ...]:
    """`CudaPlatform.supported_dtypes` (§5g); None is treated as CC 8.0+."""
    if capability is None or tuple(capability) >= (8, 0):
        return SUPPORTED_DTYPES_CC80
    if tuple(capability) >= (6, 0):
        return SUPPORTED_DTYPES_CC60
    return SUPPORTED_DTYPES_OLDER


def normalize_dtype_flag(dtype: str) -> str:
    """`--dtype` value → "auto" or a canonical dtype name; unknown strings are bad input."""
    if not isinstance(dtype, str):
        raise UserInputError(f"Unknown dtype: {dtype}")
    lowered = dtype.strip().lower()
    if lowered == "auto":
        return "auto"
    if lowered in VLLM_DTYPE_STRINGS:
        return VLLM_DTYPE_STRINGS[lowered]
    if lowered in ATTNSEL_DTYPE_ALIASES:
        return ATTNSEL_DTYPE_ALIASES[lowered]
    valid = ["auto", *VLLM_DTYPE_STRINGS, *ATTNSEL_DTYPE_ALIASES]
    close = _closest(lowered, valid)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    # vLLM's own words first (`Unknown dtype: {dtype!r}`), then our hint.
    raise UserInputError(f"Unknown dtype: {lowered!r}.{hint} Valid: {', '.join(valid)}")


def check_dtype_supported(
    dtype: str, capability: Optional[tuple[int, int]], gpu_name: Optional[str] = None
) -> Optional[str]:
    """vLLM's error for bfloat16 on a GPU below CC 8.0 (§5g), or None when the dtype is fine.

    A None capability means "not known here", so nothing can be said: None.
    """
    if normalize_dtype_flag(dtype) != "bfloat16" or capability is None:
        return None
    if tuple(capability) >= (8, 0):
        return None
    compute_str = f"has compute capability {capability[0]}.{capability[1]}"
    return (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        f"Your {gpu_name or 'GPU'} GPU {compute_str}. "
        "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
        "for example: --dtype=half."
    )


@dataclass(frozen=True)
class _DtypeResolution:
    dtype: str
    source: str
    warnings: tuple[str, ...]
    infos: tuple[str, ...]


def _torch_name(dtype: str) -> str:
    return f"torch.{dtype}"


def _config_dtype(hf_config: Mapping, text_config: Mapping) -> tuple[Optional[str], str]:
    """The checkpoint dtype in vLLM's lookup order (§6 "Config dtype"): value and where."""
    candidates = [
        ("", hf_config),
        ("text config ", text_config),
        ("vision_config ", hf_config.get("vision_config")),
        ("encoder_config ", hf_config.get("encoder_config")),
    ]
    for prefix, section in candidates:
        if not isinstance(section, Mapping):
            continue
        # transformers maps config.json `torch_dtype` and `dtype` onto `config.dtype`.
        for key in ("dtype", "torch_dtype"):
            value = section.get(key)
            if isinstance(value, str) and value:
                return _canonical_config_dtype(value), f"config {prefix}{key}"
    return None, ""


def _canonical_config_dtype(value: str) -> str:
    name = value.strip().lower().removeprefix("torch.")
    return {"half": "float16", "float": "float32", "bf16": "bfloat16"}.get(name, name)


def _resolve_dtype(
    requested: str,
    model_type: str,
    hf_config: Mapping,
    text_config: Mapping,
    *,
    is_pooling_model: bool,
    capability: Optional[tuple[int, int]],
    gpu_name: Optional[str],
    rules: ModelRules,
) -> _DtypeResolution:
    flag = normalize_dtype_flag(requested)
    config_dtype, config_where = _config_dtype(hf_config, text_config)
    warnings: list[str] = []
    infos: list[str] = []
    config_known = config_dtype is not None
    if not config_known:
        # vLLM would read the safetensors header next; attnsel only sees config.json.
        config_dtype = "float32"
        config_where = "no dtype in config.json (vLLM then reads the safetensors header, which attnsel cannot see); assumed float32"

    if flag == "auto":
        dtype, source = _resolve_auto(
            model_type, config_dtype, config_where, is_pooling_model, capability, gpu_name, rules, warnings
        )
    else:
        dtype = flag
        shown = requested.strip().lower()
        source = f"--dtype {shown}" if shown == flag else f"--dtype {shown} (= {flag})"

    reason = rules.float16_not_supported.get(model_type)
    if dtype == "float16" and reason is not None:
        raise CheckFailed(f"The model type {model_type!r} does not support float16. Reason: {reason}")

    if config_known and dtype != config_dtype:
        if dtype == "float32":
            infos.append(f"Upcasting {_torch_name(config_dtype)} to {_torch_name(dtype)}.")
        elif config_dtype == "float32":
            infos.append(f"Downcasting {_torch_name(config_dtype)} to {_torch_name(dtype)}.")
        else:
            warnings.append(f"Casting {_torch_name(config_dtype)} to {_torch_name(dtype)}.")
    return _DtypeResolution(dtype, source, tuple(warnings), tuple(infos))


def _resolve_auto(
    model_type: str,
    config_dtype: str,
    config_where: str,
    is_pooling_model: bool,
    capability: Optional[tuple[int, int]],
    gpu_name: Optional[str],
    rules: ModelRules,
    warnings: list[str],
) -> tuple[str, str]:
    """`_resolve_auto_dtype` (vllm/config/model.py), §6 "--dtype auto"."""
    supported = [d for d in supported_dtypes(capability) if not (d == "float16" and model_type in rules.float16_not_supported)]
    if is_pooling_model and "float16" in supported:
        preferred = "float16"
    else:
        preferred = supported[0]
    described = f"{config_where} {config_dtype}" if config_where.startswith("config") else config_where

    if config_dtype == "float32":
        return preferred, f"{described} → {preferred} (--dtype auto downcasts float32 to the preferred dtype)"
    if config_dtype in supported:
        return config_dtype, f"{described} kept"
    device = repr(gpu_name or "GPU")
    if capability is not None:
        device = f"{device} (with compute capability {capability[0]}.{capability[1]})"
    warnings.append(
        f"Your device {device} doesn't support {_torch_name(config_dtype)}. "
        f"Falling back to {_torch_name(preferred)} for compatibility."
    )
    return preferred, f"{described} not supported here → {preferred} (fallback)"


# ---------------------------------------------------------------------------------------------
# Derivation (§6)


def derive_model_facts(
    hf_config: dict,
    *,
    capability: Optional[tuple[int, int]],
    dtype: str = "auto",
    tensor_parallel_size: int = 1,
    env: Optional[Mapping[str, str]] = None,
    profile: "str | ModelRules | None" = None,
    gpu_name: Optional[str] = None,
    mamba_ssm_cache_dtype: str = "auto",
    mamba_cache_dtype: str = "auto",
    allow_unknown_model_type: bool = False,
) -> ModelFacts:
    """Apply vLLM's config-to-selector rules (§6, §7) to one HF config dict.

    `capability` None: dtype is resolved as on CC 8.0+ and `notes` says so.
    `env` None: the process environment (what `vllm serve` would see).
    """
    if not isinstance(hf_config, Mapping):
        raise UserInputError(f"A model config must be a JSON object, not {_json_kind(hf_config)}")
    rules = rules_for(profile)
    env = os.environ if env is None else env
    notes: list[str] = []
    hf_config = {k: v for k, v in hf_config.items() if k != SOURCE_KEY}
    validate_config(hf_config)  # types and ranges first: no rule below meets a value no model has

    model_type = _model_type(hf_config)
    text_config, text_where = _text_config(hf_config, model_type, rules)
    text_model_type = text_config.get("model_type", model_type)
    if text_where:
        notes.append(f"text config: {text_where} (model_type {text_model_type!r})")
    _check_known_model_type(model_type, text_model_type, rules, allow_unknown_model_type)

    architectures = tuple(a for a in hf_config.get("architectures") or () if isinstance(a, str))
    is_pooling_model = _is_pooling(architectures, notes)
    mla_disabled = _mla_disabled(env)

    is_deepseek_mla = _is_deepseek_mla(text_config, text_model_type, rules)
    if is_deepseek_mla and rules.non_causal_disables_mla and text_config.get("is_causal") is False:
        # §9 use_mla (later releases): hf_text_config.is_causal == False gives use_mla False
        notes.append(f"use_mla: {text_model_type!r} has is_causal false → not MLA")
        is_deepseek_mla = False
    use_mla = is_deepseek_mla and not mla_disabled
    if is_deepseek_mla:
        notes.append(
            f"use_mla: {text_model_type!r} is an MLA model type with kv_lora_rank set"
            + ("; VLLM_MLA_DISABLE=1 turns MLA off" if mla_disabled else "")
        )

    is_attention_free = text_model_type in rules.attention_free_model_types or model_type in rules.attention_free_model_types
    is_hybrid = _is_hybrid(hf_config, model_type, text_model_type, rules, notes)

    head_size = _head_size(text_config, text_model_type, is_deepseek_mla, mla_disabled, is_attention_free, rules, notes)
    total_heads = _total_attention_heads(text_config, is_attention_free)
    num_kv_heads = _num_kv_heads(text_config, total_heads, use_mla, is_attention_free, notes)
    tp = _check_tensor_parallel(tensor_parallel_size, total_heads, is_attention_free)
    if not use_mla and not is_attention_free:
        check_heads(total_heads, num_kv_heads, " in the model config")
        _check_kv_heads_split(num_kv_heads, tp)
    heads_per_gpu = total_heads // tp if total_heads else 0
    notes.append(f"num_heads: {total_heads} total // tensor_parallel_size {tp} = {heads_per_gpu} per GPU")

    resolution = _resolve_dtype(
        dtype,
        model_type,
        hf_config,
        text_config,
        is_pooling_model=is_pooling_model,
        capability=capability,
        gpu_name=gpu_name,
        rules=rules,
    )
    if capability is None:
        notes.append("no GPU compute capability given: dtype resolved as on CC 8.0+ (bfloat16 supported)")
    notes.append(f"dtype: {resolution.source}")

    has_index_topk = "index_topk" in text_config or "index_topk" in hf_config
    use_sparse = use_mla and has_index_topk
    if has_index_topk:
        notes.append(f"use_sparse: index_topk present, use_mla {use_mla} → use_sparse {use_sparse}")

    has_sink = text_model_type in rules.sink_model_types or model_type in rules.sink_model_types
    if has_sink:
        notes.append(
            f"has_sink: {model_type!r} model code passes sinks= to its attention layers "
            "(layer time; a config-time block-size pass uses has_sink=False)"
        )

    use_mm_prefix = _use_mm_prefix(hf_config, model_type, rules, notes)
    attn_type = _attn_type(text_config, text_model_type, rules, notes)
    mamba_ssm, mamba_conv = _mamba_cache_dtypes(
        hf_config, architectures, mamba_ssm_cache_dtype, mamba_cache_dtype, is_hybrid, rules, notes
    )
    mamba_cache_float32 = is_hybrid and "float32" in (mamba_ssm, mamba_conv)
    kv_forced = _kv_cache_dtype_forced(hf_config, text_config, notes)
    sliding_window = _sliding_window(text_config, notes)
    qk_nope = text_config.get("qk_nope_head_dim")
    vision = _vision_facts(hf_config, resolution.dtype, rules, notes)
    if is_attention_free:
        notes.append(f"attention-free: {model_type!r} has no attention layers, so vLLM uses no attention backend")

    layout = hybrid_layout(text_config, text_model_type, architectures[0] if architectures else "") if is_hybrid else None
    if is_hybrid and layout is None:
        notes.append(f"hybrid: attnsel has no state-shape formula for {text_model_type!r}: block size not aligned")
    return ModelFacts(
        model_type=model_type,
        text_model_type=text_model_type,
        architectures=architectures,
        head_size=head_size,
        num_attention_heads=total_heads,
        num_kv_heads=num_kv_heads,
        num_heads_per_gpu=heads_per_gpu,
        tensor_parallel_size=tp,
        dtype=resolution.dtype,
        dtype_source=resolution.source,
        use_mla=use_mla,
        use_sparse=use_sparse,
        has_sink=has_sink,
        use_mm_prefix=use_mm_prefix,
        attn_type=attn_type,
        is_hybrid=is_hybrid,
        is_attention_free=is_attention_free,
        is_pooling_model=is_pooling_model,
        mamba_ssm_cache_dtype=mamba_ssm,
        mamba_cache_dtype=mamba_conv,
        mamba_cache_float32=mamba_cache_float32,
        qk_nope_head_dim=qk_nope if isinstance(qk_nope, int) and not isinstance(qk_nope, bool) else None,
        has_index_topk=has_index_topk,
        kv_cache_dtype_forced=kv_forced,
        sliding_window=sliding_window,
        hybrid_layout=layout,
        vision=vision,
        profile=rules.profile,
        capability=None if capability is None else (int(capability[0]), int(capability[1])),
        dtype_error=check_dtype_supported(resolution.dtype, capability, gpu_name),
        warnings=resolution.warnings,
        infos=resolution.infos,
        notes=tuple(notes),
        qk_rope_head_dim=_optional_int(text_config, "qk_rope_head_dim"),
        v_head_dim=_optional_int(text_config, "v_head_dim"),
        index_topk=_optional_int(text_config, "index_topk") or _optional_int(hf_config, "index_topk"),
    )


def _optional_int(config: Mapping, key: str) -> Optional[int]:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _model_type(hf_config: Mapping) -> str:
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UserInputError(
            'The model config has no "model_type": vLLM needs it to pick the model class '
            "(is this a Hugging Face config.json?)"
        )
    return model_type


def _text_config(hf_config: Mapping, model_type: str, rules: ModelRules) -> tuple[dict, str]:
    """`hf_text_config` (§6: every head/heads rule reads it), with transformers defaults."""
    where = ""
    section: Mapping = hf_config
    for key in TEXT_CONFIG_KEYS:
        nested = hf_config.get(key)
        if isinstance(nested, Mapping):
            section, where = nested, f"nested {key!r}"
            break
    text_model_type = section.get("model_type", model_type)
    defaults = rules.transformers_defaults.get(text_model_type, {})
    merged = dict(defaults)
    merged.update({k: v for k, v in section.items() if v is not None or k not in defaults})
    if where and "model_type" not in merged:
        merged["model_type"] = model_type
    filled = sorted(k for k in defaults if section.get(k) is None)
    if filled:
        shown = ", ".join(f"{k}={defaults[k]}" for k in filled)
        where = (where + "; " if where else "") + f"transformers defaults for {text_model_type!r}: {shown}"
    return merged, where


def _check_known_model_type(model_type: str, text_model_type: str, rules: ModelRules, allow: bool) -> None:
    if allow or model_type in rules.known_model_types or text_model_type in rules.known_model_types:
        return
    close = difflib.get_close_matches(model_type, sorted(rules.known_model_types), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UserInputError(f"Unknown model type {model_type!r}: attnsel has no vLLM rules for it.{hint}")


def _is_pooling(architectures: tuple[str, ...], notes: list[str]) -> bool:
    if not architectures:
        return False
    for suffix, runner in ARCHITECTURE_SUFFIX_RUNNERS:
        if architectures[0].endswith(suffix):
            if runner == "pooling":
                notes.append(f"{architectures[0]} is a pooling model (suffix {suffix!r}): --dtype auto prefers float16")
            return runner == "pooling"
    return False


def _mla_disabled(env: Mapping[str, str]) -> bool:
    # vllm/envs.py: bool(int(os.getenv("VLLM_MLA_DISABLE", "0")))
    raw = env.get("VLLM_MLA_DISABLE", "0")
    try:
        return bool(int(raw))
    except ValueError:
        raise UserInputError(f"VLLM_MLA_DISABLE must be an integer such as 0 or 1, got {raw!r}") from None


def _is_deepseek_mla(text_config: Mapping, text_model_type: str, rules: ModelRules) -> bool:
    if text_model_type in rules.mla_head_dim_model_types:
        return text_config.get("head_dim") is not None  # V4 models need head_dim (§9)
    if text_model_type in rules.mla_model_types:
        return text_config.get("kv_lora_rank") is not None
    if text_model_type == "eagle":
        inner = text_config.get("model")
        inner_type = inner.get("model_type") if isinstance(inner, Mapping) else None
        return inner_type in rules.mla_eagle_inner_model_types and text_config.get("kv_lora_rank") is not None
    return False


def _is_hybrid(hf_config: Mapping, model_type: str, text_model_type: str, rules: ModelRules, notes: list[str]) -> bool:
    if model_type not in rules.hybrid_model_types and text_model_type not in rules.hybrid_model_types:
        return False
    layer_types = hf_config.get("layer_types")
    if isinstance(layer_types, list) and layer_types and all(t == "attention" for t in layer_types):
        notes.append(f"hybrid: {model_type!r} is hybrid, but layer_types are all 'attention' → not hybrid")
        return False
    notes.append(f"hybrid: {model_type!r} model class is IsHybrid (attention + mamba/linear layers)")
    return True


def _positive_int(config: Mapping, key: str, why: str) -> int:
    value = config.get(key)
    if value is None:
        raise UserInputError(f"The model config has no {key}: cannot derive {why}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"Impossible {key} {value!r} in the model config: it must be a positive integer")
    if value <= 0:
        raise UserInputError(f"Impossible {key} {value} in the model config: it must be a positive integer")
    return value


def _head_size(
    text_config: Mapping,
    text_model_type: str,
    is_deepseek_mla: bool,
    mla_disabled: bool,
    is_attention_free: bool,
    rules: ModelRules,
    notes: list[str],
) -> int:
    """`get_head_size` (§6 head_size, model_arch_config_convertor.py)."""
    if text_model_type in rules.zero_head_size_model_types or is_attention_free:
        notes.append(f"head_size: 0 ({text_model_type!r} has no attention heads)")
        return 0
    if text_model_type in rules.attention_head_dim_model_types:
        size = _positive_int(text_config, "attention_head_dim", "the head size")
        notes.append(f"head_size: attention_head_dim = {size}")
        return size
    if is_deepseek_mla and text_model_type in rules.mla_head_dim_model_types:
        size = _positive_int(text_config, "head_dim", "the MLA head size")
        notes.append(f"head_size: {text_model_type!r} (compress ratios) uses head_dim = {size}")
        return size
    if is_deepseek_mla:
        kv_lora_rank = _positive_int(text_config, "kv_lora_rank", "the MLA head size")
        rope = _non_negative_int(text_config, "qk_rope_head_dim")
        if not mla_disabled:
            notes.append(f"head_size: MLA kv_lora_rank {kv_lora_rank} + qk_rope_head_dim {rope} = {kv_lora_rank + rope}")
            return kv_lora_rank + rope
        nope = _non_negative_int(text_config, "qk_nope_head_dim")
        if rope and nope:
            notes.append(f"head_size: VLLM_MLA_DISABLE → qk_nope_head_dim {nope} + qk_rope_head_dim {rope} = {nope + rope}")
            return nope + rope
    if text_config.get("head_dim") is not None:
        size = _positive_int(text_config, "head_dim", "the head size")
        notes.append(f"head_size: head_dim = {size}")
        return size
    if text_config.get("hidden_size_per_head") is not None:
        size = _positive_int(text_config, "hidden_size_per_head", "the head size")
        notes.append(f"head_size: hidden_size_per_head = {size}")
        return size
    hidden = _positive_int(text_config, "hidden_size", "the head size")
    heads = _positive_int(text_config, "num_attention_heads", "the head size")
    if hidden % heads:
        raise UserInputError(
            f"Impossible head size: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
            f"({hidden}/{heads} = {hidden / heads:g})"
        )
    notes.append(f"head_size: hidden_size {hidden} // num_attention_heads {heads} = {hidden // heads}")
    return hidden // heads


def _non_negative_int(config: Mapping, key: str) -> int:
    value = config.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserInputError(f"Impossible {key} {value!r} in the model config: it must be a non-negative integer")
    return value


def _total_attention_heads(text_config: Mapping, is_attention_free: bool) -> int:
    if is_attention_free and text_config.get("num_attention_heads") is None:
        return 0
    return _positive_int(text_config, "num_attention_heads", "the number of attention heads")


def _num_kv_heads(text_config: Mapping, total_heads: int, use_mla: bool, is_attention_free: bool, notes: list[str]) -> int:
    if is_attention_free:
        return 0
    if use_mla:
        notes.append("num_kv_heads: 1 (MLA layers keep one latent KV head)")
        return 1
    # `get_total_num_kv_heads`: the first of these keys that is set, else num_attention_heads.
    for key in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups"):
        if text_config.get(key) is not None:
            value = _positive_int(text_config, key, "the number of KV heads")
            notes.append(f"num_kv_heads: {key} = {value}")
            return value
    notes.append(f"num_kv_heads: = num_attention_heads {total_heads} (no KV-head key)")
    return total_heads


def _check_tensor_parallel(tp: int, total_heads: int, is_attention_free: bool) -> int:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UserInputError(f"tensor_parallel_size must be a positive integer, got {tp!r}")
    if total_heads and not is_attention_free and total_heads % tp:
        # ModelConfig.verify_with_parallel_config
        raise CheckFailed(
            f"Total number of attention heads ({total_heads}) must be divisible by "
            f"tensor parallel size ({tp})."
        )
    return tp


def _check_kv_heads_split(total_kv_heads: int, tp: int) -> None:
    """The model's QKV projection splits KV heads over TP ranks, or replicates them when there are
    fewer KV heads than ranks (models/llama.py and the other decoders: bare asserts)."""
    if total_kv_heads >= tp and total_kv_heads % tp:
        raise CheckFailed(f"vLLM would raise AssertionError (model code: total_num_kv_heads % tp_size == 0): "
                          f"{total_kv_heads} KV heads cannot be split over tensor parallel size {tp}")
    if total_kv_heads < tp and tp % total_kv_heads:
        raise CheckFailed(f"vLLM would raise AssertionError (model code: tp_size % total_num_kv_heads == 0): "
                          f"tensor parallel size {tp} is not a multiple of the {total_kv_heads} KV heads to replicate")


def _use_mm_prefix(hf_config: Mapping, model_type: str, rules: ModelRules, notes: list[str]) -> bool:
    if "is_mm_prefix_lm" in hf_config:
        value = bool(hf_config["is_mm_prefix_lm"])
        notes.append(f"use_mm_prefix: config is_mm_prefix_lm = {value}")
        return value
    if model_type in rules.mm_prefix_model_types:
        notes.append(f"use_mm_prefix: {model_type!r} uses bidirectional attention over image tokens")
        return True
    return False


def _attn_type(text_config: Mapping, text_model_type: str, rules: ModelRules, notes: list[str]) -> str:
    if text_model_type in rules.encoder_only_model_types:
        notes.append(f"attn_type: {text_model_type!r} is built on EncoderOnlyAttention → encoder_only")
        return "encoder_only"
    if text_model_type in rules.is_causal_switch_model_types and text_config.get("is_causal") is False:
        notes.append(f"attn_type: {text_model_type!r} with is_causal false → encoder_only")
        return "encoder_only"
    return "decoder"


def _mamba_cache_dtypes(
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
        ssm = str(hf_config.get("mamba_ssm_cache_dtype", rules.mamba_ssm_dtype_hook_default))
        notes.append(f"mamba_ssm_cache_dtype: 'auto' → {ssm!r} (NemotronH config hook)")
    elif ssm == "auto" and set(architectures) & rules.mamba_ssm_dtype_from_text_config_architectures:
        text = hf_config.get("text_config") if isinstance(hf_config.get("text_config"), Mapping) else hf_config
        if isinstance(text.get("mamba_ssm_dtype"), str):
            ssm = text["mamba_ssm_dtype"]
            notes.append(f"mamba_ssm_cache_dtype: 'auto' → {ssm!r} (Qwen3.5 config hook: text config mamba_ssm_dtype)")
    if is_hybrid and "float32" in (ssm, conv_flag):
        notes.append("mamba cache float32 on a hybrid model: FLASH_ATTN kernel blocks become [16, 32, 64]")
    return ssm, conv_flag


def _kv_cache_dtype_forced(hf_config: Mapping, text_config: Mapping, notes: list[str]) -> Optional[str]:
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


def _sliding_window(text_config: Mapping, notes: list[str]) -> Optional[int]:
    window = text_config.get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return None
    if text_config.get("use_sliding_window") is False:
        # Qwen2-style configs carry a window they do not use (transformers drops it).
        notes.append(f"sliding_window: {window} in config but use_sliding_window is false → none")
        return None
    notes.append(f"sliding_window: {window}")
    return window


def _vision_facts(hf_config: Mapping, dtype: str, rules: ModelRules, notes: list[str]) -> Optional[VisionFacts]:
    vision = hf_config.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    vision_type = vision.get("model_type")
    merged = dict(rules.transformers_defaults.get(vision_type, {}))
    merged.update({k: v for k, v in vision.items() if v is not None})
    heads_key = "num_attention_heads" if merged.get("num_attention_heads") is not None else "num_heads"
    heads = _positive_int(merged, heads_key, "the vision encoder's heads")
    if merged.get("head_dim") is not None:
        head_size = _positive_int(merged, "head_dim", "the vision head size")
    else:
        hidden = _positive_int(merged, "hidden_size", "the vision head size")
        if hidden % heads:
            raise UserInputError(
                f"Impossible vision head size: vision_config hidden_size {hidden} is not divisible by {heads_key} {heads}"
            )
        head_size = hidden // heads
    notes.append(f"vision encoder ({vision_type or 'vision_config'}): head_size {head_size}, {heads} heads, dtype {dtype}")
    return VisionFacts(head_size=head_size, dtype=dtype, num_heads=heads, model_type=vision_type)


def attention_layer_count(hf_config: Mapping) -> Optional[int]:
    """How many decoder layers call the attention kernel in one step (`attnsel verify`: kernel
    time x layers / step time). Hybrid configs say which layers attend: `layer_types`
    ("attention", "full_attention", "sliding_attention"; not "linear_attention"), Nemotron-H's
    `hybrid_override_pattern` ('*'), Jamba's `attn_layer_period` / `attn_layer_offset`,
    `attn_layer_indices`; attention-free models (Mamba) have none. None: the config does not say.

    >>> attention_layer_count({"num_hidden_layers": 32, "attn_layer_period": 8, "attn_layer_offset": 4})
    4
    """
    text = hf_config.get("text_config") if isinstance(hf_config.get("text_config"), Mapping) else hf_config
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
        return sum(1 for i in range(layers) if i % period == offset)
    if str(text.get("model_type") or hf_config.get("model_type") or "") in ("mamba", "mamba2", "falcon_mamba"):
        return 0
    return layers if isinstance(layers, int) and layers > 0 else None
