"""Adapters that run each backend's real kernel over a paged KV cache the way vLLM calls it."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
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

__all__ = [
    "BACKENDS",
    "FP8_TOLERANCE",
    "MLA_BACKENDS",
    "SPARSE_MLA_BACKENDS",
    "TIMED_KV_CACHE_DTYPES",
    "adapters_for",
    "build_jit_modules",
    "jit_module_requests",
    "named_jit_requests",
]
__getattr__ = lazy_door(__name__, {
    "BACKENDS": "base",
    "FP8_TOLERANCE": "kv_quant",
    "MLA_BACKENDS": "base",
    "SPARSE_MLA_BACKENDS": "base",
    "TIMED_KV_CACHE_DTYPES": "kv_quant",
    "adapters_for": "registry",
    "build_jit_modules": "flashinfer_jit",
    "jit_module_requests": "flashinfer_jit",
    "named_jit_requests": "flashinfer_jit",
})
