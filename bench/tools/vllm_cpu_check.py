"""Developer check: drive the INSTALLED vLLM's real backend classes through attnsel's adapter on a
machine without a GPU, before spending GPU time on them.

    PYTHONPATH=<folder holding an `attnsel` link to this repo> \\
        /path/to/venv-with-vllm/bin/python -m attnsel.bench.tools.vllm_cpu_check [--backend B ...]

or, with this checkout installed in vLLM's virtualenv (`pip install -e .`, docs/tune.md), that
virtualenv's `python -m attnsel.bench.tools.vllm_cpu_check`.

What is real: vLLM's VllmConfig, Attention / MLAAttention layer, AttentionImpl / MLA impl,
metadata builder, CUDA-graph resolution and dispatcher, KV-cache shape/stride order and storage
dtype, the layer's fp8 scales and query quantization (QuantFP8, run natively), and (TRITON_ATTN,
TRITON_MLA) vLLM's own Triton kernels run by the Triton interpreter on CPU tensors, compared with
attnsel's fp32 reference. Every backend is checked with a 16-bit and an fp8 KV cache where vLLM's
class accepts fp8 (otherwise the row says vLLM's reason).
What is not: the platform is a CUDA platform stand-in reporting an H100 (attention/explain/live.py, as the
parity harness does), or a B200 for the backends vLLM takes only there (STAND_IN: FLASHINFER_MLA);
extensions that need a driver are empty modules and `torch.ops._C` answers False to capability
probes; the CUDA-only kernel calls (FA3 and, for head size 512 on SM90, FA4; FlashInfer's wrappers
and its XQA decode; FlashMLA; FA3 MLA; FlashInfer's TRT-LLM MLA) are replaced by recorders
(cpu_recorders.py) that compute the reference from the arguments vLLM passes them (so a wrong
block table, length, scale or query layout in what we hand vLLM fails the check). FLASHINFER is
checked with FlashInfer's cubins at hand (XQA decode) and without (native decode, `flashinfer_cubin`
false in the rows); a row whose output is vLLM's own known fault says so (status "vLLM", not BAD). Each row
records the kernel block size vLLM split the cache into and, for FLASH_ATTN, the FA version.
Before a row is driven the release's own selector is asked about it, with the inputs tune's plan
builds (cpu_check_selector.py): a row vLLM refuses is recorded as refused with vLLM's reasons, as
tune never times it, and every row keeps what the selector answered (`selector_reasons`).
Exit 0 when every row checked matches the reference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from attnsel.attention.kernels import FP8_TOLERANCE, MLA_BACKENDS, SPARSE_MLA_BACKENDS
from attnsel.bench.tools import cpu_recorders, cpu_recorders_sparse
from attnsel.bench.tools.cpu_check_recording import (
    INDEX_TOPK,
    record_stacks,
    signatures_and_layout,
)
from attnsel.bench.tools.cpu_check_selector import selector_reasons

os.environ.setdefault("TRITON_INTERPRET", "1")
# vllm.triton_utils disables Triton unless exactly one Triton driver is active; an empty
# CUDA_VISIBLE_DEVICES is its "distributed start-up" exception, which lets the interpreter run.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

SHAPES = (  # (kind, batch, context, query_len): small enough for the Triton interpreter
    ("decode", 3, 200, 1),
    ("decode", 1, 700, 1),  # batch 1: vLLM's Triton builder takes its 3-D split path
    ("mixed", 4, 96, 40),
)
MLA_SHAPES = (("decode", 3, 200, 1), ("decode", 1, 700, 1))  # 16 heads (DeepSeek-V3 at TP 8), 512 + 64
# block sizes per MLA backend: its kernel block sizes (FLASHMLA [64], FLASHINFER_MLA [32, 64]), one
# split by vLLM into kernel blocks (128)
MLA_BLOCK_SIZES = {"FLASHMLA": (64, 128), "FLASHINFER_MLA": (32, 128), "FLASH_ATTN_MLA": (16, 64),
                   "TRITON_MLA": (16, 64), "CUTLASS_MLA": (128,)}
# FLASH_ATTN on SM90 runs head size 512 on FlashAttention 4 (FA3 stops at 256; get_flash_attn_version
# in vllm/v1/attention/backends/fa_utils.py), an fp8 cache there with 64-token kernel blocks
# (_get_sm90_fa4_fp8_kv_block_size, flash_attn.py): 64, and 128 split into two. Releases without FA4
# answer with their own reason (head size) in the row.
HEAD_512_SHAPES = {"FLASH_ATTN": ((("decode", 3, 200, 1), ("mixed", 4, 96, 40)), (64, 128))}
DENSE = ("TRITON_ATTN", "FLASH_ATTN", "FLASHINFER")
MLA_CHECKED = ("TRITON_MLA", "FLASHMLA", "FLASH_ATTN_MLA", "FLASHINFER_MLA")
# sparse MLA: DeepSeek-V3.2's top-k 2048 at its per-GPU heads of TP 8 (16) and TP 1 (128), one
# context shorter than the top-k (every position chosen) and one longer (2048 of 2500 chosen)
SPARSE_CHECKED = ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM90")
SPARSE_SHAPES = (("decode", 3, 200, 1), ("decode", 2, 2500, 1))
SPARSE_HEADS = (16, 128)
SPARSE_BLOCK_SIZES = (64, 128)  # their kernel block size (64), and one vLLM splits into kernel blocks


class _FakeOpNamespace:
    """torch.ops._C on a driverless machine: capability probes answer False."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: False


H100 = ((9, 0), "NVIDIA H100 80GB HBM3")
# The GPU each backend is checked on: an H100, except where vLLM takes the backend on other GPUs
# only. FLASHINFER_MLA: supports_compute_capability is `capability.major == 10` (0.26
# mla/flashinfer_mla.py:91, 0.33 mla/flashinfer_mla.py:220), so it is checked on a B200.
STAND_IN = {"FLASHINFER_MLA": ((10, 0), "NVIDIA B200")}


def gpu_label(backend: str) -> str:
    (major, minor), name = STAND_IN.get(backend, H100)
    return f"{name.split()[1]} stand-in (CC {major}.{minor})"


def target_gpu(runtime: Any, backend: str) -> None:
    """The stand-in platform reports the GPU the backend is checked on (STAND_IN); vLLM's
    functools caches that read the platform are cleared when it changes."""
    capability, name = STAND_IN.get(backend, H100)
    target = runtime.capability(capability)
    if runtime.platform_cls.target != target:
        runtime.platform_cls.target, runtime.platform_cls.target_name = target, name
        for cached in runtime._all_caches():
            cached.cache_clear()


# vLLM decodes with FlashInfer's XQA on SM90 only where has_nvidia_artifactory() (flashinfer-cubin, or
# NVIDIA's artifactory reachable; 0.33 utils/flashinfer.py:647-697), else with its native wrapper (FIDecode),
# as on the GPU machines tune ran on ("Failed to connect to NVIDIA artifactory"). FLASHINFER: both ways.
CUBIN_ANSWERS = {"FLASHINFER": (False, True)}


def flashinfer_cubin(runtime: Any, available: bool) -> None:
    """has_nvidia_artifactory() answers `available` (vLLM's functools caches that read it are cleared)."""
    if runtime._artifactory != available:
        runtime._artifactory = available
        for cached in runtime._all_caches():
            cached.cache_clear()


def stand_in_gpu(capability: tuple[int, int] = H100[0], name: str = H100[1]) -> Any:
    import torch

    from attnsel.attention.explain import vllm_runtime

    runtime = vllm_runtime(offline=True)
    runtime.platform_cls.target = runtime.capability(capability)
    runtime.platform_cls.target_name = name
    torch.ops.__dict__["_C"] = _FakeOpNamespace()
    # 0.34's FlashMLASparseImpl.__init__ asks the current device's SM count
    # (v1/attention/backends/mla/flashmla_sparse.py:770 @ 0.34.0): the stand-in GPU is device 0
    torch.accelerator.current_device_index = lambda: 0
    import importlib

    # pinned host buffers need a driver: FlashInfer's builder and (0.31+) CpuGpuBuffer.copy_to_gpu
    # (vllm/v1/utils.py:143 in 0.31) read a module-level PIN_MEMORY
    for module_name in ("vllm.v1.attention.backends.flashinfer", "vllm.v1.utils",
                        # 0.33's fast_plan_decode pins FlashInfer's host range buffer (pin_host_range_buf)
                        "vllm.utils.flashinfer",
                        # the sparse MLA builders: np_to_pinned_tensor (request ids) and 0.33's
                        # pinned context-length copy
                        "vllm.utils.torch_utils", "vllm.model_executor.layers.attention.sparse_mla_attention"):
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 -- FLASHINFER is then reported as not importable
            continue
        if hasattr(module, "PIN_MEMORY"):
            module.PIN_MEMORY = False  # type: ignore[attr-defined]  # a module attribute of some releases
    return runtime


_CALLS: dict[str, list[dict]] = {}


def _recorded_calls(backend: str) -> list[dict]:
    """The backend's recorder, installed once per process (a second patch would wrap the first)."""
    if backend not in _CALLS:
        _CALLS[backend] = []
        patch = {**cpu_recorders.PATCHES, **cpu_recorders_sparse.PATCHES}.get(backend)
        if patch is not None:
            patch(_CALLS[backend])
    return _CALLS[backend]


def checked_workloads(backend: str, kv_cache_dtype: str) -> list[tuple[Any, int]]:
    """(workload, block size) rows of one backend's check."""
    from attnsel.attention.kernels import paged

    if backend in SPARSE_MLA_BACKENDS:  # bfloat16: FLASHMLA_SPARSE takes nothing else (Triton only converts indices)
        return [(paged.Workload(kind, batch, context, qlen, heads, 1, 576, "bfloat16", kv_cache_dtype,
                                kv_lora_rank=512, index_topk=INDEX_TOPK), block_size)
                for heads in SPARSE_HEADS for kind, batch, context, qlen in SPARSE_SHAPES
                for block_size in SPARSE_BLOCK_SIZES]
    # float16: the Triton interpreter's bf16 dot products are wrong (_triton_kernels.py)
    if backend in MLA_BACKENDS:
        return [(paged.Workload(kind, batch, context, qlen, 16, 1, 576, "float16", kv_cache_dtype, kv_lora_rank=512),
                 block_size) for kind, batch, context, qlen in MLA_SHAPES for block_size in MLA_BLOCK_SIZES[backend]]
    cases = [(paged.Workload(kind, batch, context, qlen, 8, 2, 64, "float16", kv_cache_dtype), block_size)
             for kind, batch, context, qlen in SHAPES for block_size in (16, 64)]
    shapes, sizes = HEAD_512_SHAPES.get(backend, ((), ()))
    return cases + [(paged.Workload(kind, batch, context, qlen, 8, 2, 512, "float16", kv_cache_dtype), block_size)
                    for kind, batch, context, qlen in shapes for block_size in sizes]


def check_backend(backend: str, kv_cache_dtype: str = "auto", flashinfer_cubin: bool = True) -> list[dict]:
    from attnsel.attention.kernels import adapters_for, mla, paged

    calls = _recorded_calls(backend)
    adapter = adapters_for(backend, device="cpu")[0]
    results = []
    for w, block_size in checked_workloads(backend, kv_cache_dtype):
        make = mla.make_mla_batch if w.is_mla else paged.make_paged_batch
        row = {"backend": backend, "shape": w.label(), "block_size": block_size}
        # the release's own selector first, as tune's plan asks it (cpu_check_selector.py): what vLLM
        # refuses is refused in vLLM's words; the adapter's reasons cover what vLLM accepts
        capability, gpu_name = STAND_IN.get(backend, H100)
        row["selector_reasons"] = selector_reasons(backend, w, block_size, capability, gpu_name,
                                                   has_flashinfer_cubin=flashinfer_cubin)
        reason = "; ".join(row["selector_reasons"]) or adapter.unsupported_reason(w, block_size, "cpu")
        if reason:
            row.update(ok=None, skipped=reason, seconds=0.0, recorded_calls=[])
            results.append(row)
            continue
        b = make(w, block_size, device="cpu", seed=1)
        started = time.perf_counter()
        try:
            prepared = adapter.prepare(b)
            if prepared.poison_output is not None:
                prepared.poison_output()
            err = paged.relative_error(prepared.run(), paged.reference_attention(b))
            tolerance = FP8_TOLERANCE if kv_cache_dtype != "auto" else 2e-2
            row.update(ok=_outcome(err < tolerance, prepared.details.get("vllm_fault"), row), rel_error=err,
                       provider=prepared.provider,
                       launch=prepared.details.get("launch"), decode_path=prepared.details.get("decode_path"),
                       details=prepared.details, notes=prepared.notes,
                       kernel_block_size=prepared.kernel_block_size, fa_version=prepared.details.get("fa_version"))
        except Exception as exc:  # noqa: BLE001 -- reported per row
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            if os.environ.get("ATTNSEL_VERBOSE"):
                import traceback

                traceback.print_exc()
        row["seconds"] = round(time.perf_counter() - started, 2)
        row["recorded_calls"] = calls[-3:]
        results.append(row)
    return results


def _outcome(matched: bool, fault: Any, row: dict) -> Any:
    """Matched the reference or not; None (row["vllm_fault"]) where the adapter names vLLM's own fault
    (fp8_faults.py) and the output misses as it says; a named fault that matched is stale: False."""
    if not fault:
        return matched
    row["vllm_fault"] = fault
    if matched:
        row["error"] = "the adapter names a fault of vLLM's here, yet the output matched the reference"
        return False
    return None


def _layout_on_its_gpu(runtime: Any, builder: Any, backend: str) -> dict:
    from attnsel.attention.kernels.vllm.stack import MissingBackend

    target_gpu(runtime, backend)
    try:
        block_size = MLA_BLOCK_SIZES.get(backend, SPARSE_BLOCK_SIZES if backend in SPARSE_MLA_BACKENDS else (16,))[0]
        return {**signatures_and_layout(builder, backend, block_size), "gpu": gpu_label(backend)}
    except MissingBackend as missing:  # a backend of later releases (its rows say the same)
        return {"missing": str(missing)}


def save_check(path: str, backends: list[str], rows: list[dict], runtime: Any) -> None:
    """The check's recording: the release, the adapter facts it drove the classes with, per backend
    the signatures and cache layout (cpu_check_recording.signatures_and_layout), and every row's outcome."""
    import dataclasses
    import importlib
    import json

    import vllm  # type: ignore

    from attnsel.attention.kernels.vllm import StackBuilder

    builder = StackBuilder(device="cpu")
    version = getattr(vllm, "__version__", "?")
    commit = getattr(importlib.import_module("vllm._version"), "__commit_id__", None) or "?"
    refused = [r for r in rows if r["ok"] is None and not r.get("vllm_fault")]
    counts = {"ok": sum(1 for r in rows if r["ok"] is True), "BAD": sum(1 for r in rows if r["ok"] is False),
              "refused by vLLM's selector": sum(1 for r in refused if r.get("selector_reasons")),
              "not built by the adapter": sum(1 for r in refused if not r.get("selector_reasons")),
              "vLLM's own output wrong (a known fault, fp8_faults.py)": sum(1 for r in rows if r.get("vllm_fault"))}
    doc = {"_source": f"python -m attnsel.bench.tools.vllm_cpu_check --save on the vLLM {version} wheel "
                      f"(vllm/_version.py commit {commit}): " + ", ".join(f"{n} {k}" for k, n in counts.items()),
           "vllm": version, "wheel_commit": commit, "gpu": "H100 stand-in (CC 9.0) unless the row says otherwise",
           "adapter_facts": dataclasses.asdict(builder.facts),
           "backends": {b: _layout_on_its_gpu(runtime, builder, b) for b in backends},
           "rows": [{k: row.get(k) for k in ("backend", "kv_cache_dtype", "shape", "block_size", "ok", "skipped",
                                             "rel_error", "launch", "kernel_block_size", "fa_version", "gpu", "error",
                                             "flashinfer_cubin", "decode_path", "vllm_fault", "selector_reasons")}
                     for row in rows]}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    print(f"saved the check of vLLM {doc['vllm']} ({len(rows)} rows) into {path}")


def _print_row(row: dict) -> None:
    cubin = "" if row.get("flashinfer_cubin", True) else " (no cubin)"
    if row["ok"] is None and not row.get("vllm_fault"):
        who = "refused by vLLM" if row.get("selector_reasons") else "skipped"
        print(f"--  {row['backend']:<14} bs={row['block_size']:<3} {row['shape']:<52} {who}{cubin}: {row['skipped']}")
        return
    status = "vLLM" if row["ok"] is None else "ok " if row["ok"] else "BAD"
    detail = f"err {row['rel_error']:.2e} launch={row['launch']}" if "rel_error" in row else row.get("error")
    print(f"{status} {row['backend']:<14} bs={row['block_size']:<3} {row['shape']:<52} {detail}{cubin} ({row['seconds']} s)")
    if row.get("vllm_fault"):
        print(f"      {row['vllm_fault']}")
    if row["ok"] is False or os.environ.get("ATTNSEL_VERBOSE"):
        print(f"      {row.get('details') or ''} {row['recorded_calls']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=list(DENSE + MLA_CHECKED + SPARSE_CHECKED + ("CUTLASS_MLA",)))
    parser.add_argument("--kv-cache-dtype", action="append", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
                        help="default: auto and fp8")
    parser.add_argument("--record", help="write what vLLM's classes answered (JSON) to this file and exit")
    parser.add_argument("--save", help="run the check and write its recording (JSON) to this file: "
                                       "tests/fixtures/vllm_cpu/vllm_0_X.json, replayed without vLLM")
    args = parser.parse_args(argv)
    runtime = stand_in_gpu()
    backends = args.backend or list(DENSE + MLA_CHECKED + SPARSE_CHECKED)
    if args.record:
        import json

        doc = record_stacks(backends)
        with open(args.record, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        print(f"recorded {', '.join(doc['backends'])} from vLLM {doc['vllm']} into {args.record}")
        return 0
    failed = 0
    rows = []
    for backend in backends:
        target_gpu(runtime, backend)
        for cubin in CUBIN_ANSWERS.get(backend, (True,)):
            flashinfer_cubin(runtime, cubin)
            for kv in args.kv_cache_dtype or ["auto", "fp8"]:
                for row in check_backend(backend, kv, cubin):
                    failed += row["ok"] is False
                    row = {**row, "kv_cache_dtype": kv, "gpu": gpu_label(backend), "flashinfer_cubin": cubin}
                    _print_row(row)
                    rows.append(row)
        flashinfer_cubin(runtime, True)
    if args.save:
        save_check(args.save, backends, rows, runtime)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
