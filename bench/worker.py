"""The child process that runs one backend's kernels: `python -m attnsel.bench.worker`.

Why a child process: a kernel library can segfault, abort, hang in a JIT compiler or leave the
CUDA context unusable after an OOM. The parent (`bench/sweep.py`, torch-free) starts one worker
per backend with a timeout, so such a failure costs one row, never the sweep.

Protocol. The parent writes one JSON job as the first line on stdin:
    {"action": "run" | "probe", "toolkit": "module:attr" | "/path/file.py:attr",
     "backend": "FLASHINFER", "shape": {...TuneShape...}, "options": {...}, "items": [
        {"key", "block_size", "kernel_block_size", "workload": {...WorkloadSpec...}, "check": bool}]}
then "go" on a line of its own, at once or later (a pre-spawned worker imports torch and the
kernel library, says "imported", and waits for "go" before touching CUDA; EOF instead of "go"
means "not needed": the worker exits). The parent reads JSON lines from the worker's original stdout:
    {"type": "imported", "startup": {torch_import_s, library_import_s, ...}}
A pre-spawned worker's job may carry "prebuild": {"previous_backend", "device_capability",
"wait_s"}: after its imports it calls the backend's first adapter's optional `prebuild(...)`
hook in a background thread (compile the JIT modules these items will need, e.g. FlashInfer's
nvcc builds, into the library's disk cache: CPU only, no CUDA), while the previous backend is
still timing. At "go" it waits up to wait_s for that build to end (the first plan() would have
to compile the same modules anyway), and reports it in "ready"'s startup["prebuild"] and in each
row's notes. A failing pre-build changes nothing else: plan() then compiles as it always did.
    {"type": "ready", "info": {...device and library versions...}, "startup": {... cuda_init_s}}
    {"type": "start", "key": ...}      before each item (the parent's timeout clock starts here)
    {"type": "row", "row": {...}}      after each item
    {"type": "done"}
Anything a library prints (JIT logs) goes to stderr: fd 1 is pointed at fd 2 once the protocol
stream has its own copy, so stray prints cannot corrupt the protocol.

The toolkit is the worker's boundary to torch and the kernel adapters. `KernelToolkit` (below)
is the real one; CI passes a fake toolkit with fake adapters that hang, raise or abort.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import os
import sys
import threading
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

# How long a pre-spawned worker waits after "go" for its JIT pre-build (Prebuild) before it goes
# on anyway; the parent passes its own figure (below its startup timeout) in the job.
DEFAULT_PREBUILD_WAIT_S = 150.0

EMPTY_CACHE_FRACTION = 0.5  # KernelToolkit.release(): keep torch's cached blocks below this share of the GPU

# Imported before "go" besides each adapter's own `module`: the libraries availability()/prepare()
# would import anyway (FlashInfer's adapter has no `module` attribute; FlexAttention's compile
# imports dynamo + inductor on its first row). Import only: none of these creates a CUDA context
# by itself.
PRELOAD_MODULES = {
    "FLASHINFER": ("flashinfer",),
    "TRITON_ATTN": ("triton",),
    "FLEX_ATTENTION": ("torch.nn.attention.flex_attention", "torch._dynamo", "torch._inductor.compile_fx"),
}

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

    def time(self, adapter: Any, prepared: Any, batch: Any, workload: Any, block_size: int, options: dict,
             launch: str = "eager") -> T.TimingResult: ...

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


LAUNCH_POLICIES = ("vllm", "graph", "eager")


def mode_label(options: dict) -> str:
    """The timing mode every row carries (users-and-measuring §C1: "every result row carries its
    mode"): the launch policy ("vllm": each row launched as vLLM launches it, graph or eager;
    "graph"/"eager": forced) and the L2 state."""
    launch = options.get("launch", "vllm")
    return f"{launch}-{'cold' if options.get('cold_l2', True) else 'hot'}"


def choose_launch(options: dict, item: dict, details: Optional[dict]) -> tuple[str, str, str]:
    """(launch, why, source) for one row. Forced by --cuda-graph / --eager; otherwise what the
    installed vLLM's own CudagraphDispatcher answered for this batch (the vLLM-driven adapter puts
    it in its details), else the plan's answer from the rule profile's recorded CUDA-graph facts.

    >>> choose_launch({"launch": "vllm"}, {"launch": "eager", "launch_reason": "r"}, {"launch": "graph", "launch_reason": "d"})
    ('graph', 'd', 'installed vLLM')
    >>> choose_launch({"launch": "vllm"}, {"launch": "graph", "launch_reason": "rule"}, None)
    ('graph', 'rule', 'recorded rule')
    >>> choose_launch({"launch": "eager"}, {"launch": "graph"}, {"launch": "graph"})[:2]
    ('eager', 'forced by --eager')
    """
    policy = options.get("launch", "vllm")
    if policy in ("graph", "eager"):
        flag = "--cuda-graph" if policy == "graph" else "--eager"
        return policy, f"forced by {flag}", "flag"
    if details and details.get("launch") in ("graph", "eager"):
        return details["launch"], str(details.get("launch_reason") or ""), "installed vLLM"
    if item.get("launch") in ("graph", "eager"):
        return item["launch"], str(item.get("launch_reason") or ""), "recorded rule"
    return "eager", "no CUDA-graph facts for this backend: timed eagerly", "default"


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
        self.preloaded_import_s = 0.0  # library imports done before "go" (see preload_libraries)
        self.extra_notes: list[str] = []  # added to every prepared row (e.g. the JIT pre-build)
        self._phases: dict[str, float] = {}

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
            # availability() imports the library (FlashInfer: 8.5 s, gpu-facts.md): reported apart;
            # most of it was usually paid before "go", while the previous backend was timing
            self.import_seconds = self.preloaded_import_s + (time.perf_counter() - started)
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
        started = time.perf_counter()
        row = self.base_row(item)
        self._phases = row["wall_breakdown_s"] = {}
        try:
            self._measure(item, row)
        except BaseException as exc:  # noqa: BLE001 -- the row records it; the worker goes on
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            row["status"] = R.STATUS_OOM if self.toolkit.is_out_of_memory(exc) else R.STATUS_ERROR
            row["error"] = _error_text(exc)
            row["traceback"] = traceback.format_exc(limit=6)[-2000:]
        finally:
            with self._phase("release_s"):
                try:
                    self.toolkit.release()
                except Exception:  # noqa: BLE001
                    pass
        row["row_wall_s"] = time.perf_counter() - started
        return row

    @contextlib.contextmanager
    def _phase(self, name: str):
        """Adds the wall seconds of the block to this row's breakdown (even when it raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._phases[name] = self._phases.get(name, 0.0) + (time.perf_counter() - started)

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
        with self._phase("library_import_s"):
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
        with self._phase("batch_s"):
            batch = self.toolkit.make_batch(workload, block_size, int(self.options.get("seed", 0)))
        started = time.perf_counter()
        with self._phase("prepare_s"):
            adapter, prepared = self._prepare(adapter, workload, block_size, batch, row)
        row["adapter"] = adapter.name
        # The adapter's plan + JIT/compile + first call, measured apart from run time.
        row["setup_s"] = getattr(prepared, "setup_seconds", None) or (time.perf_counter() - started)
        row["provider"] = getattr(prepared, "provider", None)
        row["notes"] = list(getattr(prepared, "notes", ()) or ()) + row.get("notes", []) + self.extra_notes
        details = getattr(prepared, "details", None) or None
        if details:
            row["provider_details"] = details
        if getattr(prepared, "kernel_block_size", None):
            row["kernel_block_size_used"] = prepared.kernel_block_size
        with self._phase("first_call_s"):
            row["first_call_s"] = self.toolkit.first_call_seconds(prepared)
        if item.get("check", True):
            if not self._check(prepared, batch, spec, block_size, row):
                return
        else:
            row["checked"] = False
        launch, why, source = choose_launch(self.options, item, details)
        row.update(launch=launch, launch_reason=why, launch_source=source)
        with self._phase("timing_s"):
            result = self.toolkit.time(adapter, prepared, batch, workload, block_size, self.options, launch=launch)
        row["timing"] = result.to_dict(with_samples=bool(self.options.get("keep_samples")))
        bytes_moved, flops = self.toolkit.figures(batch)
        row["bytes_moved"] = bytes_moved
        row["flops"] = flops
        row["bandwidth_bytes_per_s"] = T.bandwidth_bytes_per_s(bytes_moved, result.stats.median_ms)
        row["tflops"] = T.tflops(flops, result.stats.median_ms) if spec.kind != "decode" else None
        row["status"] = R.STATUS_OK

    def _prepare(self, adapter: Any, workload: Any, block_size: int, batch: Any, row: dict) -> tuple[Any, Any]:
        """adapter.prepare(batch); when an adapter that drives vLLM's classes cannot (it raises),
        the next usable provider of the backend runs the row instead, and the row says why."""
        try:
            return adapter, adapter.prepare(batch)
        except Exception as exc:  # noqa: BLE001
            if not getattr(adapter, "drives_vllm_classes", False):
                raise
            first_error = _error_text(exc)
        adapters = self.adapters()
        for fallback in adapters[adapters.index(adapter) + 1:]:
            if fallback.unsupported_reason(workload, block_size, getattr(self.toolkit, "device", "cuda")) is None:
                row.setdefault("notes", []).append(
                    f"vLLM's own {self.backend} classes could not be driven for this row ({first_error}); "
                    f"fell back to {fallback.name}")
                return fallback, fallback.prepare(batch)
        raise RuntimeError(f"vLLM's own {self.backend} classes could not be driven: {first_error}")

    def _check(self, prepared: Any, batch: Any, spec: WorkloadSpec, block_size: int, row: dict) -> bool:
        """Compares with the fp32 reference; False (and the row marked wrong) when it fails."""
        with self._phase("check_s"):
            err = float(self.toolkit.relative_error(prepared, batch))
        tol = tolerance_for(self.shape, self.options)
        row["rel_error"] = err
        row["tolerance"] = tol
        row["checked"] = True
        if err < tol:  # NaN and inf fail too
            return True
        row["status"] = R.STATUS_WRONG
        row["error"] = f"relative error {err:.3g} exceeds tolerance {tol:.3g} vs the fp32 reference"
        self._failed_check[block_size] = spec.label()
        return False


# ---------------------------------------------------------------------------------------------
# The real toolkit (torch + attention.kernels)


class KernelToolkit:
    """torch, CUDA events and the adapters of `attnsel.attention.kernels`."""

    def __init__(self) -> None:
        # Import only: no CUDA call here, so a pre-spawned worker can run this while another
        # worker is timing (bench/sweep.py); start_cuda() runs after the parent's "go".
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

    def adapters_for(self, backend: str) -> list:
        return list(self.registry.adapters_for(backend, device=getattr(self, "device", "cuda")))

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
        from attnsel.bench.gpu_timing import measure_first_call

        return measure_first_call(prepared.run)

    def relative_error(self, prepared: Any, batch: Any) -> float:
        if prepared.poison_output is not None:
            prepared.poison_output()  # a kernel that writes nothing must not pass on stale data
        prepared.run()
        self.torch.cuda.synchronize()
        ref = self.paged.reference_attention(batch)
        err = self.paged.relative_error(prepared.output(), ref)
        del ref
        return err

    def time(self, adapter: Any, prepared: Any, batch: Any, workload: Any, block_size: int, options: dict,
             launch: str = "eager") -> T.TimingResult:
        from attnsel.bench import gpu_timing as G

        kwargs = dict(
            timer=str(options.get("timer", "auto")), cold_l2=bool(options.get("cold_l2", True)),
            warmup_budget_ms=float(options.get("warmup_ms", T.WARMUP_BUDGET_MS)),
            repeat_budget_ms=float(options.get("repeat_ms", T.REPEAT_BUDGET_MS)),
            max_samples=int(options.get("max_samples", T.MAX_SAMPLES)),
        )
        if launch != "graph":
            return G.time_call(prepared.run, launch="eager", **kwargs)
        try:
            return G.time_call(prepared.run, launch="graph", **kwargs)
        except Exception as exc:  # noqa: BLE001 -- not every kernel is capture-safe; say so and fall back
            result = G.time_call(prepared.run, launch="eager", **kwargs)
            return dataclasses.replace(result, note=f"CUDA-graph capture failed ({_error_text(exc)}); timed eagerly")

    def figures(self, batch: Any) -> tuple[Optional[float], Optional[float]]:
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


def preload_libraries(toolkit: Any, backend: Optional[str]) -> float:
    """Runs the toolkit's `preload(backend)` (import the kernel libraries, no CUDA) and returns the
    seconds spent. A pre-spawned worker pays this (FLASH_ATTN/FA4 6.1 s, FLASHINFER 5.5 s on an
    H200) while the previous backend is timing."""
    started = time.perf_counter()
    preload = getattr(toolkit, "preload", None)
    if backend and preload is not None:
        preload(backend)
    return time.perf_counter() - started


def import_backend_libraries(adapters: list, backend: str) -> None:
    """Imports what `backend`'s adapters would import in availability()/prepare(), WITHOUT
    touching CUDA ourselves. An import that fails here fails again, with its reason, in
    availability(); nothing is decided here."""
    modules: list[str] = []
    for adapter in adapters:
        before_import = getattr(adapter, "before_import", None)
        if before_import is not None:
            before_import()  # e.g. FA4: turn its persistent compile cache on before it is imported
        module = getattr(adapter, "module", None)
        if isinstance(module, str):
            modules.append(module)
    modules += PRELOAD_MODULES.get(str(backend).upper(), ())
    for module in dict.fromkeys(modules):
        try:
            if importlib.util.find_spec(module.split(".")[0]) is not None:
                importlib.import_module(module)
        except Exception:  # noqa: BLE001 -- availability() reports it
            pass


class Prebuild:
    """One adapter's `prebuild(...)` hook, run in a background thread before "go".

    Best effort: whatever it raises is recorded, never re-raised. The hook gets the items'
    workloads and the shape; it must not touch CUDA (the previous backend is timing on the GPU)."""

    def __init__(self, adapter: Any, workloads: list[WorkloadSpec], shape: dict, request: dict):
        self.adapter = adapter
        self.workloads = workloads
        self.shape = shape
        self.request = request
        self.record: dict[str, Any] = {
            "adapter": getattr(adapter, "name", None),
            "previous_backend": request.get("previous_backend"),
            "modules": [], "built": 0, "cached": 0, "error": None, "finished": False,
        }
        self._thread = threading.Thread(target=self._run, name="attnsel-prebuild", daemon=True)
        self._started = 0.0
        self._ended: Optional[float] = None

    def start(self) -> "Prebuild":
        self._started = time.perf_counter()
        self.record["started_at"] = time.time()
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            shape = self.shape
            summary = self.adapter.prebuild(
                self.workloads, dtype=shape.get("dtype"), head_size=int(shape.get("head_size", 0)),
                num_q_heads=shape.get("num_q_heads"), num_kv_heads=shape.get("num_kv_heads"),
                kv_cache_dtype=shape.get("kv_cache_dtype", "auto"),
                capability=self.request.get("device_capability"),
            ) or {}
            for key in ("modules", "built", "cached", "requests"):
                if key in summary:
                    self.record[key] = summary[key]
            self.record["error"] = summary.get("error")
        except BaseException as exc:  # noqa: BLE001 -- best effort: plan() compiles as usual
            self.record["error"] = _error_text(exc)
        finally:
            self._ended = time.perf_counter()
            self.record["finished"] = True

    def finish(self, go_at: float, wait_s: float) -> dict:
        """Called at "go" (go_at: perf_counter then): waits up to wait_s for the build to end and
        returns the record: seconds it ran before "go" (hidden behind the previous backend) and
        seconds the worker waited for it after "go"."""
        self._thread.join(timeout=max(0.0, wait_s))
        now = time.perf_counter()
        end = self._ended if self._ended is not None else now
        self.record["seconds"] = end - self._started
        self.record["before_go_s"] = max(0.0, min(end, go_at) - self._started)
        self.record["waited_after_go_s"] = max(0.0, now - go_at)
        self.record["finished"] = self._ended is not None
        self.record["note"] = prebuild_note(self.record)
        return dict(self.record)


def prebuild_note(record: dict) -> Optional[str]:
    """The line each row of the backend carries about its JIT pre-build (None: it had nothing to do)."""
    if record.get("finished") and not (record.get("modules") or record.get("built") or record.get("error")):
        return None
    previous = record.get("previous_backend")
    when = f"while {previous} {'were' if ' and ' in str(previous) else 'was'} timed" if previous else "before go"
    built, cached = int(record.get("built") or 0), int(record.get("cached") or 0)
    if not record.get("finished"):
        return (f"JIT pre-build ({when}) still running after {record.get('waited_after_go_s', 0):.0f} s more "
                "after go; the first plan() waits for it")
    if record.get("error") and not built:
        return f"JIT pre-build failed ({record['error']}); modules compiled at first plan() as usual"
    text = f"JIT modules pre-built {when}: {record.get('before_go_s', 0):.1f} s ({built} modules)"
    if cached:
        text += f"; {cached} already in the cache"
    if record.get("waited_after_go_s", 0) >= 0.05:
        text += f"; waited {record['waited_after_go_s']:.1f} s more after go"
    if record.get("error"):
        text += f"; failed: {record['error']}"
    return text


def start_prebuild(toolkit: Any, job: dict) -> Optional[Prebuild]:
    """Starts the pre-build of `job`'s backend if the job asks for one (pre-spawned workers only)
    and the backend's preferred adapter has the optional hook (attention/kernels/base.py)."""
    request = job.get("prebuild")
    if not isinstance(request, dict) or job.get("action") != "run":
        return None
    try:
        adapters = toolkit.adapters_for(job["backend"])
    except Exception:  # noqa: BLE001 -- an unknown backend is reported by ItemRunner later
        return None
    # the preferred provider (the one ItemRunner picks when it is available), e.g. FlashInfer's
    # tensor-core adapter, not its CUDA-core comparison
    preferred = adapters[0] if adapters else None
    if not callable(getattr(preferred, "prebuild", None)):
        return None
    workloads = [WorkloadSpec.from_dict(item["workload"]) for item in job.get("items") or []]
    return Prebuild(preferred, workloads, job.get("shape") or {}, request).start()


def _wait_for_go(control: TextIO) -> bool:
    """Blocks until the parent writes "go" (True) or closes our stdin (False: not needed)."""
    while True:
        line = control.readline()
        if not line:
            return False
        if line.strip() == "go":
            return True


def serve(job: dict, stream: TextIO, control: Optional[TextIO] = None, started_at: Optional[float] = None) -> int:
    """Import stage (torch, adapters' libraries; no CUDA) -> "imported" -> wait for "go" on
    `control` -> CUDA init -> "ready" -> the items. `control` None means go at once."""
    startup: dict[str, Any] = {"pid": os.getpid()}
    spawned_at = job.get("spawned_at")
    started_at = started_at if started_at is not None else time.time()
    if isinstance(spawned_at, (int, float)):
        startup["interpreter_s"] = max(0.0, started_at - spawned_at)  # python + attnsel imports
    t0 = time.perf_counter()
    toolkit = load_toolkit(job.get("toolkit") or DEFAULT_TOOLKIT)
    startup["torch_import_s"] = time.perf_counter() - t0  # the toolkit module: torch + kernels package
    startup["library_import_s"] = preload_libraries(toolkit, job.get("backend"))
    # Some imports create a CUDA context themselves (flashinfer#4889: flashinfer.gemm with cuda.tile
    # installed); a pre-spawned worker then did so while another backend was timing: say so.
    is_initialized = getattr(toolkit, "cuda_initialized", None)
    startup["cuda_initialized_by_import"] = bool(is_initialized()) if is_initialized is not None else False
    startup["imported_at"] = time.time()
    prebuild = start_prebuild(toolkit, job)  # compile-only, in the background, before "go"
    _send(stream, {"type": "imported", "startup": dict(startup)})
    if control is not None:
        t_wait = time.perf_counter()
        if not _wait_for_go(control):
            return 0  # the parent did not need this worker (or is gone)
        startup["waited_s"] = time.perf_counter() - t_wait
    if prebuild is not None:
        wait_s = float(job["prebuild"].get("wait_s", DEFAULT_PREBUILD_WAIT_S))
        startup["prebuild"] = prebuild.finish(time.perf_counter(), wait_s)
    t1 = time.perf_counter()
    start_cuda = getattr(toolkit, "start_cuda", None)
    if start_cuda is not None:
        start_cuda()
    info = toolkit.device_info()
    startup["cuda_init_s"] = time.perf_counter() - t1
    startup["ready_at"] = time.time()
    _send(stream, {"type": "ready", "info": info, "startup": startup})
    if job.get("action") == "probe":
        _send(stream, {"type": "done"})
        return 0
    runner = ItemRunner(toolkit, job["backend"], job["shape"], job.get("options") or {})
    runner.preloaded_import_s = startup["library_import_s"]
    if startup.get("prebuild") and startup["prebuild"].get("note"):
        runner.extra_notes.append(startup["prebuild"]["note"])
    for item in job.get("items") or []:
        _send(stream, {"type": "start", "key": item["key"]})
        _send(stream, {"type": "row", "row": runner.run(item)})
    _send(stream, {"type": "done"})
    return 0


def main() -> int:
    started_at = time.time()
    stream = _protocol_stream()
    try:
        job = json.loads(sys.stdin.readline())
    except ValueError as exc:
        _send(stream, {"type": "fatal", "error": f"bad job: {exc}"})
        return 2
    try:
        return serve(job, stream, control=sys.stdin, started_at=started_at)
    except Exception as exc:  # noqa: BLE001 -- e.g. the toolkit could not start (no CUDA, import error)
        traceback.print_exc()
        _send(stream, {"type": "fatal", "error": _error_text(exc)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
