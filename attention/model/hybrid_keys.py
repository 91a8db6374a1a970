"""A hybrid model's config keys, checked once at the boundary the way transformers' config classes
check them (JambaConfig, NemotronHConfig, GraniteMoeHybridConfig, BambaConfig, FalconH1Config,
Qwen3NextConfig, Qwen3_5TextConfig, Glm5NextTextConfig), so that attention/hybrid/ only ever meets
whole, positive sizes and a layer plan that transformers would build.

Every refusal is one line, exit 2, naming the key; transformers' own words where it has a check.
Work is linear in the config's real size: a layer plan is a list or a string the file holds, and
a period or interval is never expanded into one entry per layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attnsel.attention.model.validation import (
    INT32_MAX,
    check_config_int,
    kind_of,
    shown,
)
from attnsel.errors import UserInputError

# The sizes attention/hybrid/layout.py reads, per model type (vLLM's get_mamba_state_shape_from_config)
MAMBA2_KEYS = ("hidden_size", "mamba_expand", "mamba_n_heads", "mamba_n_groups", "mamba_d_state", "mamba_d_conv",
               "mamba_chunk_size", "mamba_d_ssm")
GDN_KEYS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim", "full_attention_interval")
SIZE_KEYS = {
    "jamba": ("hidden_size", "mamba_expand", "mamba_d_state", "mamba_d_conv", "attn_layer_period"),
    "nemotron_h": ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel", "chunk_size"),
    "granitemoehybrid": MAMBA2_KEYS, "bamba": MAMBA2_KEYS, "falcon_h1": MAMBA2_KEYS,
    "qwen3_next": GDN_KEYS, "qwen3_5": GDN_KEYS, "qwen3_5_text": GDN_KEYS, "qwen3_5_moe": GDN_KEYS,
    "qwen3_5_moe_text": GDN_KEYS,
    "glm5_next": ("linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim", "index_kpool"),
    "glm5_next_text": ("linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim", "index_kpool"),
}
# layer_types entries each config class accepts (GraniteMoeHybridConfig: "mamba" / "attention";
# Qwen3Next / Qwen3.5: transformers' layer_type_validation; Glm5Next adds its DSA "indexed_attention")
MAMBA_LAYER_TYPES = ("mamba", "attention")
GDN_LAYER_TYPES = ("full_attention", "linear_attention")
LAYER_TYPES = {"granitemoehybrid": MAMBA_LAYER_TYPES, "bamba": MAMBA_LAYER_TYPES, "jamba": MAMBA_LAYER_TYPES,
               "nemotron_h": MAMBA_LAYER_TYPES, "falcon_h1": MAMBA_LAYER_TYPES,
               "glm5_next": ("full_attention", "linear_attention", "indexed_attention"),
               "glm5_next_text": ("full_attention", "linear_attention", "indexed_attention")}
# NemotronHConfig: Mamba-2 (M), attention (*), MLP (-) and MoE (E) layers
PATTERN_CHARACTERS = "M*-E"
MAMBA2_HEADS = ("granitemoehybrid", "bamba", "falcon_h1")


def check_hybrid_config(text: Mapping[str, Any], model_type: str, where: str = "the model config") -> None:
    """Refuse a hybrid text config transformers would refuse, or whose state no GPU could hold."""
    if model_type not in SIZE_KEYS:
        return
    for key in SIZE_KEYS[model_type]:
        check_config_int(text, key, "", where, minimum=1)
    if "mamba_expand" in text and text["mamba_expand"] is None:  # transformers multiplies it by hidden_size
        raise UserInputError(f"{where}: mamba_expand is null; transformers needs a number (default 2)")
    _check_layer_plan(text, model_type, where)
    if model_type in MAMBA2_HEADS:
        _check_mamba2_heads(text, where, model_type)
    if model_type.startswith("glm5_next"):
        _check_linear_attn_config(text, where)
    _check_state_size(text, model_type, where)


def _layers(text: Mapping, where: str) -> int | None:
    layers = text.get("num_hidden_layers")
    return layers if isinstance(layers, int) else None


def _check_layer_plan(text: Mapping, model_type: str, where: str) -> None:
    layers = _layers(text, where)
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        allowed = LAYER_TYPES.get(model_type, GDN_LAYER_TYPES)
        wrong = next((t for t in types if t not in allowed), None)
        if wrong is not None:
            raise UserInputError(f"{where}: layer_types has {shown(wrong)}: the `layer_types` entries must be in "
                                 f"{', '.join(allowed)} (transformers refuses it)")
        if layers is not None and len(types) != layers:
            raise UserInputError(f"{where}: `num_hidden_layers` ({layers}) must be equal to the number of layer "
                                 f"types ({len(types)}) (transformers refuses it)")
    pattern = text.get("hybrid_override_pattern")
    if model_type == "nemotron_h" and pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise UserInputError(f"{where}: hybrid_override_pattern must be a string of 'M', '*', '-' or 'E', "
                                 f"not {kind_of(pattern)} ({shown(pattern)})")
        if pattern.strip(PATTERN_CHARACTERS):
            raise UserInputError(f"{where}: hybrid_override_pattern {shown(pattern)}: hybrid_override_pattern "
                                 "must only contain characters 'M', '*', '-' or 'E' (transformers refuses it)")
        if layers is not None and len(pattern) != layers:
            raise UserInputError(f"{where}: hybrid_override_pattern has {len(pattern)} layers, num_hidden_layers "
                                 f"{layers}: hybrid_override_pattern must have the same length as "
                                 "num_hidden_layers (transformers refuses it)")
        if "M" not in pattern and "*" not in pattern:
            raise UserInputError(f"{where}: hybrid_override_pattern {shown(pattern)} has no Mamba ('M') and no "
                                 "attention ('*') layer: vLLM would have no cache to size")
    if model_type == "jamba":
        _check_jamba_offset(text, where)
    indices = text.get("attn_layer_indices")
    if model_type == "bamba" and indices is not None and not (
            isinstance(indices, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                              and 0 <= i < (layers or INT32_MAX) for i in indices)):
        raise UserInputError(f"{where}: attn_layer_indices must be a list of layer numbers (0 to "
                             f"num_hidden_layers - 1), not {shown(indices)}")


def _check_jamba_offset(text: Mapping, where: str) -> None:
    period, offset = text.get("attn_layer_period"), text.get("attn_layer_offset")
    check_config_int(text, "attn_layer_offset", "", where, minimum=0)
    if isinstance(period, int) and isinstance(offset, int) and offset >= period:
        # JambaConfig._check_supported_offset
        raise UserInputError(f"{where}: attn_layer_offset {offset}, attn_layer_period {period}: attention layer "
                             f"offset ({offset}) must be smaller than attention layer period ({period}) "
                             "(transformers refuses it)")


def _check_mamba2_heads(text: Mapping, where: str, model_type: str) -> None:
    """GraniteMoeHybridConfig / BambaConfig: mamba_d_head is "auto" or mamba_expand x hidden_size over the
    heads. Falcon-H1's Mamba-2 mixer is built from mamba_d_ssm the same way (heads x head dim)."""
    who = "vLLM's Mamba-2 mixer needs it" if model_type == "falcon_h1" else "transformers refuses it"
    heads, head_dim = text.get("mamba_n_heads"), text.get("mamba_d_head")
    if head_dim is not None and head_dim != "auto":
        check_config_int(text, "mamba_d_head", "", where, minimum=1)
    intermediate, named = text.get("mamba_d_ssm"), "mamba_d_ssm"  # Falcon-H1 only (as attention/hybrid/layout.py)
    if model_type != "falcon_h1" or not isinstance(intermediate, int):
        expand, hidden = text.get("mamba_expand", 2), text.get("hidden_size")
        intermediate = expand * hidden if isinstance(expand, int) and isinstance(hidden, int) else None
        named = "mamba_expand * hidden_size"
    if not isinstance(heads, int) or intermediate is None:
        return
    if intermediate > INT32_MAX:
        raise UserInputError(f"{where}: {named} is {intermediate}: larger than any model (at most {INT32_MAX})")
    if intermediate % heads:
        raise UserInputError(f"{where}: mamba_n_heads ({heads}) must divide {named} ({intermediate}) ({who})")
    if isinstance(head_dim, int) and head_dim * heads != intermediate:
        raise UserInputError(f"{where}: mamba_d_head {head_dim} x mamba_n_heads {heads} is not {intermediate}: "
                             "the dimensions for the Mamba head state do not match the model intermediate_size "
                             f"({who})")


def _check_linear_attn_config(text: Mapping, where: str) -> None:
    linear = text.get("linear_attn_config")
    if linear is None:
        return
    if not isinstance(linear, Mapping):
        raise UserInputError(f"{where}: linear_attn_config must be an object, not {kind_of(linear)} ({shown(linear)})")
    for key in ("num_heads", "head_dim", "short_conv_kernel_size"):
        check_config_int(linear, key, "linear_attn_config.", where, minimum=1)
    layers = _layers(text, where)
    for key in ("full_attn_layers", "kda_layers"):
        value = linear.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 1
                                                  and (layers is None or i <= layers) for i in value):
            raise UserInputError(f"{where}: linear_attn_config.{key} must be a list of layer numbers "
                                 f"(1 to num_hidden_layers), not {shown(value)}")


def _check_state_size(text: Mapping, model_type: str, where: str) -> None:
    """One layer's recurrent state, in elements at TP 1: past int32 it is larger than any model."""
    dims: tuple[str, ...] | None = {"jamba": ("mamba_expand", "hidden_size", "mamba_d_state"),
            "nemotron_h": ("mamba_num_heads", "mamba_head_dim", "ssm_state_size"),
            "glm5_next": ("linear_num_heads", "linear_head_dim", "linear_head_dim")}.get(model_type)
    if model_type in MAMBA2_HEADS:
        dims = ("mamba_n_heads", "mamba_d_state")  # x head_dim, checked above to fit the intermediate size
    elif model_type.startswith("qwen3"):
        dims = ("linear_num_value_heads", "linear_value_head_dim", "linear_key_head_dim")
    elif model_type == "glm5_next_text":
        dims = ("linear_num_heads", "linear_head_dim", "linear_head_dim")
    values = [text.get(key) for key in dims or ()]
    numbers = [v for v in values if isinstance(v, int)]
    if dims is None or not values or len(numbers) != len(values):
        return
    elements = math.prod(numbers)
    if elements > INT32_MAX:
        raise UserInputError(f"{where}: {' x '.join(dims)} = {elements} state elements per layer: larger than "
                             f"any model (at most {INT32_MAX})")
