"""Validate at the boundary, once: a config.json and the command-line flags, before any rule runs.

`validate_config()` checks the type and range of every config.json key attnsel (and vLLM) reads,
at the top level and in the nested text/vision/encoder configs, so that no rule ever meets a
string where it expects a number, a list where it expects a name, or a size beyond any GPU.
What transformers itself refuses (its configs are strict dataclasses: `hidden_size` must be an
int, `num_attention_heads` cannot be null) is refused here with its words; what vLLM refuses
later (a dtype name torch does not know, heads not divisible by KV heads) with vLLM's.

`check_request()` does the same for the flags: sizes are positive and fit an int32 (vLLM's block
tables and kernels index with int32), parallel sizes are bounded, names are never empty.
Every refusal is a UserInputError: one line, exit 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from attnsel.errors import UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from attnsel.attention.versions import RuleProfile

INT32_MAX = 2**31 - 1
# More GPUs than any deployment: a bound for TP/DCP/PCP/--num-gpus, so no work scales with a
# number nobody checked (preflight used to build every GPU pair of a TP group of any size).
MAX_PARALLEL = 1024

# config.json keys, by the type transformers / vLLM expect (docs/vllm-rules.md §6 reads them from
# hf_text_config; the vision config follows the same names).
POSITIVE_INT_KEYS = (
    "hidden_size", "num_attention_heads", "num_key_value_heads", "n_head_kv", "num_kv_heads",
    "multi_query_group_num", "num_attention_groups", "head_dim", "hidden_size_per_head", "attention_head_dim",
    "kv_lora_rank", "q_lora_rank", "v_head_dim", "index_topk", "num_heads", "num_hidden_layers",
    # the sizes the memory plan reads (attention/memory/weights.py, checks.py)
    "vocab_size", "intermediate_size", "max_position_embeddings", "moe_intermediate_size",
    "shared_expert_intermediate_size",
)
# expert counts: 0 in a dense model of a MoE family (granite-4.0-h-350m: num_local_experts 0)
NON_NEGATIVE_INT_KEYS = ("qk_rope_head_dim", "qk_nope_head_dim", "num_local_experts", "num_experts", "n_routed_experts",
                         "num_experts_per_tok", "n_shared_experts")
# transformers' strict config dataclasses refuse null for these (StrictDataclassFieldValidationError): typed
# `int` in its config classes (transformers 5.17.0 models/llama/configuration_llama.py:64-71,
# mixtral/configuration_mixtral.py:68-87, qwen3_moe/configuration_qwen3_moe.py:85-105); num_key_value_heads is
# `int | None` (the heads' count), so null stays allowed there
NOT_NULL_KEYS = ("hidden_size", "num_attention_heads", "vocab_size", "intermediate_size", "num_hidden_layers",
                 "max_position_embeddings", "num_local_experts", "num_experts", "moe_intermediate_size",
                 "num_experts_per_tok")
BOOL_KEYS = ("is_causal", "use_sliding_window", "is_mm_prefix_lm")
OBJECT_KEYS = ("text_config", "language_config", "llm_config", "thinker_config", "vision_config",
               "encoder_config", "quantization_config", "compression_config", "rope_scaling")
NESTED_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "thinker_config", "vision_config",
                      "encoder_config")
STRING_LIST_KEYS = ("architectures", "layer_types")
DTYPE_KEYS = ("torch_dtype", "dtype")
MAX_CONFIG_DEPTH = 64  # nesting that deep is no model config; deeper rules would recurse needlessly

# Names torch has as `torch.<name>` dtypes: transformers turns a config's torch_dtype string into
# `getattr(torch, name)`, so any other string fails to load (AttributeError). Real, non-float
# dtypes (int8, int3...) load, and vLLM's --dtype auto then falls back to its preferred dtype.
TORCH_DTYPE_NAMES = frozenset(
    ["float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex32", "chalf", "complex64",
     "cfloat", "complex128", "cdouble", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "short", "int32",
     "int", "int64", "long", "bool", "quint8", "qint8", "qint32", "quint4x2", "quint2x4", "bits1x8", "bits2x4",
     "bits4x2", "bits8", "bits16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
     "float8_e8m0fnu", "float4_e2m1fn_x2"]
    + [f"int{n}" for n in range(1, 8)] + [f"uint{n}" for n in range(1, 8)]
)


def kind_of(value: object) -> str:
    """How a message names a JSON value's type: "a string", "a list", "null"..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**12:
        return f"a {len(str(abs(value)))}-digit number" if abs(value) < 10**4000 else "a number of thousands of digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_config(config: Mapping, where: str = "the model config") -> None:
    """Refuse a config.json whose keys have types or values no real model has (one line, exit 2)."""
    _check_depth(config, where)
    _check_section(config, "", where)
    for key in NESTED_CONFIG_KEYS:
        nested = config.get(key)
        if isinstance(nested, Mapping):
            _check_section(nested, f"{key}.", where)
    quant = [config.get(k) for k in ("quantization_config", "compression_config")]
    for section in quant:
        if isinstance(section, Mapping):
            scheme = section.get("kv_cache_scheme")
            method = section.get("quant_method")
            if method is not None and not isinstance(method, str):
                raise UserInputError(f"{where}: quantization_config.quant_method must be a name such as \"fp8\", "
                                     f"not {kind_of(method)} ({shown(method)})")
            if scheme is not None and not isinstance(scheme, Mapping):
                raise UserInputError(f"{where}: quantization_config.kv_cache_scheme must be an object or null, "
                                     f"not {kind_of(scheme)} ({shown(scheme)})")


def _check_depth(value: object, where: str) -> None:
    """Iterative (no recursion): a config nested deeper than MAX_CONFIG_DEPTH is refused."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise UserInputError(f"{where} nests objects or lists more than {MAX_CONFIG_DEPTH} levels deep: "
                                 "no model config does")
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _check_section(section: Mapping, prefix: str, where: str) -> None:
    model_type = section.get("model_type")
    if "model_type" in section and model_type is not None and not isinstance(model_type, str):
        raise UserInputError(f"{where}: {prefix}model_type must be a name such as \"llama\", not "
                             f"{kind_of(model_type)} ({shown(model_type)})")
    for key in NOT_NULL_KEYS:
        if key in section and section[key] is None:
            raise UserInputError(f"{where}: {prefix}{key} is null; transformers refuses it (expected int, got None) "
                                 "and vLLM needs a number")
    for key in POSITIVE_INT_KEYS:
        check_config_int(section, key, prefix, where, minimum=1)
    for key in NON_NEGATIVE_INT_KEYS:
        check_config_int(section, key, prefix, where, minimum=0)
    for key in BOOL_KEYS:
        value = section.get(key)
        if value is not None and not isinstance(value, bool):
            raise UserInputError(f"{where}: {prefix}{key} must be true or false, not {kind_of(value)} ({shown(value)})")
    for key in OBJECT_KEYS:
        value = section.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise UserInputError(f"{where}: {prefix}{key} must be an object (or absent), not {kind_of(value)} "
                                 f"({shown(value)})")
    for key in STRING_LIST_KEYS:
        value = section.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise UserInputError(f"{where}: {prefix}{key} must be a list of names (strings), not {kind_of(value)} "
                                 f"({shown(value)})")
    for key in DTYPE_KEYS:
        _check_dtype_key(section, key, prefix, where)
    _check_experts(section, prefix, where)


def _check_experts(section: Mapping, prefix: str, where: str) -> None:
    """A MoE layer routes each token to at least one of its experts, and to no more than it has (vLLM's
    FusedMoE takes top_k of num_experts router logits); a dense model of a MoE family has both 0."""
    experts = next((section[k] for k in ("num_local_experts", "num_experts", "n_routed_experts")
                    if isinstance(section.get(k), int)), None)
    top_k = section.get("num_experts_per_tok")
    if experts is None or not isinstance(top_k, int):
        return
    if top_k > experts or (experts > 0 and top_k == 0):
        raise UserInputError(f"Impossible {prefix}num_experts_per_tok {top_k} in {where}: a token is routed to "
                             f"between 1 and the {experts} experts the config names")


def check_config_int(section: Mapping, key: str, prefix: str, where: str, *, minimum: int) -> None:
    value = section.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"Impossible {prefix}{key} {shown(value)} in {where}: it must be a whole number, "
                             f"not {kind_of(value)} (transformers refuses it too)")
    if value < minimum:
        raise UserInputError(f"Impossible {prefix}{key} {shown(value)} in {where}: it must be "
                             f"{'a positive' if minimum else 'a non-negative'} integer")
    if value > INT32_MAX:
        raise UserInputError(f"Impossible {prefix}{key} {shown(value)} in {where}: larger than any model "
                             f"(at most {INT32_MAX})")


def _check_dtype_key(section: Mapping, key: str, prefix: str, where: str) -> None:
    value = section.get(key)
    if value is None:
        return
    if not isinstance(value, str):
        raise UserInputError(f"{where}: {prefix}{key} must be a dtype name such as \"bfloat16\", not {kind_of(value)} "
                             f"({shown(value)})")
    name = value.strip().removeprefix("torch.")
    if name not in TORCH_DTYPE_NAMES:
        raise UserInputError(f"{where}: {prefix}{key} {shown(value)} names no torch dtype, so transformers cannot "
                             f"load this config (module 'torch' has no attribute {name!r}); use e.g. \"bfloat16\"")


# ---------------------------------------------------------------------------------------------
# Flags


def check_size(flag: str, value: int | None, *, minimum: int = 1, maximum: int = INT32_MAX) -> None:
    """A size or count from the command line: a whole number in [minimum, maximum]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"{flag} must be a whole number, got {shown(value)}")
    if value < minimum:
        raise UserInputError(f"{flag} must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        what = {MAX_PARALLEL: "is more GPUs than any deployment", INT32_MAX: "is more than any model or KV cache"}
        raise UserInputError(f"{flag} {shown(value)} {what.get(maximum, 'is too large')} (at most {maximum})")


def check_parallel(flag: str, value: int | None) -> None:
    check_size(flag, value, maximum=MAX_PARALLEL)


def check_positive_number(flag: str, value: float | None, *, allow_zero: bool = False) -> None:
    """A float flag (a tolerance, a timeout): finite and positive (NaN and inf refused)."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise UserInputError(f"{flag} must be a finite number {bound}, got {value!r}")


def check_names(flags: Iterable[tuple[str, str | None]]) -> None:
    """A name flag that was given must say something: `--dtype ""` is not `--dtype auto`."""
    for flag, value in flags:
        if value is not None and not value.strip():
            raise UserInputError(f"{flag} is empty: give a value or leave the flag out")


def check_heads(num_heads: int | None, num_kv_heads: int | None, where: str = "") -> None:
    """vLLM's Attention layer: `assert num_heads % num_kv_heads == 0` (layers/attention/attention.py),
    with its message; more KV heads than query heads fails the same way."""
    if not num_heads or not num_kv_heads:
        return
    if num_heads % num_kv_heads:
        raise UserInputError(
            f"vLLM would raise AssertionError: num_heads ({num_heads}) is not divisible by num_kv_heads "
            f"({num_kv_heads}){where}: every KV head must serve the same number of query heads"
        )


SIZE_FIELDS = ("head_size", "block_size", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank", "index_topk")
COUNT_FIELDS = ("num_heads", "num_kv_heads")
NAME_FIELDS = (("dtype", "--dtype"), ("kv_cache_dtype", "--kv-cache-dtype"),
               ("attention_backend", "--attention-backend"), ("attn_type", "--attn-type"))


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def check_request(request: object, tensor_parallel_size: int = 1) -> None:
    """The flags of one explain/preflight request (attention/selector/request.py SelectionRequest, or any
    object with the same field names): sizes, counts, parallel sizes and names."""
    for name in SIZE_FIELDS:
        check_size(_flag(name), getattr(request, name, None))
    check_size("--qk-nope-head-dim", getattr(request, "qk_nope_head_dim", None), minimum=0)
    for name in COUNT_FIELDS:
        check_size(_flag(name), getattr(request, name, None))
    check_parallel("--tensor-parallel-size", tensor_parallel_size)
    check_parallel("--dcp", getattr(request, "dcp", None))
    check_parallel("--pcp", getattr(request, "pcp", None))
    check_names((flag, getattr(request, name, None)) for name, flag in NAME_FIELDS)
    check_heads(getattr(request, "num_heads", None), getattr(request, "num_kv_heads", None),
                " (--num-heads / --num-kv-heads)")


def check_tune_flags(*, tolerance: float | None, timeout: float, head_size: int | None,
                     num_heads: int | None, num_kv_heads: int | None, tensor_parallel_size: int,
                     names: Iterable[tuple[str, str | None]]) -> None:
    """`attnsel tune`'s flags, before any plan, worker or output folder exists."""
    check_positive_number("--tolerance", tolerance)
    check_positive_number("--timeout", timeout)
    for flag, value in (("--head-size", head_size), ("--num-heads", num_heads), ("--num-kv-heads", num_kv_heads)):
        check_size(flag, value)
    check_parallel("--tensor-parallel-size", tensor_parallel_size)
    check_names(names)
    check_heads(num_heads, num_kv_heads, " (--num-heads / --num-kv-heads)")


def check_hybrid_flags(request: object, profile: RuleProfile) -> None:
    """--mamba-cache-mode, --mamba-ssm-cache-dtype, --mamba-cache-dtype: the values the version's
    vLLM parses (config/cache.py `MambaCacheMode` and `MambaDType`, its argparse choices)."""
    modes = tuple((profile.data.get("hybrid") or {}).get("mamba_cache_modes", ()))
    mode = getattr(request, "mamba_cache_mode", None)
    if mode is not None and mode not in modes:
        raise UserInputError(f"vLLM {profile.vllm_version} has no --mamba-cache-mode {mode!r}; "
                             f"use one of {', '.join(modes) or '(none: no hybrid rules)'}")
    dtypes = profile.model_rules.mamba_dtypes
    for flag, name in (("--mamba-ssm-cache-dtype", "mamba_ssm_cache_dtype"), ("--mamba-cache-dtype", "mamba_cache_dtype")):
        value = getattr(request, name, None)
        if value is not None and value not in dtypes:
            raise UserInputError(f"vLLM {profile.vllm_version} has no {flag} {value!r}; use one of {', '.join(dtypes)}")
