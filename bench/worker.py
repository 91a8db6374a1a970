"""The child process that runs one backend's kernels: `python -m attnsel.bench.worker`.

Why a child process: a kernel library can segfault, abort, hang in a JIT compiler or leave the
CUDA context unusable after an OOM. The parent (`bench/sweep.py`, torch-free) starts one worker
per backend with a timeout, so such a failure costs one row, never the sweep.

Protocol. The parent writes one JSON job on stdin:
    {"action": "run" | "probe", "toolkit": "module:attr" | "/path/file.py:attr",
     "backend": "FLASHINFER", "shape": {...TuneShape...}, "options": {...}, "items": [
        {"key", "block_size", "kernel_block_size", "workload": {...WorkloadSpec...}, "check": bool}]}
and reads JSON lines from the worker's original stdout:
    {"type": "ready", "info": {...device and library versions...}}
    {"type": "start", "key": ...}      before each item (the parent's timeout clock starts here)
    {"type": "row", "row": {...}}      after each item
    {"type": "done"}
Anything a library prints (JIT logs) goes to stderr: fd 1 is pointed at fd 2 once the protocol
stream has its own copy, so stray prints cannot corrupt the protocol.

The toolkit is the worker's boundary to torch and the kernel adapters. `KernelToolkit` (below)
is the real one; CI passes a fake toolkit with fake adapters that hang, raise or abort.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from typing import Any, Optional, Protocol, TextIO

from attnsel.bench import results as R
from attnsel.bench import timing as T
from attnsel.bench.plan import WorkloadSpec

DEFAULT_TOOLKIT = "attnsel.bench.worker:KernelToolkit"

# Correctness tolerance on paged.relative_error (||out - ref|| / ||ref|| vs the fp32 reference),
# by query dtype; the same values as attention/kernels/paged.py TOLERANCE. Measured errors are
# ~5e-4 for bf16 (gpu-facts.md: FA4 3e-4, flex 5e-4), so this still catches a wrong mask, scale
# or page mapping.
DEFAULT_TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 1e-3}
FP8_KV_TOLERANCE = 1e-1

LIBRARY_DISTRIBUTIONS = (
    "torch", "triton", "flashinfer-python", "flash-attn", "flash-attn-4", "vllm", "nvidia-cutlass-dsl",
)


class Toolkit(Protocol):
    """What the worker needs from torch and the kernels package (our own boundary)."""

    def device_info(self) -> dict: ...

    def adapters_for(self, backend: str) -> list: ...

    def workload(self, shape: dict, spec: WorkloadSpec) -> Any: ...

    def make_batch(self, workload: Any, block_size: int, seed: int) -> Any: ...

    def first_call_seconds(self, prepared: Any) -> float: ...

    def relative_error(self, prepared: Any, batch: Any) -> float: ...

    def time(self, adapter: Any, prepared: Any, batch: Any, workload: Any, block_size: int, options: dict) -> T.TimingResult: ...

    def figures(self, batch: Any) -> tuple[Optional[float], Optional[float]]: ...

    def is_out_of_memory(self, exc: BaseException) -> bool: ...

    def release(self) -> None: ...


def load_toolkit(spec: str) -> Toolkit:
    """`module:attr` or `/path/to/file.py:attr`; attr is a class or factory called with no args."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ValueError(f"toolkit spec must be 'module:attr', got {spec!r}")
    if target.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location(f"attnsel_toolkit_{abs(hash(target))}", target)
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError(f"cannot load toolkit file {target}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)()


def mode_label(options: dict) -> str:
    """The timing mode every row carries (users-and-measuring §C1: "every result row carries its mode")."""
    mode = "graph" if options.get("mode") == "graph" else "events"
    return f"{mode}-{'cold' if options.get('cold_l2', True) else 'hot'}"


def tolerance_for(shape: dict, options: dict) -> float:
    if options.get("tolerance") is not None:
        return float(options["tolerance"])
    if str(shape.get("kv_cache_dtype", "auto")).startswith("fp8"):
        return FP8_KV_TOLERANCE
    return DEFAULT_TOLERANCE.get(shape.get("dtype", "bfloat16"), 2e-2)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:500]


class ItemRunner:
    """Measures one (block size, workload) item of one backend; never raises."""

    def __init__(self, toolkit: Toolkit, backend: str, shape: dict, options: dict):
        self.toolkit = toolkit
        self.backend = backend
        self.shape = shape
        self.options = options
        self._adapters: Optional[list] = None
        self._unavailable: dict[str, str] = {}
        self._failed_check: dict[int, str] = {}  # block size -> where it failed the correctness check
        self.import_seconds: Optional[float] = None

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
            # availability() imports the library (FlashInfer: 8.5 s, gpu-facts.md): reported apart
            self.import_seconds = time.perf_counter() - started
        return self._adapters

    def base_row(self, item: dict) -> dict:
        spec = WorkloadSpec.from_dict(item["workload"])
        return {
            "key": item["key"],
            "backend": self.backend,
            "block_size": item["block_size"],
            "kernel_block_size": item.get("kernel_block_size"),
            "workload": spec.to_dict(),
            "workload_label": spec.label(),
            "kind": spec.kind,
            "dtype": self.shape.get("dtype"),
            "kv_cache_dtype": self.shape.get("kv_cache_dtype", "auto"),
            "mode": mode_label(self.options),
            "status": None,
            "error": None,
        }

    def run(self, item: dict) -> dict:
        row = self.base_row(item)
        try:
            self._measure(item, row)
        except BaseException as exc:  # noqa: BLE001 -- the row records it; the worker goes on
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            row["status"] = R.STATUS_OOM if self.toolkit.is_out_of_memory(exc) else R.STATUS_ERROR
            row["error"] = _error_text(exc)
            row["traceback"] = traceback.format_exc(limit=6)[-2000:]
        finally:
            try:
                self.toolkit.release()
            except Exception:  # noqa: BLE001
                pass
        return row

    def _pick_adapter(self, workload: Any, block_size: int) -> tuple[Optional[Any], list[str]]:
        reasons = []
        for adapter in self.adapters():
            why = adapter.unsupported_reason(workload, block_size, getattr(self.toolkit, "device", "cuda"))
            if why is None:
                return adapter, reasons
            reasons.append(f"{adapter.name}: {why}")
        return None, reasons

    def _measure(self, item: dict, row: dict) -> None:
        spec = WorkloadSpec.from_dict(item["workload"])
        block_size = int(item["block_size"])
        kv = self.shape.get("kv_cache_dtype", "auto")
        if kv not in ("auto", self.shape.get("dtype")):
            row["status"] = R.STATUS_UNSUPPORTED
            row["error"] = (f"--kv-cache-dtype {kv} is not timed yet: the paged batches hold "
                            f"{self.shape.get('dtype')} K/V (attention/kernels/paged.py)")
            return
        first_row = self._adapters is None
        adapters = self.adapters()
        if first_row:
            row["library_import_s"] = self.import_seconds
        if not adapters:
            row["status"] = R.STATUS_UNAVAILABLE
            missing = "; ".join(f"{n}: {r}" for n, r in self._unavailable.items())
            row["error"] = missing or f"no kernel adapter for {self.backend}"
            return
        workload = self.toolkit.workload(self.shape, spec)
        adapter, reasons = self._pick_adapter(workload, block_size)
        if adapter is None:
            row["status"] = R.STATUS_UNSUPPORTED
            row["error"] = "; ".join(reasons)
            return
        row["adapter"] = adapter.name
        if block_size in self._failed_check:
            # already disqualified: timing it would only cost GPU time
            row["status"] = R.STATUS_WRONG
            row["error"] = f"not timed: failed the correctness check on {self._failed_check[block_size]}"
            return
        batch = self.toolkit.make_batch(workload, block_size, int(self.options.get("seed", 0)))
        started = time.perf_counter()
        prepared = adapter.prepare(batch)
        # The adapter's plan + JIT/compile + first call, measured apart from run time.
        row["setup_s"] = getattr(prepared, "setup_seconds", None) or (time.perf_counter() - started)
        row["provider"] = getattr(prepared, "provider", None)
        row["notes"] = list(getattr(prepared, "notes", ()) or ())
        if getattr(prepared, "kernel_block_size", None):
            row["kernel_block_size_used"] = prepared.kernel_block_size
        row["first_call_s"] = self.toolkit.first_call_seconds(prepared)
        if item.get("check", True):
            err = float(self.toolkit.relative_error(prepared, batch))
            tol = tolerance_for(self.shape, self.options)
            row["rel_error"] = err
            row["tolerance"] = tol
            row["checked"] = True
            if not (err < tol):  # NaN and inf fail too
                row["status"] = R.STATUS_WRONG
                row["error"] = f"relative error {err:.3g} exceeds tolerance {tol:.3g} vs the fp32 reference"
                self._failed_check[block_size] = spec.label()
                return
        else:
            row["checked"] = False
        result = self.toolkit.time(adapter, prepared, batch, workload, block_size, self.options)
        row["timing"] = result.to_dict(with_samples=bool(self.options.get("keep_samples")))
        bytes_moved, flops = self.toolkit.figures(batch)
        row["bytes_moved"] = bytes_moved
        row["flops"] = flops
        row["bandwidth_bytes_per_s"] = T.bandwidth_bytes_per_s(bytes_moved, result.stats.median_ms)
        row["tflops"] = T.tflops(flops, result.stats.median_ms) if spec.kind != "decode" else None
        row["status"] = R.STATUS_OK


# ---------------------------------------------------------------------------------------------
# The real toolkit (torch + attention.kernels)


class KernelToolkit:
    """torch, CUDA events and the adapters of `attnsel.attention.kernels`."""

    def __init__(self) -> None:
        import torch

        from attnsel.attention.kernels import paged, registry

        self.torch = torch
        self.paged = paged
        self.registry = registry
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch in the worker process")
        self._live: list = []

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

    def adapters_for(self, backend: str) -> list:
        return list(self.registry.adapters_for(backend))

    def workload(self, shape: dict, spec: WorkloadSpec) -> Any:
        return self.paged.Workload(
            kind=spec.kind,
            batch=spec.batch,
            context_len=spec.context_len,
            query_len=spec.query_len,
            num_q_heads=int(shape["num_q_heads"]),
            num_kv_heads=int(shape["num_kv_heads"]),
            head_size=int(shape["head_size"]),
            dtype=shape["dtype"],
        )

    def make_batch(self, workload: Any, block_size: int, seed: int) -> Any:
        batch = self.paged.make_paged_batch(workload, block_size, device="cuda", seed=seed, ragged=True)
        self._live.append(batch)
        return batch

    def first_call_seconds(self, prepared: Any) -> float:
        return T.measure_first_call(prepared.run)

    def relative_error(self, prepared: Any, batch: Any) -> float:
        if prepared.poison_output is not None:
            prepared.poison_output()  # a kernel that writes nothing must not pass on stale data
        prepared.run()
        self.torch.cuda.synchronize()
        ref = self.paged.reference_attention(batch)
        err = self.paged.relative_error(prepared.output(), ref)
        del ref
        return err

    def time(self, adapter: Any, prepared: Any, batch: Any, workload: Any, block_size: int, options: dict) -> T.TimingResult:
        budgets = dict(
            warmup_budget_ms=float(options.get("warmup_ms", T.WARMUP_BUDGET_MS)),
            repeat_budget_ms=float(options.get("repeat_ms", T.REPEAT_BUDGET_MS)),
            max_samples=int(options.get("max_samples", T.MAX_SAMPLES)),
        )
        cold = bool(options.get("cold_l2", True))
        if options.get("mode") != "graph":
            return T.time_events(prepared.run, cold_l2=cold, **budgets)
        try:
            runs = [prepared.run]
            if cold:
                l2 = int(getattr(self.torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
                copies = self._affordable_copies(T.rotation_count(int(batch.bytes_moved()), l2), batch)
                for i in range(1, copies):
                    extra = self.make_batch(workload, block_size, int(options.get("seed", 0)) + i)
                    runs.append(adapter.prepare(extra).run)
            return T.time_cuda_graph(runs, **budgets)
        except Exception as exc:  # noqa: BLE001 -- not every kernel is capture-safe; say so and fall back
            result = T.time_events(prepared.run, cold_l2=cold, **budgets)
            return T.TimingResult(result.stats, result.mode, result.l2, result.warmup_calls, result.samples_ms,
                                  note=f"CUDA-graph capture failed ({_error_text(exc)}); timed with events")

    def _affordable_copies(self, wanted: int, batch: Any) -> int:
        free, _total = self.torch.cuda.mem_get_info()
        per_copy = max(1, int(batch.bytes_moved()))
        return max(1, min(wanted, int(0.5 * free // per_copy)))

    def figures(self, batch: Any) -> tuple[Optional[float], Optional[float]]:
        return float(batch.bytes_moved()), float(batch.flops())

    def is_out_of_memory(self, exc: BaseException) -> bool:
        oom = getattr(self.torch.cuda, "OutOfMemoryError", None)
        return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()

    def release(self) -> None:
        self._live.clear()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


def library_versions() -> dict:
    """Installed versions, read from package metadata (no imports, so no JIT side effects)."""
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for dist in LIBRARY_DISTRIBUTIONS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# ---------------------------------------------------------------------------------------------
# Entry point


def _protocol_stream() -> TextIO:
    """A private copy of stdout for the protocol; fd 1 then goes to stderr (see module doc)."""
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8")


def _send(stream: TextIO, message: dict) -> None:
    stream.write(json.dumps(message, default=str) + "\n")
    stream.flush()


def serve(job: dict, stream: TextIO) -> int:
    toolkit = load_toolkit(job.get("toolkit") or DEFAULT_TOOLKIT)
    _send(stream, {"type": "ready", "info": toolkit.device_info()})
    if job.get("action") == "probe":
        _send(stream, {"type": "done"})
        return 0
    runner = ItemRunner(toolkit, job["backend"], job["shape"], job.get("options") or {})
    for item in job.get("items") or []:
        _send(stream, {"type": "start", "key": item["key"]})
        _send(stream, {"type": "row", "row": runner.run(item)})
    _send(stream, {"type": "done"})
    return 0


def main() -> int:
    stream = _protocol_stream()
    try:
        job = json.loads(sys.stdin.read())
    except ValueError as exc:
        _send(stream, {"type": "fatal", "error": f"bad job: {exc}"})
        return 2
    try:
        return serve(job, stream)
    except Exception as exc:  # noqa: BLE001 -- e.g. the toolkit could not start (no CUDA, import error)
        traceback.print_exc()
        _send(stream, {"type": "fatal", "error": _error_text(exc)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
