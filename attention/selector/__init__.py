"""vLLM's attention-backend selection as pure functions: the request, the selector's inputs and answers, the block-size flow."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.selector.cudagraph import capture_sizes_for_batches
    from attnsel.attention.selector.engine import (
        Run,
        backend_kernel_block_size,
        check_supports_dtype,
        explain,
        get_attn_backend_cls,
        get_valid_backends,
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

__getattr__ = lazy_door(__name__)
