"""Head size and head counts as vLLM derives them from a model config (docs/vllm-rules.md §6): MLA and
VLLM_MLA_DISABLE head sizes, KV heads, and the tensor-parallel splits vLLM refuses."""

from __future__ import annotations

from collections.abc import Mapping

from attnsel.attention.model.rules import ModelRules
from attnsel.errors import CheckFailed, UserInputError


def positive_int(config: Mapping, key: str, why: str) -> int:
    value = config.get(key)
    if value is None:
        raise UserInputError(f"The model config has no {key}: cannot derive {why}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"Impossible {key} {value!r} in the model config: it must be a positive integer")
    if value <= 0:
        raise UserInputError(f"Impossible {key} {value} in the model config: it must be a positive integer")
    return value


def head_size(
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
        size = positive_int(text_config, "attention_head_dim", "the head size")
        notes.append(f"head_size: attention_head_dim = {size}")
        return size
    if is_deepseek_mla and text_model_type in rules.mla_head_dim_model_types:
        size = positive_int(text_config, "head_dim", "the MLA head size")
        notes.append(f"head_size: {text_model_type!r} (compress ratios) uses head_dim = {size}")
        return size
    if is_deepseek_mla:
        kv_lora_rank = positive_int(text_config, "kv_lora_rank", "the MLA head size")
        rope = _non_negative_int(text_config, "qk_rope_head_dim")
        if not mla_disabled:
            notes.append(f"head_size: MLA kv_lora_rank {kv_lora_rank} + qk_rope_head_dim {rope} = {kv_lora_rank + rope}")
            return kv_lora_rank + rope
        nope = _non_negative_int(text_config, "qk_nope_head_dim")
        if rope and nope:
            notes.append(f"head_size: VLLM_MLA_DISABLE → qk_nope_head_dim {nope} + qk_rope_head_dim {rope} = {nope + rope}")
            return nope + rope
    if text_config.get("head_dim") is not None:
        size = positive_int(text_config, "head_dim", "the head size")
        notes.append(f"head_size: head_dim = {size}")
        return size
    if text_config.get("hidden_size_per_head") is not None:
        size = positive_int(text_config, "hidden_size_per_head", "the head size")
        notes.append(f"head_size: hidden_size_per_head = {size}")
        return size
    hidden = positive_int(text_config, "hidden_size", "the head size")
    heads = positive_int(text_config, "num_attention_heads", "the head size")
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


def total_attention_heads(text_config: Mapping, is_attention_free: bool) -> int:
    if is_attention_free and text_config.get("num_attention_heads") is None:
        return 0
    return positive_int(text_config, "num_attention_heads", "the number of attention heads")


def num_kv_heads(text_config: Mapping, total_heads: int, use_mla: bool, is_attention_free: bool, notes: list[str]) -> int:
    if is_attention_free:
        return 0
    if use_mla:
        notes.append("num_kv_heads: 1 (MLA layers keep one latent KV head)")
        return 1
    # `get_total_num_kv_heads`: the first of these keys that is set, else num_attention_heads.
    for key in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups"):
        if text_config.get(key) is not None:
            value = positive_int(text_config, key, "the number of KV heads")
            notes.append(f"num_kv_heads: {key} = {value}")
            return value
    notes.append(f"num_kv_heads: = num_attention_heads {total_heads} (no KV-head key)")
    return total_heads


def check_tensor_parallel(tp: int, total_heads: int, is_attention_free: bool) -> int:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UserInputError(f"tensor_parallel_size must be a positive integer, got {tp!r}")
    if total_heads and not is_attention_free and total_heads % tp:
        # ModelConfig.verify_with_parallel_config
        raise CheckFailed(
            f"Total number of attention heads ({total_heads}) must be divisible by "
            f"tensor parallel size ({tp})."
        )
    return tp


def kv_heads_split_assertion(total_kv_heads: int, tp: int) -> str | None:
    """The assertion vLLM's model code fails when it splits `total_kv_heads` over TP ranks, or None.
    The QKV projection splits KV heads over the ranks, or replicates them when there are fewer KV
    heads than ranks (models/llama.py and the other decoders: bare asserts).

    >>> kv_heads_split_assertion(8, 2), kv_heads_split_assertion(4, 8), kv_heads_split_assertion(6, 4)
    (None, None, 'total_num_kv_heads % tp_size == 0')
    """
    if total_kv_heads >= tp and total_kv_heads % tp:
        return "total_num_kv_heads % tp_size == 0"
    if total_kv_heads < tp and tp % total_kv_heads:
        return "tp_size % total_num_kv_heads == 0"
    return None


def check_kv_heads_split(total_kv_heads: int, tp: int) -> None:
    """A model config whose KV heads vLLM's model code cannot split over `tp`: vLLM would raise."""
    failed = kv_heads_split_assertion(total_kv_heads, tp)
    if failed == "total_num_kv_heads % tp_size == 0":
        raise CheckFailed(f"vLLM would raise AssertionError (model code: {failed}): "
                          f"{total_kv_heads} KV heads cannot be split over tensor parallel size {tp}")
    if failed:
        raise CheckFailed(f"vLLM would raise AssertionError (model code: {failed}): "
                          f"tensor parallel size {tp} is not a multiple of the {total_kv_heads} KV heads to replicate")