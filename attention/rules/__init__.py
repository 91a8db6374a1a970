"""The vocabulary of vLLM's attention rules, shared by every release: kernel block sizes and a
backend's attributes as data (`spec`), the `--dtype` spellings and their one parser (`dtype`), what
the selector reads and answers (`selection`), and which packages are present here, found without
importing them (`imports`).

The version object (`RuleProfile`) and each release's data and code live in attention/versions/.
Nothing outside attention/versions/ tests for a vLLM version: it asks the version object.
"""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.attention.rules.dtype import (
        ACCEPTED_DTYPES,
        DTYPE_SPELLINGS,
        TORCH_DTYPES,
        parse_dtype,
        preferred_dtype,
        shape_dtype,
    )
    from attnsel.attention.rules.imports import importable_map, require_vllm_package
    from attnsel.attention.rules.serve_args import (
        AUTO_MAX_MODEL_LEN,
        human_readable_int,
        human_readable_int_or_auto,
        serve_int,
    )
    from attnsel.attention.rules.selection import (
        BackendVerdict,
        Explanation,
        LogLine,
        OPTIONAL_SELECTOR_FIELDS,
        SelectionContext,
        SelectorInputs,
        VllmRaises,
    )
    from attnsel.attention.rules.spec import (
        BackendSpec,
        DEFAULT_INDEX_TOPK,
        FP8_KV_CACHE_DTYPES,
        FlashAttnResolution,
        IMPORT_ERROR_REASON,
        KernelBlockSize,
        MODEL_HEADS_WHEN_UNKNOWN,
        MultipleOf,
        UNQUANTIZED_KV_CACHE_DTYPES,
        attn_type_str,
        intersect_sizes,
        is_fp8,
        is_quantized_kv_cache,
        kernel_block_size_for,
        kernel_sizes_display,
        kernel_sizes_repr,
        parse_kernel_sizes,
    )

__all__ = [
    "ACCEPTED_DTYPES",
    "AUTO_MAX_MODEL_LEN",
    "BackendSpec",
    "BackendVerdict",
    "DEFAULT_INDEX_TOPK",
    "DTYPE_SPELLINGS",
    "Explanation",
    "FP8_KV_CACHE_DTYPES",
    "FlashAttnResolution",
    "IMPORT_ERROR_REASON",
    "KernelBlockSize",
    "LogLine",
    "MODEL_HEADS_WHEN_UNKNOWN",
    "MultipleOf",
    "OPTIONAL_SELECTOR_FIELDS",
    "SelectionContext",
    "SelectorInputs",
    "TORCH_DTYPES",
    "UNQUANTIZED_KV_CACHE_DTYPES",
    "VllmRaises",
    "attn_type_str",
    "human_readable_int",
    "human_readable_int_or_auto",
    "importable_map",
    "require_vllm_package",
    "serve_int",
    "intersect_sizes",
    "is_fp8",
    "is_quantized_kv_cache",
    "kernel_block_size_for",
    "kernel_sizes_display",
    "kernel_sizes_repr",
    "parse_dtype",
    "parse_kernel_sizes",
    "preferred_dtype",
    "shape_dtype",
]
__getattr__ = lazy_door(__name__, {
    "ACCEPTED_DTYPES": "dtype",
    "AUTO_MAX_MODEL_LEN": "serve_args",
    "human_readable_int": "serve_args",
    "human_readable_int_or_auto": "serve_args",
    "serve_int": "serve_args",
    "BackendSpec": "spec",
    "BackendVerdict": "selection",
    "DEFAULT_INDEX_TOPK": "spec",
    "DTYPE_SPELLINGS": "dtype",
    "Explanation": "selection",
    "FP8_KV_CACHE_DTYPES": "spec",
    "FlashAttnResolution": "spec",
    "IMPORT_ERROR_REASON": "spec",
    "KernelBlockSize": "spec",
    "LogLine": "selection",
    "MODEL_HEADS_WHEN_UNKNOWN": "spec",
    "MultipleOf": "spec",
    "OPTIONAL_SELECTOR_FIELDS": "selection",
    "SelectionContext": "selection",
    "SelectorInputs": "selection",
    "TORCH_DTYPES": "dtype",
    "UNQUANTIZED_KV_CACHE_DTYPES": "spec",
    "VllmRaises": "selection",
    "attn_type_str": "spec",
    "importable_map": "imports",
    "require_vllm_package": "imports",
    "intersect_sizes": "spec",
    "is_fp8": "spec",
    "is_quantized_kv_cache": "spec",
    "kernel_block_size_for": "spec",
    "kernel_sizes_display": "spec",
    "kernel_sizes_repr": "spec",
    "parse_dtype": "dtype",
    "parse_kernel_sizes": "spec",
    "preferred_dtype": "dtype",
    "shape_dtype": "dtype",
})
