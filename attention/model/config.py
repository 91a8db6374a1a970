"""From a Hugging Face `config.json` to the attention-selector inputs vLLM derives.

`load_model_config()` reads a config file, a model folder or a catalog name (never model code).
`derive_model_facts()` applies vLLM's rules (docs/vllm-rules.md §6 and §7, lists in `model_rules.py`)
and returns a `ModelFacts` (attention/model/facts.py): head size, heads, dtype, MLA/sparse/sink/
mm-prefix flags, attention type, hybrid/attention-free, plus `notes` saying how each value was
found. The per-feature rules live in model_kind.py, model_heads.py and model_dtype.py.

Pure Python: no torch, no transformers. Where vLLM relies on a transformers config-class default
for a key the file omits, the default comes from `ModelRules.transformers_defaults`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from attnsel import files
from attnsel.attention.hybrid import hybrid_layout
from attnsel.attention.model import heads, kind
from attnsel.attention.model.dtype import check_dtype_supported, resolve_dtype
from attnsel.attention.model.facts import ModelFacts
from attnsel.attention.model.hybrid_keys import check_hybrid_config
from attnsel.attention.model.rules import TEXT_CONFIG_KEYS, ModelRules, rules_for
from attnsel.attention.model.source import (
    CATALOG_DIR,
    WHAT,
    ModelSource,
    catalog_names,
    closest_names,
    read_model,
)
from attnsel.attention.model.validation import check_heads, validate_config
from attnsel.errors import UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from attnsel.attention.hybrid import HybridLayout
    from attnsel.attention.model.facts import VisionFacts

DEFAULT_MODEL = "llama-3.1-8b"
SOURCE_KEY = "_attnsel_source"

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


def catalog_source(name: str) -> str | None:
    """Where a catalog config came from (its `_attnsel_source` key)."""
    raw = json.loads(catalog_path(name).read_text(encoding="utf-8"))
    return raw.get(SOURCE_KEY)


def load_model_config(path_or_name: str | Path) -> dict:
    """A config.json file, a folder holding one, a catalog name, `-` (stdin), a pipe, or a Hugging
    Face id (attention/model/source.py) → the config dict, its types checked (attention/model/validation.py).

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


def _json_kind(value: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _unknown_name_message(first: str, name: str, valid: list[str]) -> str:
    close = closest_names(name, valid, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"{first}{hint} Catalog: {', '.join(valid)}"


# ---------------------------------------------------------------------------------------------
# Derivation (§6)


def derive_model_facts(
    hf_config: dict,
    *,
    capability: tuple[int, int] | None,
    dtype: str = "auto",
    tensor_parallel_size: int = 1,
    env: Mapping[str, str] | None = None,
    profile: str | ModelRules | None = None,
    gpu_name: str | None = None,
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
    notes: list[str] = []
    hf_config = {k: v for k, v in hf_config.items() if k != SOURCE_KEY}
    validate_config(hf_config)  # types and ranges first: no rule below meets a value no model has
    model = _ModelKind.read(hf_config, rules, os.environ if env is None else env, allow_unknown_model_type, notes)
    nested = next((key for key in TEXT_CONFIG_KEYS if isinstance(hf_config.get(key), Mapping)), None)
    where = f"the model config's {nested}" if nested else "the model config"
    check_hybrid_config(model.text, model.text_model_type, where)  # the keys attention/hybrid reads, as transformers does
    shape = _heads(model, tensor_parallel_size, rules, notes)
    resolution = resolve_dtype(
        dtype, model.model_type, hf_config, model.text, is_pooling_model=model.is_pooling,
        capability=capability, gpu_name=gpu_name, rules=rules,
    )
    if capability is None:
        notes.append("no GPU compute capability given: dtype resolved as on CC 8.0+ (bfloat16 supported)")
    notes.append(f"dtype: {resolution.source}")
    features = _features(model, hf_config, resolution.dtype, (mamba_ssm_cache_dtype, mamba_cache_dtype), rules, notes)
    if features["kv_cache_dtype_forced"] is None:
        features["kv_cache_dtype_forced"] = kind.sm10x_kv_cache_dtype(model.architectures, model.text, capability,
                                                                      rules, notes)
    return ModelFacts(
        model_type=model.model_type,
        text_model_type=model.text_model_type,
        architectures=model.architectures,
        **shape,
        dtype=resolution.dtype,
        dtype_source=resolution.source,
        use_mla=model.use_mla,
        is_hybrid=model.is_hybrid,
        is_attention_free=model.is_attention_free,
        is_pooling_model=model.is_pooling,
        **features,
        profile=rules.profile,
        capability=None if capability is None else (int(capability[0]), int(capability[1])),
        dtype_error=check_dtype_supported(resolution.dtype, capability, gpu_name),
        warnings=resolution.warnings,
        infos=resolution.infos,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class _ModelKind:
    """Model type, text config and the kind of attention the model has (§6, §7)."""

    model_type: str
    text: dict
    text_model_type: str
    architectures: tuple[str, ...]
    is_pooling: bool
    is_deepseek_mla: bool
    mla_disabled: bool
    is_attention_free: bool
    is_hybrid: bool

    @property
    def use_mla(self) -> bool:
        return self.is_deepseek_mla and not self.mla_disabled

    @classmethod
    def read(cls, hf_config: dict, rules: ModelRules, env: Mapping[str, str], allow_unknown: bool,
             notes: list[str]) -> _ModelKind:
        model_type = kind.model_type(hf_config)
        text, text_where = kind.text_config(hf_config, model_type, rules)
        text_model_type = text.get("model_type", model_type)
        if text_where:
            notes.append(f"text config: {text_where} (model_type {text_model_type!r})")
        kind.check_known_model_type(model_type, text_model_type, rules, allow_unknown)
        architectures = tuple(a for a in hf_config.get("architectures") or () if isinstance(a, str))
        is_pooling = kind.is_pooling(architectures, notes)
        mla_disabled = kind.mla_disabled(env)
        is_deepseek_mla = kind.is_deepseek_mla(text, text_model_type, rules)
        if is_deepseek_mla and rules.non_causal_disables_mla and text.get("is_causal") is False:
            # §9 use_mla (later releases): hf_text_config.is_causal == False gives use_mla False
            notes.append(f"use_mla: {text_model_type!r} has is_causal false → not MLA")
            is_deepseek_mla = False
        if is_deepseek_mla:
            notes.append(
                f"use_mla: {text_model_type!r} is an MLA model type with kv_lora_rank set"
                + ("; VLLM_MLA_DISABLE=1 turns MLA off" if mla_disabled else "")
            )
        types = (text_model_type, model_type)
        is_attention_free = any(t in rules.attention_free_model_types for t in types)
        is_hybrid = kind.is_hybrid(hf_config, model_type, text_model_type, rules, notes)
        return cls(model_type, text, text_model_type, architectures, is_pooling, is_deepseek_mla, mla_disabled,
                   is_attention_free, is_hybrid)


class _Heads(TypedDict):
    """ModelFacts' head fields."""

    head_size: int
    num_attention_heads: int
    num_kv_heads: int
    num_heads_per_gpu: int
    tensor_parallel_size: int


class _MlaDimensions(TypedDict):
    """ModelFacts' MLA dimensions and the sparse indexer's top-k."""

    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    kv_lora_rank: int | None
    v_head_dim: int | None
    index_topk: int | None


class _Features(_MlaDimensions):
    """ModelFacts' per-feature fields (what _features derives)."""

    use_sparse: bool
    has_sink: bool
    use_mm_prefix: bool
    attn_type: str
    mamba_ssm_cache_dtype: str
    mamba_cache_dtype: str
    mamba_cache_float32: bool
    kv_cache_dtype_forced: str | None
    sliding_window: int | None
    vision: VisionFacts | None
    has_index_topk: bool
    hybrid_layout: HybridLayout | None


def _heads(model: _ModelKind, tensor_parallel_size: int, rules: ModelRules, notes: list[str]) -> _Heads:
    """Head size and head counts, total and per GPU, with vLLM's refusals (§6)."""
    free = model.is_attention_free
    head_size = heads.head_size(model.text, model.text_model_type, model.is_deepseek_mla, model.mla_disabled, free,
                                rules, notes)
    total = heads.total_attention_heads(model.text, free)
    kv = heads.num_kv_heads(model.text, total, model.use_mla, free, notes)
    tp = heads.check_tensor_parallel(tensor_parallel_size, total, free)
    if not model.use_mla and not free:
        check_heads(total, kv, " in the model config")
        heads.check_kv_heads_split(kv, tp)
    per_gpu = total // tp if total else 0
    notes.append(f"num_heads: {total} total // tensor_parallel_size {tp} = {per_gpu} per GPU")
    return {"head_size": head_size, "num_attention_heads": total, "num_kv_heads": kv, "num_heads_per_gpu": per_gpu,
            "tensor_parallel_size": tp}


def _features(model: _ModelKind, hf_config: dict, dtype: str, mamba_flags: tuple[str, str], rules: ModelRules,
              notes: list[str]) -> _Features:
    """The per-feature facts the selector reads: sparse MLA, sinks, mm-prefix, attention type, Mamba
    cache dtypes, a forced KV-cache dtype, sliding window, MLA dimensions, vision, hybrid layout."""
    text, model_type = model.text, model.model_type
    has_index_topk = "index_topk" in text or "index_topk" in hf_config
    use_sparse = model.use_mla and has_index_topk
    if has_index_topk:
        notes.append(f"use_sparse: index_topk present, use_mla {model.use_mla} → use_sparse {use_sparse}")
    has_sink = model.text_model_type in rules.sink_model_types or model_type in rules.sink_model_types
    if has_sink:
        notes.append(
            f"has_sink: {model_type!r} model code passes sinks= to its attention layers "
            "(layer time; a config-time block-size pass uses has_sink=False)"
        )
    use_mm_prefix = kind.use_mm_prefix(hf_config, model_type, rules, notes)
    attn_type = kind.attn_type(text, model.text_model_type, rules, notes)
    mamba_ssm, mamba_conv = kind.mamba_cache_dtypes(hf_config, model.architectures, *mamba_flags, model.is_hybrid,
                                                    rules, notes)
    kv_forced = kind.kv_cache_dtype_forced(hf_config, text, notes)
    sliding_window = kind.sliding_window(text, notes)
    vision = kind.vision_facts(hf_config, dtype, rules, notes)
    if model.is_attention_free:
        notes.append(f"attention-free: {model_type!r} has no attention layers, so vLLM uses no attention backend")
    return {
        "use_sparse": use_sparse, "has_sink": has_sink, "use_mm_prefix": use_mm_prefix, "attn_type": attn_type,
        "mamba_ssm_cache_dtype": mamba_ssm, "mamba_cache_dtype": mamba_conv,
        "mamba_cache_float32": model.is_hybrid and "float32" in (mamba_ssm, mamba_conv),
        "kv_cache_dtype_forced": kv_forced, "sliding_window": sliding_window, "vision": vision,
        "has_index_topk": has_index_topk, **_mla_dimensions(text, hf_config),
        "hybrid_layout": _hybrid_layout(model, notes),
    }


def _mla_dimensions(text: dict, hf_config: dict) -> _MlaDimensions:
    return {
        "qk_nope_head_dim": kind.optional_int(text, "qk_nope_head_dim"),
        "qk_rope_head_dim": kind.optional_int(text, "qk_rope_head_dim"),
        "kv_lora_rank": kind.optional_int(text, "kv_lora_rank"),
        "v_head_dim": kind.optional_int(text, "v_head_dim"),
        "index_topk": kind.optional_int(text, "index_topk") or kind.optional_int(hf_config, "index_topk"),
    }


def _hybrid_layout(model: _ModelKind, notes: list[str]) -> HybridLayout | None:
    if not model.is_hybrid:
        return None
    layout = hybrid_layout(model.text, model.text_model_type, model.architectures[0] if model.architectures else "")
    if layout is None:
        notes.append(f"hybrid: attnsel has no state-shape formula for {model.text_model_type!r}: block size not aligned")
    return layout
