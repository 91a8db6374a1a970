"""The real worker toolkit: torch, the kernel adapters (attention/kernels) and the GPU timers.

The tune worker (bench/worker/main.py, bench/worker/items.py) talks to it through the Toolkit protocol
(bench/worker/toolkit.py); CI swaps in fakes at that boundary
(tests/fixtures/tune/*_toolkit.py). Importing this module imports torch (only worker processes do).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.timing import stats as T
from attnsel.bench.timing.launch_mode import LaunchMode, Timer
from attnsel.bench.worker.prebuild import error_text, import_backend_libraries
from attnsel.probe.libraries import library_versions  # also probe --json's `libraries`

if TYPE_CHECKING:
    from attnsel.attention.kernels.base import KernelAdapter, PreparedKernel
    from attnsel.attention.kernels.paged import Workload
    from attnsel.attention.kernels.triton_precompile import CompileOnly
    from attnsel.bench.worker.toolkit import Batch

EMPTY_CACHE_FRACTION = 0.5  # KernelToolkit.release(): keep torch's cached blocks below this share of the GPU



class KernelToolkit:
    """torch, CUDA events and the adapters of `attnsel.attention.kernels`."""

    batch_device = "cuda"

    def __init__(self) -> None:
        # Import only: no CUDA call here, so a pre-spawned worker can run this while another
        # worker is timing (bench/sweep/run.py); start_cuda() runs after the parent's "go".
        import torch

        from attnsel.attention.kernels import paged, registry

        self.torch = torch
        self.paged = paged
        self.registry = registry
        self._live: list = []

    def preload(self, backend: str) -> None:
        try:
            adapters = self.adapters_for(backend)
        except Exception:  # noqa: BLE001 -- an unknown backend is reported by ItemRunner later
            return
        import_backend_libraries(adapters, backend)

    def cuda_initialized(self) -> bool:
        return bool(self.torch.cuda.is_initialized())

    def start_cuda(self) -> None:
        if not self.torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch in the worker process")
        self.torch.cuda.init()
        self.torch.empty(1, device="cuda")  # creates the context now, so cuda_init_s measures it

    def device_info(self) -> dict:
        torch = self.torch
        props = torch.cuda.get_device_properties(0)
        uuid = getattr(props, "uuid", None)
        return {
            "name": props.name,
            "capability": [props.major, props.minor],
            "total_memory_bytes": int(props.total_memory),
            "l2_cache_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
            "multi_processor_count": getattr(props, "multi_processor_count", None),
            "uuid": str(uuid) if uuid is not None else None,
            "torch_cuda": torch.version.cuda,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "versions": library_versions(),
        }

    def adapters_for(self, backend: str) -> list[KernelAdapter]:
        return list(self.registry.adapters_for(backend, device=getattr(self, "device", "cuda")))

    def workload(self, shape: dict, spec: WorkloadSpec) -> Workload:
        mla = bool(shape.get("use_mla"))
        return self.paged.Workload(
            kind=spec.kind,
            batch=spec.batch,
            context_len=spec.context_len,
            query_len=spec.query_len,
            num_q_heads=int(shape["num_q_heads"]),
            num_kv_heads=int(shape["num_kv_heads"]),
            head_size=int(shape["head_size"]),
            dtype=shape["dtype"],
            kv_cache_dtype=shape.get("kv_cache_dtype", "auto"),
            kv_lora_rank=int(shape["kv_lora_rank"]) if mla else None,
            qk_nope_head_dim=shape.get("qk_nope_head_dim") if mla else None,
            # sparse MLA: each decode token attends to the indexer's top-k (attention/kernels/mla.py)
            index_topk=shape.get("index_topk") if mla and shape.get("use_sparse") else None,
        )

    def make_batch(self, workload: Workload, block_size: int, seed: int) -> Batch:
        """A paged batch (fp8 cache included), or a latent-cache batch for an MLA workload."""
        if workload.is_mla:
            from attnsel.attention.kernels.mla import make_mla_batch

            mla_batch = make_mla_batch(workload, block_size, device=self.batch_device, seed=seed, ragged=True)
            self._live.append(mla_batch)
            return mla_batch
        batch = self.paged.make_paged_batch(workload, block_size, device=self.batch_device, seed=seed, ragged=True)
        self._live.append(batch)
        return batch

    def first_call_seconds(self, prepared: PreparedKernel) -> float:
        from attnsel.bench.timing import measure_first_call

        return measure_first_call(prepared.run)

    def relative_error(self, prepared: PreparedKernel, batch: Batch) -> float:
        if prepared.poison_output is not None:
            prepared.poison_output()  # a kernel that writes nothing must not pass on stale data
        prepared.run()
        self.torch.cuda.synchronize()
        ref = self.paged.reference_attention(batch)
        err = self.paged.relative_error(prepared.output(), ref)
        del ref
        return err

    def time(self, adapter: KernelAdapter, prepared: PreparedKernel, batch: Batch, workload: Workload,
             block_size: int, options: dict,
             launch: str = LaunchMode.EAGER) -> T.TimingResult:
        from attnsel.bench.timing import gpu as G

        def timed(how: str) -> T.TimingResult:
            return G.time_call(
                prepared.run, launch=how, timer=str(options.get("timer", Timer.AUTO)),
                cold_l2=bool(options.get("cold_l2", True)),
                warmup_budget_ms=float(options.get("warmup_ms", T.WARMUP_BUDGET_MS)),
                repeat_budget_ms=float(options.get("repeat_ms", T.REPEAT_BUDGET_MS)),
                max_samples=int(options.get("max_samples", T.MAX_SAMPLES)),
            )

        if launch != LaunchMode.GRAPH:
            return timed(LaunchMode.EAGER)
        try:
            return timed(LaunchMode.GRAPH)
        except Exception as exc:  # noqa: BLE001 -- not every kernel is capture-safe; say so and fall back
            result = timed(LaunchMode.EAGER)
            return dataclasses.replace(result, note=f"CUDA-graph capture failed ({error_text(exc)}); timed eagerly")

    def triton_compile_only(self, threads: int) -> CompileOnly:
        """A block in which Triton launches only compile, `threads` at a time (bench/worker/precompile.py)."""
        from attnsel.attention.kernels.triton_precompile import CompileOnly

        return CompileOnly(threads)

    def figures(self, batch: Batch) -> tuple[float | None, float | None]:
        return float(batch.bytes_moved()), float(batch.flops())

    def is_out_of_memory(self, exc: BaseException) -> bool:
        oom = getattr(self.torch.cuda, "OutOfMemoryError", None)
        return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()

    def release(self) -> None:
        self._live.clear()
        self.torch.cuda.synchronize()  # an asynchronous kernel error surfaces in this row, not the next
        # Returning multi-GB caches to the driver after every row and mapping them again for the
        # next one costs time for nothing: the next row writes fresh K/V (and the check poisons the
        # output), and timing flushes L2 before every call, so reused memory changes no result.
        # Give it back only when the allocator holds more than half the GPU (kernel libraries that
        # allocate outside torch, and the next worker, then still find room).
        reserved = self.torch.cuda.memory_reserved()
        total = self._total_memory()
        if not total or reserved > EMPTY_CACHE_FRACTION * total:
            self.torch.cuda.empty_cache()

    def _total_memory(self) -> int:
        if not hasattr(self, "_total_bytes"):
            self._total_bytes = int(self.torch.cuda.get_device_properties(0).total_memory)
        return self._total_bytes
