"""FlashInfer's JIT modules built ahead of plan(): which modules vLLM's FlashInfer path will ask for,
and building them into FlashInfer's own JIT cache without a CUDA context (tune's pre-build before
"go", docs/tune-performance.md change 7 and 11; verify's pre-build beside the first engine,
docs/verify.md "Speed"). FlashInferAdapter.prebuild (flashinfer_adapter.py) is the adapter's hook.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from attnsel.attention.kernels.base import WorkloadKind
from attnsel.probe import usable_cpu_count

if TYPE_CHECKING:  # pragma: no cover
    from flashinfer.jit.core import JitSpec

    from attnsel.attention.kernels.base import PrebuildSummary

# vLLM's FlashInferBackend head sizes (docs/vllm-rules.md §3a): other rows are refused, nothing is planned
SUPPORTED_HEAD_SIZES = (64, 128, 256)

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

    def generator_args(self, torch: ModuleType) -> tuple[object, ...]:
        dt = getattr(torch, self.dtype)
        kv = getattr(torch, self.kv_dtype or self.dtype)
        common = (dt, kv, dt, torch.int32, self.head_size, self.head_size, POS_ENCODING_NONE, False, False)
        if self.generator == "decode":
            return common
        return (self.backend, *common, False)  # + use_fp16_qk_reduction


def _version_tuple(text: str | None) -> tuple[int, ...]:
    parts: list[int] = []
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


def jit_module_requests(kinds: Iterable[str], dtype: str, head_size: int, capability: tuple[int, int] | None,
                        torch_cuda: str | None, use_tensor_cores: bool = True,
                        kv_cache_dtype: str = "auto") -> list[JitModuleRequest]:
    """The JIT modules plan() will ask for, for workloads of these kinds (decode / prefill / mixed:
    mixed = decodes + a prefill chunk, like vLLM's split_decodes_and_prefills). An fp8 cache with
    a 16-bit query: tensor-core decode and prefill both plan "fa2" (one module)."""
    from attnsel.attention.kernels.kv_quant import fp8_format, is_fp8

    if dtype not in ("bfloat16", "float16") or head_size not in SUPPORTED_HEAD_SIZES:
        return []  # unsupported_reason() refuses these rows: nothing will be planned
    kv = fp8_format(kv_cache_dtype) if is_fp8(kv_cache_dtype) else None
    wanted = set(kinds)
    requests: list[JitModuleRequest] = []
    if wanted & {WorkloadKind.DECODE, WorkloadKind.MIXED}:
        if use_tensor_cores:
            requests.append(JitModuleRequest("decode (tensor cores)", "prefill_primary", "fa2", dtype, head_size, kv))
        else:
            requests.append(JitModuleRequest("decode (CUDA cores)", "decode", None, dtype, head_size, kv))
    if wanted & {WorkloadKind.PREFILL, WorkloadKind.MIXED}:
        backend = prefill_backend(capability, torch_cuda, dtype, head_size, kv_fp8=kv is not None)
        generator = "prefill_primary" if backend == "fa2" else "prefill"
        # fa2 prefill is the very module tensor-core decode uses: build it once
        if not any((r.generator, r.backend) == (generator, backend) for r in requests):
            requests.append(JitModuleRequest("prefill", generator, backend, dtype, head_size, kv))
    return requests


def named_jit_requests(generators: Iterable[str]) -> list[JitModuleRequest]:
    """Requests for modules named by their generator, "module:function" with no arguments, e.g.
    "flashinfer.jit.sampling:gen_sampling_module" (what a vLLM release's sampler loads: release
    data, attention/versions RuleProfile.sampler_jit_modules)."""
    return [JitModuleRequest(name.rpartition(":")[2], name, None, "", 0) for name in generators]


def _jit_spec(modules: ModuleType, request: JitModuleRequest, torch: ModuleType) -> JitSpec:
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
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PREBUILD_NICE)


def build_error_text(exc: BaseException, limit: int = 300) -> str:
    """One line: the exception's first line and, for a failed ninja, the compiler's last words
    (e.g. "Ninja build failed. ... /usr/bin/ld: cannot find -lcudart")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    tail = [line for line in lines[1:] if not line.startswith("ninja: build stopped")][-2:]
    text = head + (" ... " + " | ".join(tail) if tail else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_kwargs(build: Callable[..., object]) -> dict[str, bool]:
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
    kwargs: dict[str, bool] = {}
    if "verbose" in params:
        kwargs["verbose"] = False
    if "need_lock" in params:
        kwargs["need_lock"] = True
    return kwargs


def _build_one(spec: JitSpec, outcome: dict[str, object]) -> None:
    _lower_thread_priority()
    try:
        spec.build(**build_kwargs(spec.build))
        outcome["built"] = True
    except Exception as exc:  # noqa: BLE001 -- plan() builds it again and reports a real failure
        outcome["error"] = build_error_text(exc)


def build_jit_modules(requests: list[JitModuleRequest]) -> PrebuildSummary:
    """Compiles the requested modules into flashinfer's JIT cache (~/.cache/flashinfer), one
    ninja per module in parallel, each with all the CPUs this process may use (MAX_JOBS, unless the
    user set it). Compile only: no CUDA context, no kernel launch, nothing loaded."""
    import torch
    from flashinfer.jit.attention import modules

    started = time.perf_counter()
    names: list[str] = []
    cached: list[str] = []
    pending: list[JitSpec] = []
    outcomes: list[dict[str, object]] = []
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
