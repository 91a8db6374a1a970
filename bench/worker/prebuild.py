"""What a pre-spawned tune worker does before the parent says "go" (docs/tune-performance.md): import
its backend's libraries, and compile the JIT modules its rows will need (FlashInfer's nvcc builds)
in a background thread, CPU only, while the previous backend is timing on the GPU.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any, cast

from attnsel.bench.plan import WorkloadSpec

if TYPE_CHECKING:
    from attnsel.attention.kernels.base import PrebuildingAdapter
    from attnsel.bench.worker.toolkit import Toolkit

# How long a pre-spawned worker waits after "go" for its JIT pre-build (Prebuild) before it goes
# on anyway; the parent passes its own figure (below its startup timeout) in the job.
DEFAULT_PREBUILD_WAIT_S = 150.0

# Imported before "go" besides each adapter's own `module`: the libraries availability()/prepare()
# would import anyway (FlashInfer's adapter has no `module` attribute; FlexAttention's compile
# imports dynamo + inductor on its first row). Import only: none of these creates a CUDA context
# by itself.
PRELOAD_MODULES = {
    "FLASHINFER": ("flashinfer",),
    "TRITON_ATTN": ("triton",),
    "FLEX_ATTENTION": ("torch.nn.attention.flex_attention", "torch._dynamo", "torch._inductor.compile_fx"),
}


# What a backend's pre-build needs imported before it starts: its own library only. FlashInfer's
# hook (also under vLLM: attention/kernels/vllm/backend.py) builds with flashinfer's JIT specs, so it
# need not wait for `import vllm` (12.5 s of a 16 s worker import on an H100, 2026-11-25).
PREBUILD_LIBRARIES = {"FLASHINFER": ("flashinfer",)}


# pydantic's ValidationError opens with "1 validation error for ModelConfig"; the reason is the next line
# (vLLM's config checks raise it: "Value error, User-specified max_model_len (200000) is greater than ...")
_VALIDATION_HEADER = re.compile(r"^\w*ValidationError: \d+ validation errors? for \w+$")
_PYDANTIC_TAIL = re.compile(r"\s*\[type=[^\]]*(\]|$).*$")


def error_text(exc: BaseException) -> str:
    """One line, at most 500 characters: what a row or record says about an exception."""
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = text.splitlines() or [type(exc).__name__]
    first = lines[0]
    if _VALIDATION_HEADER.match(first) and len(lines) > 1:
        first = f"{first}: {_PYDANTIC_TAIL.sub('', lines[1].strip())}"
    return first[:500]


def preload_libraries(toolkit: Toolkit, backend: str | None) -> float:
    """Runs the toolkit's `preload(backend)` (import the kernel libraries, no CUDA) and returns the
    seconds spent. A pre-spawned worker pays this (FLASH_ATTN/FA4 6.1 s, FLASHINFER 5.5 s on an
    H200) while the previous backend is timing."""
    started = time.perf_counter()
    preload = getattr(toolkit, "preload", None)
    if backend and preload is not None:
        preload(backend)
    return time.perf_counter() - started


def import_prebuild_library(job: dict) -> float:
    """Imports, in the worker's main thread, the library the job's pre-build needs (PREBUILD_LIBRARIES)
    so that the build can start before the rest of the backend's imports; returns the seconds spent.
    Main thread first: the build thread then finds the package imported, and the later `import vllm`
    (which imports flashinfer's modules too) does not race it for the package's import locks."""
    started = time.perf_counter()
    if isinstance(job.get("prebuild"), dict) and job.get("action") == "run":
        # What `import vllm` sets first (vllm/env_override.py) and flashinfer used to find set: its
        # torch.cuda.is_available() calls then ask NVML instead of initialising the CUDA driver.
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        for module in PREBUILD_LIBRARIES.get(str(job.get("backend")).upper(), ()):
            try:
                if importlib.util.find_spec(module.split(".")[0]) is not None:
                    importlib.import_module(module)
            except Exception:  # noqa: BLE001 -- the hook records it, availability() reports it
                pass
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
        preload_modules = getattr(adapter, "preload_modules", None)
        if callable(preload_modules):
            try:
                modules += list(preload_modules())  # e.g. vLLM: its config, layer and backend modules (~18 s)
            except Exception:  # noqa: BLE001 -- availability() reports it
                pass
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

    def __init__(self, adapter: PrebuildingAdapter, workloads: list[WorkloadSpec], shape: dict, request: dict):
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
        self._ended: float | None = None

    def start(self) -> Prebuild:
        self._started = time.perf_counter()
        self.record["started_at"] = time.time()
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            shape = self.shape
            summary = self.adapter.prebuild(
                self.workloads, dtype=shape["dtype"], head_size=int(shape.get("head_size", 0)),
                num_q_heads=shape.get("num_q_heads"), num_kv_heads=shape.get("num_kv_heads"),
                kv_cache_dtype=shape.get("kv_cache_dtype", "auto"),
                capability=self.request.get("device_capability"),
            ) or {}
            for key in ("modules", "built", "cached", "requests"):
                if key in summary:
                    self.record[key] = summary[key]
            self.record["error"] = summary.get("error")
        except BaseException as exc:  # noqa: BLE001 -- best effort: plan() compiles as usual
            self.record["error"] = error_text(exc)
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


def prebuild_note(record: dict) -> str | None:
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


def start_prebuild(toolkit: Toolkit, job: dict) -> Prebuild | None:
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
    hook = cast("PrebuildingAdapter", preferred)  # it has the optional hook
    workloads = [WorkloadSpec.from_dict(item["workload"]) for item in job.get("items") or []]
    return Prebuild(hook, workloads, job.get("shape") or {}, request).start()
