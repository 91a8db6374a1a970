"""The child process that runs one backend's kernels: `python -m attnsel.bench.worker.main`.

Why a child process: a kernel library can segfault, abort, hang in a JIT compiler or leave the
CUDA context unusable after an OOM. The parent (`bench/sweep/run.py`, torch-free) starts one worker
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
"wait_s"}: once torch and the build's own library are imported (not vLLM) it calls the backend's
first adapter's optional `prebuild(...)` hook in a background thread (compile the JIT modules
these items will need, e.g. FlashInfer's nvcc builds, into the library's disk cache: CPU only, no
CUDA), while its other imports run and the previous backend is still timing. At "go" it waits up to wait_s for that build to end (the first plan() would have
to compile the same modules anyway), and reports it in "ready"'s startup["prebuild"] and in each
row's notes. A failing pre-build changes nothing else: plan() then compiles as it always did.
    {"type": "ready", "info": {...device and library versions...}, "startup": {... cuda_init_s}}
    {"type": "precompiled", "precompile": {...}}  once, before the first item, if the backend's adapter
                                       compiles Triton kernels ahead (bench/worker/precompile.py)
    {"type": "start", "key": ...}      before each item (the parent's timeout clock starts here)
    {"type": "row", "row": {...}}      after each item
    {"type": "done"}
Anything a library prints (JIT logs) goes to stderr: fd 1 is pointed at fd 2 once the protocol
stream has its own copy, so stray prints cannot corrupt the protocol.

The toolkit is the worker's boundary to torch and the kernel adapters (bench/worker/toolkit.py);
bench/worker/items.py measures the items. Nothing this module imports loads torch or touches CUDA:
the toolkit brings torch in the import stage, and CUDA starts only after "go".
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, TextIO

from attnsel.bench.worker.items import ItemRunner
from attnsel.bench.worker.prebuild import (
    DEFAULT_PREBUILD_WAIT_S,
    Prebuild,
    error_text,
    import_prebuild_library,
    preload_libraries,
    start_prebuild,
)
from attnsel.bench.worker.precompile import precompile_rows
from attnsel.bench.worker.toolkit import DEFAULT_TOOLKIT, Toolkit, load_toolkit


def _protocol_stream() -> TextIO:
    """A private copy of stdout for the protocol; fd 1 then goes to stderr (see module doc)."""
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8")


def _send(stream: TextIO, message: dict) -> None:
    stream.write(json.dumps(message, default=str) + "\n")
    stream.flush()


def _wait_for_go(control: TextIO) -> bool:
    """Blocks until the parent writes "go" (True) or closes our stdin (False: not needed)."""
    while True:
        line = control.readline()
        if not line:
            return False
        if line.strip() == "go":
            return True



def serve(job: dict, stream: TextIO, control: TextIO | None = None, started_at: float | None = None) -> int:
    """Import stage (torch, adapters' libraries; no CUDA) -> "imported" -> wait for "go" on
    `control` -> CUDA init -> "ready" -> the items. `control` None means go at once."""
    toolkit, startup, prebuild = _import_stage(job, started_at)
    _send(stream, {"type": "imported", "startup": dict(startup)})
    if control is not None:
        t_wait = time.perf_counter()
        if not _wait_for_go(control):
            return 0  # the parent did not need this worker (or is gone)
        startup["waited_s"] = time.perf_counter() - t_wait
    if prebuild is not None:
        wait_s = float(job["prebuild"].get("wait_s", DEFAULT_PREBUILD_WAIT_S))
        startup["prebuild"] = prebuild.finish(time.perf_counter(), wait_s)
    info = _start_cuda(toolkit, startup)
    _send(stream, {"type": "ready", "info": info, "startup": startup})
    if job.get("action") != "probe":
        _run_items(toolkit, job, startup, stream)
    _send(stream, {"type": "done"})
    return 0


def _import_stage(job: dict, started_at: float | None) -> tuple[Toolkit, dict[str, Any], Prebuild | None]:
    """Loads the toolkit (torch, the kernels package) and the backend's libraries, and starts the
    JIT pre-build in the background: everything a worker can do before "go" without CUDA."""
    startup: dict[str, Any] = {"pid": os.getpid()}
    spawned_at = job.get("spawned_at")
    started_at = started_at if started_at is not None else time.time()
    if isinstance(spawned_at, (int, float)):
        startup["interpreter_s"] = max(0.0, started_at - spawned_at)  # python + attnsel imports
    t0 = time.perf_counter()
    toolkit = load_toolkit(job.get("toolkit") or DEFAULT_TOOLKIT)
    startup["torch_import_s"] = time.perf_counter() - t0  # the toolkit module: torch + kernels package
    # The JIT pre-build starts as soon as its own library is imported, before the backend's other
    # imports (vLLM's): cold, that build is the sweep's critical path (docs/tune-performance.md, change 8).
    prebuild_import_s = import_prebuild_library(job)
    prebuild = start_prebuild(toolkit, job)  # compile-only, in the background, before "go"
    startup["library_import_s"] = prebuild_import_s + preload_libraries(toolkit, job.get("backend"))
    # Some imports create a CUDA context themselves (flashinfer#4889: flashinfer.gemm with cuda.tile
    # installed); a pre-spawned worker then did so while another backend was timing: say so.
    is_initialized = getattr(toolkit, "cuda_initialized", None)
    startup["cuda_initialized_by_import"] = bool(is_initialized()) if is_initialized is not None else False
    startup["imported_at"] = time.time()
    return toolkit, startup, prebuild


def _start_cuda(toolkit: Toolkit, startup: dict[str, Any]) -> dict:
    """After "go": the CUDA context, then the device facts the "ready" message carries."""
    t1 = time.perf_counter()
    start_cuda = getattr(toolkit, "start_cuda", None)
    if start_cuda is not None:
        start_cuda()
    info = toolkit.device_info()
    startup["cuda_init_s"] = time.perf_counter() - t1
    startup["ready_at"] = time.time()
    return info


def _run_items(toolkit: Toolkit, job: dict, startup: dict[str, Any], stream: TextIO) -> None:
    runner = ItemRunner(toolkit, job["backend"], job["shape"], job.get("options") or {})
    runner.preloaded_import_s = startup["library_import_s"]
    if startup.get("prebuild") and startup["prebuild"].get("note"):
        runner.extra_notes.append(startup["prebuild"]["note"])
    precompiled = precompile_rows(runner, job.get("items") or [])  # Triton JIT, in parallel, before the rows
    if precompiled is not None:
        _send(stream, {"type": "precompiled", "precompile": precompiled})
        runner.extra_notes.append(precompiled["note"])
    for item in job.get("items") or []:
        _send(stream, {"type": "start", "key": item["key"]})
        _send(stream, {"type": "row", "row": runner.run(item)})


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
        _send(stream, {"type": "fatal", "error": error_text(exc)})
        return 1


def exit_now(code: int) -> None:
    """Ends the worker without Python's teardown: every result is sent and flushed, and what is left
    (atexit hooks of vLLM / torch.compile thread pools, module GC) only delays the next backend,
    whose turn starts when this process is gone (on an H100, 2.6-3.5 s of "other" per backend)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
