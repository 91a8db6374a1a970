"""A hybrid model's state layout, read from its config.json the way vLLM's model classes read it
(`get_mamba_state_shape_from_config` in models/jamba.py, nemotron_h.py, granitemoehybrid.py,
falcon_h1.py, bamba.py, qwen3_next.py, qwen3_5.py, glm5next/common/model.py). Version-free: the
shape formulas are the same in 0.17, 0.24 and 0.33 (only speculative tokens were added later).

Kinds (vllm/model_executor/layers/mamba/mamba_utils.py `MambaStateShapeCalculator`):
`mamba1` (Jamba), `mamba2` (Nemotron-H, Granite-4.0-H, Falcon-H1, Bamba), `gdn` (Gated DeltaNet:
Qwen3-Next, Qwen3.5), `kda` (Kimi Delta Attention: GLM-5-Next).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from attnsel.errors import UserInputError


@dataclass(frozen=True)
class HybridLayout:
    kind: str
    sizes: tuple[tuple[str, int], ...]  # the state dimensions the shape calculator takes
    attention_layers: int
    mamba_layers: int
    chunk_size: int  # ModelConfig.get_mamba_chunk_size (0.17/0.24 "all" cache mode)
    model_type: str
    architecture: str = ""
    notes: tuple[str, ...] = field(default=())
    # GLM-5-Next's DSA indexer: its K cache is paged in pools of index_kpool tokens (0: no indexer)
    indexer_kpool: int = 0

    def size(self, name: str) -> int:
        return dict(self.sizes)[name]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "sizes": dict(self.sizes), "attention_layers": self.attention_layers,
                "mamba_layers": self.mamba_layers, "chunk_size": self.chunk_size}

    def to_json(self) -> dict:
        """Everything `from_json` needs (tune's plan carries the layout to verify)."""
        return {**self.to_dict(), "model_type": self.model_type, "architecture": self.architecture,
                "indexer_kpool": self.indexer_kpool}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> HybridLayout:
        return cls(kind=str(doc["kind"]), sizes=tuple((str(k), int(v)) for k, v in dict(doc["sizes"]).items()),
                   attention_layers=int(doc["attention_layers"]), mamba_layers=int(doc["mamba_layers"]),
                   chunk_size=int(doc["chunk_size"]), model_type=str(doc["model_type"]),
                   architecture=str(doc.get("architecture") or ""), indexer_kpool=int(doc.get("indexer_kpool") or 0))


def _int(config: Mapping, key: str, model_type: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or int(value) != value:
        raise UserInputError(f"hybrid {model_type!r} config: {key} must be a positive integer, got {value!r}")
    return int(value)


def _chunk_size(config: Mapping) -> int:
    # mamba_chunk_size (Bamba, FalconH1, Granite), chunk_size (NemotronH), else 2048 (Mamba1)
    for key in ("mamba_chunk_size", "chunk_size"):
        if isinstance(config.get(key), int):
            return int(config[key])
    return 2048


def every_period(layers: int, period: int, offset: int) -> int:
    """How many of layers 0..layers-1 have i % period == offset, counted without a loop over the
    layers (a config may say 2**31 - 1 of them).

    >>> every_period(32, 8, 4), every_period(48, 4, 3), every_period(3, 4, 3)
    (4, 12, 0)
    """
    return 0 if offset >= layers else (layers - 1 - offset) // period + 1


def _split_layers(config: Mapping, model_type: str) -> tuple[int, int]:
    """(attention layers, state layers), from whichever key the model uses."""
    layers = _int(config, "num_hidden_layers", model_type)
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        attention = sum(1 for t in types if isinstance(t, str) and "attention" in t and "linear" not in t)
        return attention, len(types) - attention
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*"), pattern.count("M")
    if isinstance(config.get("attn_layer_indices"), list):
        attention = len(config["attn_layer_indices"])
        return attention, layers - attention
    interval = config.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:  # Qwen3-Next: layer i attends when (i + 1) % interval == 0
        attention = every_period(layers, interval, interval - 1)
        return attention, layers - attention
    period, offset = config.get("attn_layer_period"), config.get("attn_layer_offset")
    if isinstance(period, int) and period > 0 and isinstance(offset, int):
        attention = every_period(layers, period, offset)
        return attention, layers - attention
    raise UserInputError(f"hybrid {model_type!r} config says not which layers attend: it needs layer_types, "
                         "hybrid_override_pattern, attn_layer_indices, full_attention_interval or "
                         "attn_layer_period with attn_layer_offset")


def _mamba1(c: Mapping, t: str) -> dict[str, int]:
    return {"intermediate_size": _int(c, "mamba_expand", t) * _int(c, "hidden_size", t),
            "state_size": _int(c, "mamba_d_state", t), "conv_kernel": _int(c, "mamba_d_conv", t)}


def _mamba2(c: Mapping, t: str) -> dict[str, int]:
    if t == "nemotron_h":
        return {"intermediate_size": _int(c, "mamba_num_heads", t) * _int(c, "mamba_head_dim", t),
                "n_groups": _int(c, "n_groups", t), "num_heads": _int(c, "mamba_num_heads", t),
                "head_dim": _int(c, "mamba_head_dim", t), "state_size": _int(c, "ssm_state_size", t),
                "conv_kernel": _int(c, "conv_kernel", t)}
    heads = _int(c, "mamba_n_heads", t)
    if t == "falcon_h1" and c.get("mamba_d_ssm") is not None:
        intermediate = _int(c, "mamba_d_ssm", t)
    else:
        intermediate = int(c.get("mamba_expand", 2) * _int(c, "hidden_size", t))
    head_dim = c.get("mamba_d_head")
    if head_dim in (None, "auto"):  # transformers' FalconH1Config: d_ssm // n_heads
        head_dim = intermediate // heads
    return {"intermediate_size": intermediate, "n_groups": _int(c, "mamba_n_groups", t), "num_heads": heads,
            "head_dim": int(head_dim), "state_size": _int(c, "mamba_d_state", t),
            "conv_kernel": _int(c, "mamba_d_conv", t)}


def _gdn(c: Mapping, t: str) -> dict[str, int]:
    return {"num_k_heads": _int(c, "linear_num_key_heads", t), "num_v_heads": _int(c, "linear_num_value_heads", t),
            "head_k_dim": _int(c, "linear_key_head_dim", t), "head_v_dim": _int(c, "linear_value_head_dim", t),
            "conv_kernel": _int(c, "linear_conv_kernel_dim", t)}


# transformers Glm5NextTextConfig.__post_init__: a checkpoint's linear_attn_config {num_heads, head_dim,
# short_conv_kernel_size} fills linear_num_heads / linear_head_dim / linear_conv_kernel_dim, which vLLM's
# Glm5NextForCausalLM.get_mamba_state_shape_from_config reads (0.33 models/glm5next/common/model.py)
KDA_KEYS = (("num_heads", "linear_num_heads", "num_heads"), ("head_dim", "linear_head_dim", "head_dim"),
            ("conv_kernel", "linear_conv_kernel_dim", "short_conv_kernel_size"))


def _kda(c: Mapping, t: str) -> dict[str, int]:
    nested_config = c.get("linear_attn_config")
    linear: Mapping = nested_config if isinstance(nested_config, Mapping) else {}
    sizes = {}
    for name, flat, nested in KDA_KEYS:
        source = linear if nested in linear else c
        sizes[name] = _int(source, nested if source is linear else flat, t)
    return sizes


KINDS = {
    "jamba": ("mamba1", _mamba1),
    "nemotron_h": ("mamba2", _mamba2), "granitemoehybrid": ("mamba2", _mamba2),
    "falcon_h1": ("mamba2", _mamba2), "bamba": ("mamba2", _mamba2),
    "qwen3_next": ("gdn", _gdn), "qwen3_5": ("gdn", _gdn), "qwen3_5_text": ("gdn", _gdn),
    "qwen3_5_moe": ("gdn", _gdn), "qwen3_5_moe_text": ("gdn", _gdn),
    "glm5_next": ("kda", _kda), "glm5_next_text": ("kda", _kda),
}


def _kda_layers(config: Mapping, model_type: str) -> tuple[int, int]:
    linear = config.get("linear_attn_config") or {}
    full, kda = linear.get("full_attn_layers"), linear.get("kda_layers")
    if isinstance(full, list) and isinstance(kda, list):
        return len(full), len(kda)
    if not config.get("layer_types"):  # Glm5NextTextConfig's default: every 4th layer attends (i % 4 == 3)
        layers = _int(config, "num_hidden_layers", model_type)
        attention = every_period(layers, 4, 3)
        return attention, layers - attention
    return _split_layers(config, model_type)


def hybrid_layout(text_config: Mapping[str, Any], model_type: str, architecture: str = "") -> HybridLayout | None:
    """The layout of a hybrid model's text config, or None for a model type attnsel has no shape
    formula for (vLLM's block size is then not computed and `explain` says so)."""
    entry = KINDS.get(model_type)
    if entry is None:
        return None
    kind, sizes_of = entry
    sizes = sizes_of(text_config, model_type)
    if model_type == "falcon_h1":  # attention and Mamba-2 side by side in every layer
        layers = _int(text_config, "num_hidden_layers", model_type)
        attention, state = layers, layers
    elif kind == "kda":
        attention, state = _kda_layers(text_config, model_type)
    else:
        attention, state = _split_layers(text_config, model_type)
    kpool = 0
    if kind == "kda" and text_config.get("index_topk") is not None:  # Glm5NextTextConfig.index_kpool default 16
        kpool = int(text_config.get("index_kpool") or 16)
    return HybridLayout(kind=kind, sizes=tuple(sizes.items()), attention_layers=attention, mamba_layers=state,
                        chunk_size=_chunk_size(text_config), model_type=model_type,
                        architecture=architecture, indexer_kpool=kpool)
