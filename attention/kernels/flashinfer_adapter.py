"""FLASHINFER through flashinfer-python's paged wrappers, called the way vLLM's backend calls them.

What vLLM does (vllm/v1/attention/backends/flashinfer.py, seed era v0.16/0.17, Feb 2026):
- KV cache per layer: (num_blocks, 2, block_size, num_kv_heads, head_size), physical layout NHD,
  or HND (stride order (0, 1, 3, 2, 4)) when required: CC 10.x (vllm-rules §3a).
- Decodes first, prefills after (split_decodes_and_prefills). Decodes go through
  BatchDecodeWithPagedKVCacheWrapper, prefill chunks through BatchPrefillWithPagedKVCacheWrapper
  (causal=True), each planned once per step with paged_kv_indptr / paged_kv_indices /
  paged_kv_last_page_len (last_page_len = seq_len % page, 0 -> page).
- `_get_decode_wrapper` builds the decode wrapper with `use_tensor_cores=True`, commented "Tensor
  cores are enabled by default because the perf would be at least as good as cuda cores for all
  attention ops in latest gpus." (The old V0 backend, seed 004, used tensor cores only when
  VLLM_FLASHINFER_FORCE_TENSOR_CORES or num_qo_heads // num_kv_heads > 4: for 32/8 heads that
  was the CUDA-core path.) So the tensor-core adapter is what vLLM runs; the CUDA-core adapter
  is kept as a second provider for comparison (gpu-facts: 2.80 vs 4.15 TB/s on H200).
- Workspace: 256 MiB of zeros (FLASHINFER_WORKSPACE_BUFFER_SIZE).
"""

from __future__ import annotations

import time

from .base import PreparedKernel, kernel_block_size_for, compute_capability, cuda_device_reason, installed_version, module_importable

WORKSPACE_BYTES = 256 * 1024 * 1024
# vLLM's FlashInferBackend (vllm-rules §3a).
SUPPORTED_BLOCK_SIZES = (16, 32, 64)
SUPPORTED_HEAD_SIZES = (64, 128, 256)


def vllm_kv_layout(capability: tuple[int, int] | None) -> str:
    """FlashInfer requires HND on CC 10.x; elsewhere vLLM's default layout is NHD (§3a)."""
    return "HND" if capability is not None and capability[0] == 10 else "NHD"


def paged_kv_metadata(seq_lens: list[int], block_table_rows: list[list[int]], page: int):
    """(indptr, indices, last_page_len) as Python lists, the CSR form FlashInfer plans with."""
    indptr, indices, last = [0], [], []
    for seq_len, row in zip(seq_lens, block_table_rows):
        n = -(-seq_len // page)
        indices.extend(row[:n])
        indptr.append(indptr[-1] + n)
        rem = seq_len % page
        last.append(rem if rem else page)
    return indptr, indices, last


class FlashInferAdapter:
    backend = "FLASHINFER"

    def __init__(self, use_tensor_cores: bool = True, kv_layout: str | None = None):
        self.use_tensor_cores = use_tensor_cores
        self.kv_layout = kv_layout  # None: vLLM's choice for this GPU
        self.name = "flashinfer" if use_tensor_cores else "flashinfer-cuda-cores"

    def availability(self) -> str | None:
        if installed_version("flashinfer-python", "flashinfer") is None:
            return "flashinfer-python is not installed"
        reason = cuda_device_reason("cuda")
        if reason:
            return reason
        return module_importable("flashinfer")

    def unsupported_reason(self, w, block_size: int, device: str) -> str | None:
        if w.dtype not in ("bfloat16", "float16"):
            return f"dtype {w.dtype} not supported by vLLM's FLASHINFER backend (fp16, bf16)"
        if kernel_block_size_for(block_size, SUPPORTED_BLOCK_SIZES) is None:
            return (
                f"block size {block_size} is neither one of vLLM FLASHINFER's kernel block sizes "
                f"{list(SUPPORTED_BLOCK_SIZES)} nor a multiple of one"
            )
        if w.head_size not in SUPPORTED_HEAD_SIZES:
            return f"head size {w.head_size} not in {list(SUPPORTED_HEAD_SIZES)}"
        reason = cuda_device_reason(device)
        if reason:
            return reason
        cc = compute_capability(device)
        if cc is not None and not ((7, 5) <= cc <= (12, 1)):
            return f"compute capability {cc[0]}.{cc[1]} outside vLLM FLASHINFER's 7.5..12.1"
        return None

    def prepare(self, b) -> PreparedKernel:
        import flashinfer
        import torch

        from .paged import split_into_kernel_blocks

        cache_block_size = b.block_size
        b = split_into_kernel_blocks(b, kernel_block_size_for(b.block_size, SUPPORTED_BLOCK_SIZES) or b.block_size)
        t0 = time.perf_counter()
        dev = b.query.device
        layout = self.kv_layout or vllm_kv_layout(compute_capability(str(dev)))
        kv_cache = torch.stack((b.key_cache, b.value_cache), dim=1)  # (nb, 2, page, kvh, d)
        if layout == "HND":
            kv_cache = kv_cache.transpose(2, 3).contiguous()  # (nb, 2, kvh, page, d)
        seq_lens, q_lens = b.host_lists()
        indptr, indices, last = paged_kv_metadata(seq_lens, b.block_table.tolist(), b.block_size)
        indptr_cpu = torch.tensor(indptr, dtype=torch.int32)
        last_cpu = torch.tensor(last, dtype=torch.int32)
        indices_gpu = torch.tensor(indices, dtype=torch.int32, device=dev)
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        out = torch.empty_like(b.query)
        nd = b.num_decodes
        dtype = b.query.dtype
        heads_and_page = (b.num_q_heads, b.num_kv_heads, b.head_size, b.block_size)
        calls = []
        paths = []
        if nd:
            decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                workspace, layout, use_tensor_cores=self.use_tensor_cores
            )
            decode.plan(
                indptr_cpu[: nd + 1], indices_gpu, last_cpu[:nd], *heads_and_page,
                pos_encoding_mode="NONE", sm_scale=b.scale, q_data_type=dtype, kv_data_type=dtype,
            )
            q_dec, out_dec = b.query[:nd], out[:nd]
            calls.append(lambda: decode.run(q_dec, kv_cache, out=out_dec))
            paths.append("decode, tensor cores" if self.use_tensor_cores else "decode, CUDA cores")
        if nd < b.batch:
            prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, layout)
            tok0 = int(b.cu_query_lens[nd])
            qo_indptr = (b.cu_query_lens[nd:].cpu() - tok0).to(torch.int32)
            prefill.plan(
                # vLLM passes the prefill slice of paged_kv_indptr un-rebased with all indices.
                qo_indptr, indptr_cpu[nd:], indices_gpu, last_cpu[nd:], *heads_and_page,
                causal=True, sm_scale=b.scale, q_data_type=dtype, kv_data_type=dtype,
            )
            q_pre, out_pre = b.query[tok0:], out[tok0:]
            calls.append(lambda: prefill.run(q_pre, kv_cache, out=out_pre))
            paths.append("prefill")

        def run():
            for call in calls:
                call()
            return out

        run()
        torch.cuda.synchronize(dev)
        setup = time.perf_counter() - t0
        out.fill_(float("nan"))
        version = getattr(flashinfer, "__version__", None) or installed_version("flashinfer-python")
        return PreparedKernel(
            run=run,
            output=lambda: out,
            provider=f"flashinfer {version} ({'; '.join(paths)}; {layout})",
            kernel_block_size=b.block_size,
            setup_seconds=setup,
            notes=(
                ("vLLM's decode path (use_tensor_cores=True)",)
                if self.use_tensor_cores
                else ("CUDA-core decode: not what vLLM >= 0.11 runs; for comparison",)
            )
            + (
                (f"cache block {cache_block_size} split into kernel blocks of {b.block_size}, as vLLM does",)
                if cache_block_size != b.block_size
                else ()
            ),
            poison_output=lambda: out.fill_(float("nan")),
            writes_into_given_output=True,
            details={"kv_layout": layout, "use_tensor_cores": self.use_tensor_cores},
        )
