"""FLASHINFER through flashinfer-python's paged wrappers, called the way vLLM's backend calls them.

What vLLM does (vllm/v1/attention/backends/flashinfer.py, seed era v0.16/0.17, Feb 2026):
- KV cache per layer: (num_blocks, 2, block_size, num_kv_heads, head_size), physical layout NHD,
  or HND (stride order (0, 1, 3, 2, 4)) when required: CC 10.x (docs/vllm-rules.md §3a).
- Decodes first, prefills after (split_decodes_and_prefills). Decodes go through
  BatchDecodeWithPagedKVCacheWrapper, prefill chunks through BatchPrefillWithPagedKVCacheWrapper
  (causal=True), each planned once per step with paged_kv_indptr / paged_kv_indices /
  paged_kv_last_page_len (last_page_len = seq_len % page, 0 -> page).
- `_get_decode_wrapper` builds the decode wrapper with `use_tensor_cores=True`, commented "Tensor
  cores are enabled by default because the perf would be at least as good as cuda cores for all
  attention ops in latest gpus." (The old V0 backend, seed 004, used tensor cores only when
  VLLM_FLASHINFER_FORCE_TENSOR_CORES or num_qo_heads // num_kv_heads > 4: for 32/8 heads that
  was the CUDA-core path.) So the tensor-core adapter is what vLLM runs; the CUDA-core adapter
  is kept as a second provider for comparison (docs/gpu-facts.md §1: 2.80 vs 4.15 TB/s on H200).
- Workspace: 256 MiB of zeros (FLASHINFER_WORKSPACE_BUFFER_SIZE).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from attnsel.attention.kernels.base import (
    PreparedKernel,
    compute_capability,
    cuda_device_reason,
    installed_version,
    module_importable,
    paged,
    shape_kind_reason,
)
from attnsel.attention.kernels.flashinfer_jit import (  # noqa: F401 -- the adapter's door to its JIT pre-build
    SUPPORTED_HEAD_SIZES,
    JitModuleRequest,
    build_jit_modules,
    jit_module_requests,
    named_jit_requests,
    prefill_backend,
)
from attnsel.attention.rules import kernel_block_size_for

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnsel.attention.kernels.base import Batch, HasKind, PrebuildSummary
    from attnsel.attention.kernels.paged import PagedBatch, Workload

WORKSPACE_BYTES = 256 * 1024 * 1024
# vLLM's FlashInferBackend (docs/vllm-rules.md §3a).
SUPPORTED_BLOCK_SIZES = (16, 32, 64)


def vllm_kv_layout(capability: tuple[int, int] | None) -> str:
    """FlashInfer requires HND on CC 10.x; elsewhere vLLM's default layout is NHD (§3a)."""
    return "HND" if capability is not None and capability[0] == 10 else "NHD"


def paged_kv_metadata(seq_lens: list[int], block_table_rows: list[list[int]],
                      page: int) -> tuple[list[int], list[int], list[int]]:
    """(indptr, indices, last_page_len) as Python lists, the CSR form FlashInfer plans with."""
    indptr: list[int] = [0]
    indices: list[int] = []
    last: list[int] = []
    for seq_len, row in zip(seq_lens, block_table_rows):
        n = -(-seq_len // page)
        indices.extend(row[:n])
        indptr.append(indptr[-1] + n)
        rem = seq_len % page
        last.append(rem if rem else page)
    return indptr, indices, last




class FlashInferAdapter:
    backend = "FLASHINFER"

    def __init__(self, use_tensor_cores: bool = True, kv_layout: str | None = None) -> None:
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

    def prebuild(self, workloads: Sequence[HasKind | str], *, dtype: str, head_size: int,
                 capability: tuple[int, int] | list[int] | None = None, kv_cache_dtype: str = "auto",
                 **_shape: int | None) -> PrebuildSummary:
        """Builds the JIT modules these workloads will plan (see jit_module_requests) into
        flashinfer's cache, before the worker may touch CUDA. Raises if flashinfer's JIT API is
        not what we expect; the worker records it and plan() compiles as usual."""
        import torch

        cap = (int(capability[0]), int(capability[1])) if capability else None
        kinds = [w if isinstance(w, str) else w.kind for w in workloads]
        requests = jit_module_requests(kinds, dtype, int(head_size), cap, torch.version.cuda, self.use_tensor_cores,
                                       kv_cache_dtype=kv_cache_dtype)
        summary = build_jit_modules(requests)
        summary["requests"] = [r.purpose + (f" ({r.backend})" if r.backend else "") for r in requests]
        return summary

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        if w.dtype not in ("bfloat16", "float16"):
            return f"dtype {w.dtype} not supported by vLLM's FLASHINFER backend (fp16, bf16)"
        kind = shape_kind_reason(w, fp8=True)  # fp8 KV: kv_data_type fp8 + k_scale/v_scale (docs/vllm-rules.md §3a)
        if kind:
            return kind
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

    def prepare(self, batch: Batch) -> PreparedKernel:
        import flashinfer
        import torch

        from attnsel.attention.kernels.paged import split_into_kernel_blocks

        cache_block_size = batch.block_size
        kernel_block_size = kernel_block_size_for(cache_block_size, SUPPORTED_BLOCK_SIZES) or cache_block_size
        b = split_into_kernel_blocks(paged(batch), kernel_block_size)
        t0 = time.perf_counter()
        dev = b.query.device
        layout = self.kv_layout or vllm_kv_layout(compute_capability(str(dev)))
        inputs = _paged_inputs(b, layout)
        out = torch.empty_like(b.query)
        # fp8 cache: FlashInfer folds k_scale into sm_scale and v_scale into the output (vLLM's
        # FlashInferImpl passes layer._k_scale_float / _v_scale_float the same way)
        scales = {"k_scale": b.k_scale, "v_scale": b.v_scale} if b.key_cache.dtype != b.query.dtype else {}
        calls: list[Callable[[], object]] = []
        paths: list[str] = []
        if b.num_decodes:
            calls.append(_planned_decode(flashinfer, b, inputs, out, scales, self.use_tensor_cores))
            paths.append("decode, tensor cores" if self.use_tensor_cores else "decode, CUDA cores")
        if b.num_decodes < b.batch:
            calls.append(_planned_prefill(flashinfer, b, inputs, out, scales))
            paths.append("prefill")

        def run() -> torch.Tensor:
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
            provider=f"flashinfer {version} ({'; '.join(paths)}; {layout}{'; kv ' + b.kv_cache_dtype if scales else ''})",
            kernel_block_size=b.block_size,
            setup_seconds=setup,
            notes=self._notes(cache_block_size, b.block_size),
            poison_output=lambda: out.fill_(float("nan")),
            writes_into_given_output=True,
            details={"kv_layout": layout, "use_tensor_cores": self.use_tensor_cores, **scales},
        )

    def _notes(self, cache_block_size: int, kernel_block_size: int) -> tuple[str, ...]:
        path = ("vLLM's decode path (use_tensor_cores=True)" if self.use_tensor_cores
                else "CUDA-core decode: not what vLLM >= 0.11 runs; for comparison")
        split = f"cache block {cache_block_size} split into kernel blocks of {kernel_block_size}, as vLLM does"
        return (path,) if cache_block_size == kernel_block_size else (path, split)


@dataclass(frozen=True)
class _PagedInputs:
    """Both wrappers' inputs: the stacked cache in `layout`, FlashInfer's CSR page metadata, the workspace."""

    layout: str
    kv_cache: torch.Tensor
    indptr_cpu: torch.Tensor
    indices_gpu: torch.Tensor
    last_cpu: torch.Tensor
    workspace: torch.Tensor


def _paged_inputs(b: PagedBatch, layout: str) -> _PagedInputs:
    import torch

    kv_cache = torch.stack((b.key_cache, b.value_cache), dim=1)  # (nb, 2, page, kvh, d)
    if layout == "HND":
        kv_cache = kv_cache.transpose(2, 3).contiguous()  # (nb, 2, kvh, page, d)
    indptr, indices, last = paged_kv_metadata(b.host_lists()[0], b.block_table.tolist(), b.block_size)
    indptr_cpu = torch.tensor(indptr, dtype=torch.int32)
    last_cpu = torch.tensor(last, dtype=torch.int32)
    indices_gpu = torch.tensor(indices, dtype=torch.int32, device=b.query.device)
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=b.query.device)
    return _PagedInputs(layout, kv_cache, indptr_cpu, indices_gpu, last_cpu, workspace)


def _planned_decode(flashinfer: ModuleType, b: PagedBatch, paged: _PagedInputs, out: torch.Tensor,
                    scales: dict[str, float], tensor_cores: bool) -> Callable[[], object]:
    """The decode rows (the first num_decodes) through a planned BatchDecodeWithPagedKVCacheWrapper."""
    nd = b.num_decodes
    decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(paged.workspace, paged.layout, use_tensor_cores=tensor_cores)
    decode.plan(
        paged.indptr_cpu[: nd + 1], paged.indices_gpu, paged.last_cpu[:nd],
        b.num_q_heads, b.num_kv_heads, b.head_size, b.block_size,
        pos_encoding_mode="NONE", sm_scale=b.scale, q_data_type=b.query.dtype, kv_data_type=b.key_cache.dtype,
    )
    q_dec, out_dec = b.query[:nd], out[:nd]
    return lambda: decode.run(q_dec, paged.kv_cache, out=out_dec, **scales)


def _planned_prefill(flashinfer: ModuleType, b: PagedBatch, paged: _PagedInputs, out: torch.Tensor,
                     scales: dict[str, float]) -> Callable[[], object]:
    """The prefill rows (after the decodes) through a planned, causal BatchPrefillWithPagedKVCacheWrapper."""
    import torch

    nd = b.num_decodes
    prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(paged.workspace, paged.layout)
    tok0 = int(b.cu_query_lens[nd])
    qo_indptr = (b.cu_query_lens[nd:].cpu() - tok0).to(torch.int32)
    prefill.plan(
        # vLLM passes the prefill slice of paged_kv_indptr un-rebased with all indices.
        qo_indptr, paged.indptr_cpu[nd:], paged.indices_gpu, paged.last_cpu[nd:],
        b.num_q_heads, b.num_kv_heads, b.head_size, b.block_size,
        causal=True, sm_scale=b.scale, q_data_type=b.query.dtype, kv_data_type=b.key_cache.dtype,
    )
    q_pre, out_pre = b.query[tok0:], out[tok0:]
    return lambda: prefill.run(q_pre, paged.kv_cache, out=out_pre, **scales)
