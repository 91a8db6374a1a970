"""Inside the tune worker: one backend's (block size, workload) items measured, one row each.

A row is checked against the fp32 reference before it is timed; a block size that fails the
check once is not timed again. `ItemRunner.run` never raises: an exception becomes the row's
status (error or out of memory) and the worker goes on with the next item.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from attnsel.attention.kernels import kv_quant
from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.plan.workloads import WorkloadKind
from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.results import ResultRow, Timing
from attnsel.bench.timing import choose_launch, mode_label
from attnsel.bench.timing import stats as T
from attnsel.bench.worker.prebuild import error_text
from attnsel.bench.worker.toolkit import Toolkit

if TYPE_CHECKING:
    from attnsel.attention.kernels.base import KernelAdapter, PreparedKernel
    from attnsel.attention.kernels.paged import PagedBatch, Workload
    from attnsel.bench.worker.toolkit import Batch

# Correctness tolerance on paged.relative_error (||out - ref|| / ||ref|| vs the fp32 reference):
# kv_quant.TOLERANCE by query dtype, kv_quant.FP8_TOLERANCE for an fp8 KV cache (their comments say why).


def tolerance_for(shape: dict, options: dict) -> float:
    """--tolerance when given, else the fp8-cache tolerance, else the one for the query dtype."""
    if options.get("tolerance") is not None:
        return float(options["tolerance"])
    if kv_quant.is_fp8(shape.get("kv_cache_dtype", "auto")):
        return kv_quant.FP8_TOLERANCE
    return kv_quant.TOLERANCE.get(shape.get("dtype", "bfloat16"), 2e-2)


class ItemRunner:
    """Measures one (block size, workload) item of one backend; never raises."""

    def __init__(self, toolkit: Toolkit, backend: str, shape: dict, options: dict):
        self.toolkit = toolkit
        self.backend = backend
        self.shape = shape
        self.options = options
        self._adapters: list | None = None
        self._unavailable: dict[str, str] = {}
        self._failed_check: dict[int, str] = {}  # block size -> where it failed the correctness check
        self.import_seconds: float | None = None
        self.preloaded_import_s = 0.0  # library imports done before "go" (see preload_libraries)
        self.extra_notes: list[str] = []  # added to every prepared row (e.g. the JIT pre-build)
        self._phases: dict[str, float] = {}
        self._import_reported = False  # the first row reports the library import (even after a precompile pass)

    def adapters(self) -> list:
        if self._adapters is None:
            started = time.perf_counter()
            available = []
            for adapter in self.toolkit.adapters_for(self.backend):
                reason = adapter.availability()
                if reason:
                    self._unavailable[adapter.name] = reason
                else:
                    available.append(adapter)
            self._adapters = available
            # availability() imports the library (FlashInfer: 8.5 s, docs/gpu-facts.md §1): reported apart;
            # most of it was usually paid before "go", while the previous backend was timing
            self.import_seconds = self.preloaded_import_s + (time.perf_counter() - started)
        return self._adapters

    def base_row(self, item: dict) -> ResultRow:
        return R.new_row(item["key"], self.backend, item["block_size"], item.get("kernel_block_size"),
                         WorkloadSpec.from_dict(item["workload"]), self.shape.get("dtype"),
                         self.shape.get("kv_cache_dtype", "auto"), mode_label(self.options), None, None)

    def run(self, item: dict) -> dict:
        """The item's result row, as the worker sends it to the parent (bench/worker/main.py)."""
        return self.measure(item).to_dict()

    def measure(self, item: dict) -> ResultRow:
        started = time.perf_counter()
        row = self.base_row(item)
        self._phases = {}
        row.wall_breakdown_s = self._phases
        try:
            self._measure(item, row)
        except BaseException as exc:  # noqa: BLE001 -- the row records it; the worker goes on
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            row.status = R.STATUS_OOM if self.toolkit.is_out_of_memory(exc) else R.STATUS_ERROR
            row.error = error_text(exc)
            row.traceback = traceback.format_exc(limit=6)[-2000:]
        finally:
            with self._phase("release_s"):
                try:
                    self.toolkit.release()
                except Exception:  # noqa: BLE001
                    pass
        row.row_wall_s = time.perf_counter() - started
        return row

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Adds the wall seconds of the block to this row's breakdown (even when it raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._phases[name] = self._phases.get(name, 0.0) + (time.perf_counter() - started)

    def _pick_adapter(self, workload: Workload, block_size: int) -> tuple[KernelAdapter | None, list[str]]:
        reasons: list[str] = []
        for adapter in self.adapters():
            why = adapter.unsupported_reason(workload, block_size, getattr(self.toolkit, "device", "cuda"))
            if why is None:
                return adapter, reasons
            reasons.append(f"{adapter.name}: {why}")
        return None, reasons

    def _measure(self, item: dict, row: ResultRow) -> None:
        spec = WorkloadSpec.from_dict(item["workload"])
        block_size = int(item["block_size"])
        picked = self._usable_adapter(spec, block_size, row)
        if picked is None:
            return
        adapter, workload = picked
        with self._phase("batch_s"):
            batch = self.toolkit.make_batch(workload, block_size, int(self.options.get("seed", 0)))
        adapter, prepared = self._set_up(adapter, workload, block_size, batch, row)
        with self._phase("first_call_s"):
            row.first_call_s = self.toolkit.first_call_seconds(prepared)
        if item.get("check", True):
            if not self._check(prepared, batch, spec, block_size, row):
                return
        else:
            row.checked = False
        self._time(adapter, prepared, batch, workload, block_size, spec, item, row)

    def usable_adapter(self, spec: WorkloadSpec, block_size: int) -> tuple[KernelAdapter, Workload] | None:
        """(adapter, workload) a row of this spec and block size would run with, or None (asked ahead of
        the rows: the import seconds stay for the first real row to report)."""
        return self._usable_adapter(spec, block_size, ResultRow.new(), first_row=False)

    def _usable_adapter(self, spec: WorkloadSpec, block_size: int, row: ResultRow,
                        first_row: bool = True) -> tuple[KernelAdapter, Workload] | None:
        """(adapter, workload) for this row, or None with the row's status and error saying why not.
        `first_row`: a row that is kept, so the first of them reports the library's import seconds."""
        kv = self.shape.get("kv_cache_dtype", "auto")
        if kv not in kv_quant.TIMED_KV_CACHE_DTYPES:
            row.status = R.STATUS_UNSUPPORTED
            row.error = (f"--kv-cache-dtype {kv} is not timed: tune builds {', '.join(kv_quant.TIMED_KV_CACHE_DTYPES)} "
                            f"caches (attention/kernels/kv_quant.py)")
            return None
        with self._phase("library_import_s"):
            adapters = self.adapters()
        if first_row and not self._import_reported:
            row.library_import_s = self.import_seconds
            self._import_reported = True
        if not adapters:
            row.status = R.STATUS_UNAVAILABLE
            missing = "; ".join(f"{n}: {r}" for n, r in self._unavailable.items())
            row.error = missing or f"no kernel adapter for {self.backend}"
            return None
        workload = self.toolkit.workload(self.shape, spec)
        adapter, reasons = self._pick_adapter(workload, block_size)
        if adapter is None:
            row.status = R.STATUS_UNSUPPORTED
            row.error = "; ".join(reasons)
            return None
        row.adapter = adapter.name
        if block_size in self._failed_check:
            # already disqualified: timing it would only cost GPU time
            row.status = R.STATUS_WRONG
            row.error = f"not timed: failed the correctness check on {self._failed_check[block_size]}"
            return None
        return adapter, workload

    def _set_up(self, adapter: KernelAdapter, workload: Workload, block_size: int, batch: Batch,
                row: ResultRow) -> tuple[KernelAdapter, PreparedKernel]:
        """(adapter, prepared): the adapter's plan + JIT/compile + first call, measured apart from run
        time, and what the prepared kernel says about itself in the row."""
        started = time.perf_counter()
        with self._phase("prepare_s"):
            adapter, prepared = self._prepare(adapter, workload, block_size, batch, row)
        row.adapter = adapter.name
        row.setup_s = getattr(prepared, "setup_seconds", None) or (time.perf_counter() - started)
        row.provider = getattr(prepared, "provider", None)
        row.notes = list(getattr(prepared, "notes", ()) or ()) + (row.notes or []) + self.extra_notes
        details = getattr(prepared, "details", None) or None
        if details:
            row.provider_details = details
        if getattr(prepared, "kernel_block_size", None):
            row.kernel_block_size_used = prepared.kernel_block_size
        return adapter, prepared

    def _time(self, adapter: KernelAdapter, prepared: PreparedKernel, batch: Batch, workload: Workload, block_size: int,
              spec: WorkloadSpec,
              item: dict, row: ResultRow) -> None:
        """Times the checked row, launched as chosen, and derives its bandwidth and TFLOP/s."""
        details = getattr(prepared, "details", None) or None
        launch, why, source = choose_launch(self.options, item, details)
        row.launch, row.launch_reason, row.launch_source = launch, why, source
        with self._phase("timing_s"):
            result = self.toolkit.time(adapter, prepared, batch, workload, block_size, self.options, launch=launch)
        row.timing = Timing.from_dict(result.to_dict(with_samples=bool(self.options.get("keep_samples"))))
        bytes_moved, flops = self.toolkit.figures(batch)
        row.bytes_moved = bytes_moved
        row.flops = flops
        row.bandwidth_bytes_per_s = T.bandwidth_bytes_per_s(bytes_moved, result.stats.median_ms)
        row.tflops = T.tflops(flops, result.stats.median_ms) if spec.kind != WorkloadKind.DECODE else None
        row.status = R.STATUS_OK

    def _prepare(self, adapter: KernelAdapter, workload: Workload, block_size: int, batch: Batch,
                 row: ResultRow) -> tuple[KernelAdapter, PreparedKernel]:
        """adapter.prepare(batch); when an adapter that drives vLLM's classes cannot (it raises),
        the next usable provider of the backend runs the row instead, and the row says why."""
        # KernelAdapter.prepare names PagedBatch; an MLA adapter gets the MlaBatch make_batch built
        # for its MLA workload (attention/kernels/mla.py)
        batch_in = cast("PagedBatch", batch)
        try:
            return adapter, adapter.prepare(batch_in)
        except Exception as exc:  # noqa: BLE001
            if not getattr(adapter, "drives_vllm_classes", False):
                raise
            first_error = error_text(exc)
        adapters = self.adapters()
        for fallback in adapters[adapters.index(adapter) + 1:]:
            if fallback.unsupported_reason(workload, block_size, getattr(self.toolkit, "device", "cuda")) is None:
                row.notes = [*(row.notes or []), f"vLLM's own {self.backend} classes could not be driven for this "
                                                  f"row ({first_error}); fell back to {fallback.name}"]
                return fallback, fallback.prepare(batch_in)
        raise RuntimeError(f"vLLM's own {self.backend} classes could not be driven: {first_error}")

    def _check(self, prepared: PreparedKernel, batch: Batch, spec: WorkloadSpec, block_size: int, row: ResultRow) -> bool:
        """Compares with the fp32 reference; False (and the row marked wrong) when it fails."""
        with self._phase("check_s"):
            err = float(self.toolkit.relative_error(prepared, batch))
        tol = tolerance_for(self.shape, self.options)
        row.rel_error = err
        row.tolerance = tol
        row.checked = True
        note = kv_quant.tolerance_note(self.shape.get("kv_cache_dtype", "auto"), kv_quant.TOLERANCE.get(
            self.shape.get("dtype", "bfloat16"), 2e-2))
        if note and self.options.get("tolerance") is None:
            row.notes = [*(row.notes or []), note]
        if err < tol:  # NaN and inf fail too
            return True
        row.status = R.STATUS_WRONG
        row.error = f"relative error {err:.3g} exceeds tolerance {tol:.3g} vs the fp32 reference"
        fault = (getattr(prepared, "details", None) or {}).get("vllm_fault")
        if fault:  # the adapter recognised a known fault of vLLM's own at these scales (kernels/vllm/fp8_faults.py)
            row.error = f"{row.error}: {fault}"
        self._failed_check[block_size] = spec.label()
        return False
