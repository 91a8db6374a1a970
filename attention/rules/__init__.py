"""The vocabulary of vLLM's attention rules, shared by every release: kernel block sizes and a
backend's attributes as data (`spec`), the `--dtype` spellings and their one parser (`dtype`), what
the selector reads and answers (`selection`), and which packages are present here, found without
importing them (`imports`).

The version object (`RuleProfile`) and each release's data and code live in attention/versions/.
Nothing outside attention/versions/ tests for a vLLM version: it asks the version object.
"""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.rules.dtype import (
        ACCEPTED_DTYPES,
        DTYPE_SPELLINGS,
        TORCH_DTYPES,
        parse_dtype,
        preferred_dtype,
        shape_dtype,
    )
    from attnsel.attention.rules.imports import importable_map, require_vllm_package
    from attnsel.attention.rules.quantization import (
        QuantizationRefusal,
        QuantizationRules,
        quantization_refusal,
    )
    from attnsel.attention.rules.selection import (
        OPTIONAL_SELECTOR_FIELDS,
        BackendVerdict,
        Explanation,
        LogLine,
        SelectionContext,
        SelectorInputs,
        VllmRaises,
        reasons_str,
    )
    from attnsel.attention.rules.serve_args import (
        AUTO_MAX_MODEL_LEN,
        AttentionFlags,
        attention_flags,
        backend_flag,
        human_readable_int,
        human_readable_int_or_auto,
        serve_int,
        split_dotted_attention_config,
    )
    from attnsel.attention.rules.serve_line import (
        ServeLine,
        check_serve_line_flags,
        merge_serve_line,
        read_serve_line,
    )
    from attnsel.attention.rules.spec import (
        DEFAULT_INDEX_TOPK,
        FP8_KV_CACHE_DTYPES,
        IMPORT_ERROR_REASON,
        MODEL_HEADS_WHEN_UNKNOWN,
        UNQUANTIZED_KV_CACHE_DTYPES,
        BackendSpec,
        CapabilityRule,
        CompositeRule,
        FlagRule,
        FlashAttnResolution,
        HeadSizeRule,
        KernelBlockSize,
        LayoutRule,
        MultipleOf,
        NamedRule,
        attn_type_str,
        intersect_sizes,
        is_fp8,
        is_quantized_kv_cache,
        kernel_block_size_for,
        kernel_sizes_display,
        kernel_sizes_repr,
        parse_kernel_sizes,
    )

__getattr__ = lazy_door(__name__)
