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

import os
import threading
import time
from dataclasses import dataclass

from attnsel.attention.kernels.base import (PreparedKernel, compute_capability, cuda_device_reason, installed_version,
                   module_importable, shape_kind_reason)
from attnsel.attention.rules import kernel_block_size_for
from attnsel.probe import usable_cpu_count

WORKSPACE_BYTES = 256 * 1024 * 1024
# vLLM's FlashInferBackend (docs/vllm-rules.md §3a).
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


# --- JIT modules a sweep will need, built before "go" (docs/tune-performance.md, "FlashInfer JIT")
#
# FlashInfer 0.7.2.post1 (flashinfer/decode.py, prefill.py, jit/attention/modules.py) compiles one
# module per (backend, dtypes, index dtype, head dims, pos-encoding, sliding window, soft-cap,
# fp16 qk reduction); page size, head counts and the KV layout (NHD/HND) are runtime arguments.
#  * BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True).plan(): backend "auto" becomes
#    "fa2" unless q or kv is fp8 -> get_batch_prefill_module("fa2", ...), which for "fa2" builds
#    the equal-stride primary module (_gen_batch_prefill_primary_module); its independent-stride
#    twin is built lazily only when K and V strides differ (ours never do: one stacked cache).
#    (cuDNN takes "auto" decode only on CC 10.0/10.3 for multi-token rows.)
#  * use_tensor_cores=False: get_batch_decode_module(...) -> gen_batch_decode_module(...).
#  * BatchPrefillWithPagedKVCacheWrapper.plan(): backend "auto" -> determine_attention_backend:
#    "fa3" on CC 9.x with torch CUDA >= 12.3, no RoPE / custom mask / fp16 qk reduction, head
#    dims 64/128/256; else "fa2". "fa3" builds gen_batch_prefill_module("fa3", ...).
# Arguments after the backend: q, kv, o dtypes (o = q), index dtype (int32: our indptr), head_dim
# qk, head_dim vo, pos-encoding (NONE = 0), sliding window (window_left -1: False), logits
# soft-cap (0: False), fp16 qk reduction (False; the decode path always passes False).
POS_ENCODING_NONE = 0
FA3_HEAD_SIZES = (64, 128, 256)
PREBUILD_NICE = 10  # compile below the running backend's own JIT (Triton, FA4) on a shared CPU


@dataclass(frozen=True)
class JitModuleRequest:
    """One FlashInfer JIT module, named by the generator flashinfer's plan() would call."""

    purpose: str  # "decode (tensor cores)", "decode (CUDA cores)", "prefill"
    generator: str  # "prefill_primary" | "prefill" | "decode"
    backend: str | None  # "fa2" | "fa3"; None for the CUDA-core decode module
    dtype: str
    head_size: int
    kv_dtype: str | None = None  # the cache's torch dtype name when it differs from the query's (fp8)

    def generator_args(self, torch) -> tuple:
        dt = getattr(torch, self.dtype)
        kv = getattr(torch, self.kv_dtype or self.dtype)
        common = (dt, kv, dt, torch.int32, self.head_size, self.head_size, POS_ENCODING_NONE, False, False)
        if self.generator == "decode":
            return common
        return (self.backend,) + common + (False,)  # + use_fp16_qk_reduction


def _version_tuple(text: str | None) -> tuple[int, ...]:
    parts = []
    for piece in str(text or "").split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def prefill_backend(capability: tuple[int, int] | None, torch_cuda: str | None, dtype: str, head_size: int,
                    kv_fp8: bool = False) -> str:
    """What flashinfer's determine_attention_backend answers for vLLM's prefill plan (no RoPE,
    no custom mask, no fp16 qk reduction; a 16-bit query; FA3 takes an fp8 cache only with an fp8
    query: is_fa3_backend_supported)."""
    if kv_fp8 or capability is None or capability[0] != 9 or _version_tuple(torch_cuda) < (12, 3):
        return "fa2"
    return "fa3" if head_size in FA3_HEAD_SIZES else "fa2"


def jit_module_requests(kinds, dtype: str, head_size: int, capability: tuple[int, int] | None,
                        torch_cuda: str | None, use_tensor_cores: bool = True,
                        kv_cache_dtype: str = "auto") -> list[JitModuleRequest]:
    """The JIT modules plan() will ask for, for workloads of these kinds (decode / prefill / mixed:
    mixed = decodes + a prefill chunk, like vLLM's split_decodes_and_prefills). An fp8 cache with
    a 16-bit query: tensor-core decode and prefill both plan "fa2" (one module)."""
    from attnsel.attention.kernels.kv_quant import fp8_format, is_fp8

    if dtype not in ("bfloat16", "float16") or head_size not in SUPPORTED_HEAD_SIZES:
        return []  # unsupported_reason() refuses these rows: nothing will be planned
    kv = fp8_format(kv_cache_dtype) if is_fp8(kv_cache_dtype) else None
    kinds = set(kinds)
    requests = []
    if kinds & {"decode", "mixed"}:
        if use_tensor_cores:
            requests.append(JitModuleRequest("decode (tensor cores)", "prefill_primary", "fa2", dtype, head_size, kv))
        else:
            requests.append(JitModuleRequest("decode (CUDA cores)", "decode", None, dtype, head_size, kv))
    if kinds & {"prefill", "mixed"}:
        backend = prefill_backend(capability, torch_cuda, dtype, head_size, kv_fp8=kv is not None)
        generator = "prefill_primary" if backend == "fa2" else "prefill"
        # fa2 prefill is the very module tensor-core decode uses: build it once
        if not any((r.generator, r.backend) == (generator, backend) for r in requests):
            requests.append(JitModuleRequest("prefill", generator, backend, dtype, head_size, kv))
    return requests


def named_jit_requests(generators) -> list[JitModuleRequest]:
    """Requests for modules named by their generator, "module:function" with no arguments, e.g.
    "flashinfer.jit.sampling:gen_sampling_module" (what a vLLM release's sampler loads: release
    data, attention/versions RuleProfile.sampler_jit_modules)."""
    return [JitModuleRequest(name.rpartition(":")[2], name, None, "", 0) for name in generators]


def _jit_spec(modules, request: JitModuleRequest, torch):
    """flashinfer's JitSpec for a request, through the same generator its plan() calls."""
    if ":" in request.generator:  # named_jit_requests
        import importlib

        module, _, function = request.generator.rpartition(":")
        return getattr(importlib.import_module(module), function)()
    if request.generator == "decode":
        return modules.gen_batch_decode_module(*request.generator_args(torch))
    if request.generator == "prefill_primary":
        # 0.7.x: "fa2" gets the equal-stride primary module; older releases have no primary and
        # build gen_batch_prefill_module for every backend
        primary = getattr(modules, "_gen_batch_prefill_primary_module", None)
        if primary is not None:
            return primary(*request.generator_args(torch))
    return modules.gen_batch_prefill_module(*request.generator_args(torch))


def _lower_thread_priority() -> None:
    """Linux: nice only this thread (and the ninja / nvcc it starts), not the whole worker."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PREBUILD_NICE)
    except (AttributeError, OSError):
        pass


def build_error_text(exc: BaseException, limit: int = 300) -> str:
    """One line: the exception's first line and, for a failed ninja, the compiler's last words
    (e.g. "Ninja build failed. ... /usr/bin/ld: cannot find -lcudart")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    tail = [line for line in lines[1:] if not line.startswith("ninja: build stopped")][-2:]
    text = head + (" ... " + " | ".join(tail) if tail else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_kwargs(build) -> dict:
    """Keywords for JitSpec.build in the installed flashinfer. need_lock: hold the module's file
    lock while ninja runs, so a plan() that arrives before we are done waits for this build instead
    of starting a second ninja on it. flashinfer 0.6.x (vLLM 0.24's pin) also REQUIRES `verbose`:
    calling build(need_lock=True) there raised TypeError, so on an H100 with vLLM installed no
    module was pre-built and FlashInfer's JIT cost 97-136 s inside its own turn."""
    import inspect

    try:
        params = inspect.signature(build).parameters
    except (TypeError, ValueError):
        return {}
    kwargs = {}
    if "verbose" in params:
        kwargs["verbose"] = False
    if "need_lock" in params:
        kwargs["need_lock"] = True
    return kwargs


def _build_one(spec, outcome: dict) -> None:
    _lower_thread_priority()
    try:
        spec.build(**build_kwargs(spec.build))
        outcome["built"] = True
    except Exception as exc:  # noqa: BLE001 -- plan() builds it again and reports a real failure
        outcome["error"] = build_error_text(exc)


def build_jit_modules(requests: list[JitModuleRequest]) -> dict:
    """Compiles the requested modules into flashinfer's JIT cache (~/.cache/flashinfer), one
    ninja per module in parallel, each with all the CPUs this process may use (MAX_JOBS, unless the
    user set it). Compile only: no CUDA context, no kernel launch, nothing loaded."""
    import torch
    from flashinfer.jit.attention import modules

    started = time.perf_counter()
    names, cached, pending, outcomes = [], [], [], []
    for request in requests:
        spec = _jit_spec(modules, request, torch)
        names.append(spec.name)
        if getattr(spec, "is_compiled", False):
            cached.append(spec.name)
        else:
            pending.append(spec)
            outcomes.append({"label": request.purpose + (f" ({request.backend})" if request.backend else "")})
    if pending:
        set_jobs = "MAX_JOBS" not in os.environ
        if set_jobs:
            # every ninja may use every core: the modules differ in size (one finishes while the other
            # still compiles), and the build runs at nice 10, so the jobs past the cores take idle time
            # rather than the timed backend's. Measured in a 16-core lane of an H200 host: with
            # cores / modules jobs (8 each) the two modules took 129 s beside the sweep; with the host's
            # 32 / 2 = 16 each (the older code, which read os.cpu_count()), 85 s
            os.environ["MAX_JOBS"] = str(max(1, usable_cpu_count()))
        try:
            threads = [threading.Thread(target=_build_one, args=(spec, out), daemon=True)
                       for spec, out in zip(pending, outcomes)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            if set_jobs:
                os.environ.pop("MAX_JOBS", None)
    errors = [f"{o['label']}: {o['error']}" for o in outcomes if o.get("error")]
    return {
        "modules": names,
        "built": sum(1 for o in outcomes if o.get("built")),
        "cached": len(cached),
        "seconds": time.perf_counter() - started,
        "error": "; ".join(errors) or None,
    }


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

    def prebuild(self, workloads, *, dtype: str, head_size: int, capability=None, kv_cache_dtype: str = "auto",
                 **_shape) -> dict:
        """Builds the JIT modules these workloads will plan (see jit_module_requests) into
        flashinfer's cache, before the worker may touch CUDA. Raises if flashinfer's JIT API is
        not what we expect; the worker records it and plan() compiles as usual."""
        import torch

        cap = tuple(capability) if capability else None
        kinds = [getattr(w, "kind", w) for w in workloads]
        requests = jit_module_requests(kinds, dtype, int(head_size), cap, torch.version.cuda, self.use_tensor_cores,
                                       kv_cache_dtype=kv_cache_dtype)
        summary = build_jit_modules(requests)
        summary["requests"] = [r.purpose + (f" ({r.backend})" if r.backend else "") for r in requests]
        return summary

    def unsupported_reason(self, w, block_size: int, device: str) -> str | None:
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

    def prepare(self, b) -> PreparedKernel:
        import flashinfer
        import torch

        from attnsel.attention.kernels.paged import split_into_kernel_blocks

        cache_block_size = b.block_size
        b = split_into_kernel_blocks(b, kernel_block_size_for(b.block_size, SUPPORTED_BLOCK_SIZES) or b.block_size)
        t0 = time.perf_counter()
        dev = b.query.device
        layout = self.kv_layout or vllm_kv_layout(compute_capability(str(dev)))
        paged = _paged_inputs(b, layout)
        out = torch.empty_like(b.query)
        # fp8 cache: FlashInfer folds k_scale into sm_scale and v_scale into the output (vLLM's
        # FlashInferImpl passes layer._k_scale_float / _v_scale_float the same way)
        scales = {"k_scale": b.k_scale, "v_scale": b.v_scale} if b.key_cache.dtype != b.query.dtype else {}
        calls, paths = [], []
        if b.num_decodes:
            calls.append(_planned_decode(flashinfer, b, paged, out, scales, self.use_tensor_cores))
            paths.append("decode, tensor cores" if self.use_tensor_cores else "decode, CUDA cores")
        if b.num_decodes < b.batch:
            calls.append(_planned_prefill(flashinfer, b, paged, out, scales))
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
    kv_cache: object
    indptr_cpu: object
    indices_gpu: object
    last_cpu: object
    workspace: object


def _paged_inputs(b, layout: str) -> _PagedInputs:
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


def _planned_decode(flashinfer, b, paged: _PagedInputs, out, scales: dict, tensor_cores: bool):
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


def _planned_prefill(flashinfer, b, paged: _PagedInputs, out, scales: dict):
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
