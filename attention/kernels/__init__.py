"""Adapters that run each backend's real kernel over a paged KV cache the way vLLM calls it."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.kernels.base import (
        BACKENDS,
        MLA_BACKENDS,
        SPARSE_MLA_BACKENDS,
    )
    from attnsel.attention.kernels.flashinfer_jit import (
        build_jit_modules,
        jit_module_requests,
        named_jit_requests,
    )
    from attnsel.attention.kernels.kv_quant import FP8_TOLERANCE, TIMED_KV_CACHE_DTYPES
    from attnsel.attention.kernels.registry import adapters_for

__getattr__ = lazy_door(__name__)
