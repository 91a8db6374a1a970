"""Which kernel providers exist for each vLLM backend, best first (torch-free to import)."""

from __future__ import annotations

from attnsel.attention.kernels.base import (
    BACKENDS,
    MLA_BACKENDS,
    SPARSE_MLA_BACKENDS,
    KernelAdapter,
)


def adapters_for(backend: str, device: str = "cuda") -> list[KernelAdapter]:
    """Providers of `backend`'s kernel, best (closest to what vLLM runs) first.

    With vLLM installed, FLASH_ATTN, FLASHINFER and TRITON_ATTN run through vLLM's own backend
    classes (vllm_backend.py: its AttentionImpl with its metadata builder). The providers after it
    are stand-ins for a machine without vLLM (each row names its provider) and the fallback when
    vLLM's classes cannot be driven for a row:
    FLASHINFER: flashinfer-python's tensor-core decode (vLLM's path), then its CUDA-core decode.
    FLASH_ATTN: vLLM's bare vllm_flash_attn op (without its builder's AOT schedule: fallback only),
      FA3 (flash_attn_interface), FA4 (flash_attn.cute), flash-attn 2.x.
    TRITON_ATTN: attnsel's own Triton kernels.
    FLEX_ATTENTION: torch.compile'd flex_attention (attnsel's adapter, also with vLLM).
    MLA backends: vLLM's own MLA impl at decode (vllm_mla.py); FLASHINFER_MLA without vLLM:
      FlashInfer's BatchMLAPagedAttentionWrapper (a named stand-in). The other MLA kernels ship
      only inside vLLM (vllm._flashmla_C, vllm.vllm_flash_attn, its Triton decode, CUTLASS MLA).
    Sparse MLA backends: vLLM's own sparse MLA impl at decode with the indexer's top-k (vllm/sparse_mla.py).
    """
    from attnsel.attention.kernels import flash_attn_adapter as fa
    from attnsel.attention.kernels.flashinfer_adapter import FlashInferAdapter
    from attnsel.attention.kernels.flex_adapter import FlexAttentionAdapter
    from attnsel.attention.kernels.triton_paged import AttnselTritonAdapter
    from attnsel.attention.kernels.vllm import VllmBackendAdapter

    key = backend.upper()
    if key in SPARSE_MLA_BACKENDS:  # shipped only inside vLLM: no stand-in
        from attnsel.attention.kernels.vllm import VllmSparseMlaAdapter

        return [VllmSparseMlaAdapter(key, device=device)]
    if key in MLA_BACKENDS:
        from attnsel.attention.kernels.flashinfer_mla import FlashInferMlaAdapter
        from attnsel.attention.kernels.vllm import VllmMlaAdapter

        return [VllmMlaAdapter(key, device=device)] + ([FlashInferMlaAdapter()] if key == "FLASHINFER_MLA" else [])
    if key == "FLASHINFER":
        return [VllmBackendAdapter(key, device=device), FlashInferAdapter(use_tensor_cores=True), FlashInferAdapter(use_tensor_cores=False)]
    if key == "FLASH_ATTN":
        return [VllmBackendAdapter(key, device=device), fa.VllmFlashAttnAdapter(), fa.FA3Adapter(), fa.FA4Adapter(), fa.FA2Adapter()]
    if key == "TRITON_ATTN":
        return [VllmBackendAdapter(key, device=device), AttnselTritonAdapter()]
    if key == "FLEX_ATTENTION":
        return [FlexAttentionAdapter()]
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(all_backends())}")


def all_backends() -> list[str]:
    return list(BACKENDS + MLA_BACKENDS + SPARSE_MLA_BACKENDS)


def first_available(backend: str) -> tuple[KernelAdapter | None, dict[str, str]]:
    """The best usable provider of `backend`, and why each better one was skipped."""
    skipped: dict[str, str] = {}
    for adapter in adapters_for(backend):
        reason = adapter.availability()
        if reason is None:
            return adapter, skipped
        skipped[adapter.name] = reason
    return None, skipped
