"""Which kernel providers exist for each vLLM backend, best first (torch-free to import)."""

from __future__ import annotations

from .base import BACKENDS, KernelAdapter


def adapters_for(backend: str) -> list[KernelAdapter]:
    """Providers of `backend`'s kernel, best (closest to what vLLM runs) first.

    FLASHINFER: tensor-core decode (vLLM's path), then the CUDA-core decode for comparison.
    FLASH_ATTN: vllm.vllm_flash_attn, FA3 (flash_attn_interface), FA4 (flash_attn.cute), flash-attn 2.x.
    TRITON_ATTN: vLLM's unified_attention when vLLM is installed, then attnsel's own kernels.
    FLEX_ATTENTION: torch.compile'd flex_attention.
    """
    from . import flash_attn_adapter as fa
    from .flashinfer_adapter import FlashInferAdapter
    from .flex_adapter import FlexAttentionAdapter
    from .triton_paged import AttnselTritonAdapter, VllmTritonAdapter

    key = backend.upper()
    if key == "FLASHINFER":
        return [FlashInferAdapter(use_tensor_cores=True), FlashInferAdapter(use_tensor_cores=False)]
    if key == "FLASH_ATTN":
        return [fa.VllmFlashAttnAdapter(), fa.FA3Adapter(), fa.FA4Adapter(), fa.FA2Adapter()]
    if key == "TRITON_ATTN":
        return [VllmTritonAdapter(), AttnselTritonAdapter()]
    if key == "FLEX_ATTENTION":
        return [FlexAttentionAdapter()]
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def all_backends() -> list[str]:
    return list(BACKENDS)


def first_available(backend: str) -> tuple[KernelAdapter | None, dict[str, str]]:
    """The best usable provider of `backend`, and why each better one was skipped."""
    skipped: dict[str, str] = {}
    for adapter in adapters_for(backend):
        reason = adapter.availability()
        if reason is None:
            return adapter, skipped
        skipped[adapter.name] = reason
    return None, skipped
