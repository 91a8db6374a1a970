"""vLLM's attention-backend selection as pure functions: the request, the selector's inputs and answers, the block-size flow."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.attention.selector.cudagraph import capture_sizes_for_batches
    from attnsel.attention.selector.engine import (
        Run,
        backend_kernel_block_size,
        check_supports_dtype,
        explain,
        get_attn_backend_cls,
        get_valid_backends,
        reasons_str,
        select_attention_backend,
        strip_unknown_inputs,
        validate_backend,
    )
    from attnsel.attention.selector.request import (
        SelectionRequest,
        build_selection,
        explain_selection,
        heads_per_gpu,
    )
    from attnsel.attention.selector.vit import vit_backend

__all__ = [
    "Run",
    "SelectionRequest",
    "backend_kernel_block_size",
    "build_selection",
    "capture_sizes_for_batches",
    "check_supports_dtype",
    "explain",
    "explain_selection",
    "get_attn_backend_cls",
    "get_valid_backends",
    "heads_per_gpu",
    "reasons_str",
    "select_attention_backend",
    "strip_unknown_inputs",
    "validate_backend",
    "vit_backend",
]
__getattr__ = lazy_door(__name__, {
    "Run": "engine",
    "check_supports_dtype": "engine",
    "SelectionRequest": "request",
    "build_selection": "request",
    "capture_sizes_for_batches": "cudagraph",
    "explain": "engine",
    "explain_selection": "request",
    "get_attn_backend_cls": "engine",
    "get_valid_backends": "engine",
    "heads_per_gpu": "request",
    "backend_kernel_block_size": "engine",
    "reasons_str": "engine",
    "select_attention_backend": "engine",
    "strip_unknown_inputs": "engine",
    "validate_backend": "engine",
    "vit_backend": "vit",
})
