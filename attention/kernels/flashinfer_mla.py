"""FLASHINFER_MLA without vLLM: FlashInfer's own MLA decode, BatchMLAPagedAttentionWrapper.

A named stand-in. vLLM's FLASHINFER_MLA (CC 10.x only, docs/vllm-rules.md §3b) calls FlashInfer's TRT-LLM
MLA kernel (`trtllm_batch_decode_with_kv_cache_mla`, through vllm_mla.py when vLLM is installed);
this wrapper runs FlashInfer's FA2/FA3 MLA kernels (backend "auto": FA3 on SM90, else FA2) over
the same latent cache. Its kernel pages are the ones vLLM's FLASHINFER_MLA would use (kernel block
sizes [32, 64]: a larger --block-size is split into them).

The call (flashinfer/mla/_core.py, 0.6-0.7): plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr,
num_heads, head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type),
then run(q_nope, q_pe, ckv_cache, kpe_cache) with the latent cache split into its kv_c and k_pe
parts (views of one cache, as SGLang passes them). run() takes no KV scale: fp8 caches are not
timed with it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from attnsel.attention.kernels.base import (
    PreparedKernel,
    compute_capability,
    cuda_device_reason,
    installed_version,
    latent,
    module_importable,
    shape_kind_reason,
)
from attnsel.attention.rules import kernel_block_size_for

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnsel.attention.kernels.base import Batch
    from attnsel.attention.kernels.paged import Workload

WORKSPACE_BYTES = 128 * 1024 * 1024  # vLLM's FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE
KERNEL_BLOCK_SIZES = (32, 64)  # vLLM's FlashInferMLABackend.get_supported_kernel_block_sizes
HEAD_DIMS = (512, 64)  # (kv_lora_rank, qk_rope_head_dim) FlashInfer's MLA kernels are built for


class FlashInferMlaAdapter:
    backend = "FLASHINFER_MLA"
    name = "flashinfer-mla-wrapper"

    def availability(self) -> str | None:
        if installed_version("flashinfer-python", "flashinfer") is None:
            return "flashinfer-python is not installed"
        return cuda_device_reason("cuda") or module_importable("flashinfer")

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        kind = shape_kind_reason(w, mla=True)  # no fp8: run() takes no KV scale
        if kind:
            return kind
        assert w.kv_lora_rank is not None  # shape_kind_reason: an MLA workload
        if w.dtype not in ("bfloat16", "float16"):
            return f"dtype {w.dtype} not supported (fp16, bf16)"
        dims = (w.kv_lora_rank, w.head_size - w.kv_lora_rank)
        if dims != HEAD_DIMS:
            return f"kv_lora_rank/qk_rope_head_dim {dims[0]}/{dims[1]}: FlashInfer's MLA kernels are built for 512/64"
        if kernel_block_size_for(block_size, KERNEL_BLOCK_SIZES) is None:
            return f"block size {block_size} is not a multiple of FLASHINFER_MLA's kernel block sizes {list(KERNEL_BLOCK_SIZES)}"
        reason = cuda_device_reason(device)
        if reason:
            return reason
        cc = compute_capability(device)
        if cc is not None and cc < (8, 0):
            return f"compute capability {cc[0]}.{cc[1]}: FlashInfer's MLA kernels need 8.0+"
        return None

    def prepare(self, batch: Batch) -> PreparedKernel:
        import flashinfer
        import torch

        from attnsel.attention.kernels.flashinfer_adapter import paged_kv_metadata
        from attnsel.attention.kernels.mla import split_into_kernel_blocks

        cache_block_size = batch.block_size
        b = split_into_kernel_blocks(latent(batch), kernel_block_size_for(cache_block_size, KERNEL_BLOCK_SIZES)
                                     or cache_block_size)
        started = time.perf_counter()
        dev = b.query.device
        seq_lens, _ = b.host_lists()
        indptr, indices, _last = paged_kv_metadata(seq_lens, b.block_table.tolist(), b.block_size)
        as_i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=dev)  # noqa: E731
        wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(
            torch.empty(WORKSPACE_BYTES, dtype=torch.int8, device=dev), backend="auto")
        lora = b.kv_lora_rank
        wrapper.plan(b.cu_query_lens, as_i32(indptr), as_i32(indices), b.seq_lens, b.num_q_heads, lora,
                     b.qk_rope_head_dim, b.block_size, True, b.scale, b.query.dtype, b.latent_cache.dtype)
        q_nope, q_pe = b.query[..., :lora].contiguous(), b.query[..., lora:].contiguous()
        ckv, kpe = b.latent_cache[..., :lora], b.latent_cache[..., lora:]
        out = torch.empty_like(q_nope)

        def run() -> torch.Tensor:
            return wrapper.run(q_nope, q_pe, ckv, kpe, out=out)

        run()
        torch.cuda.synchronize(dev)
        setup = time.perf_counter() - started
        out.fill_(float("nan"))
        backend = getattr(wrapper, "_backend", "auto")
        notes = ["stand-in: vLLM's FLASHINFER_MLA runs FlashInfer's TRT-LLM MLA decode kernel (CC 10.x)"]
        if cache_block_size != b.block_size:
            notes.append(f"cache block {cache_block_size} split into kernel blocks of {b.block_size}, as vLLM does")
        version = getattr(flashinfer, "__version__", None) or installed_version("flashinfer-python")
        return PreparedKernel(
            run=run, output=lambda: out, provider=f"flashinfer {version} (BatchMLAPagedAttentionWrapper, {backend})",
            kernel_block_size=b.block_size, setup_seconds=setup, notes=tuple(notes),
            poison_output=lambda: out.fill_(float("nan")), writes_into_given_output=True,
            details={"mla_backend": backend},
        )
