"""Runs a tune plan: one worker process per backend, timeouts, incremental results, resume.

The parent stays torch-free. Each backend's rows run in `python -m attnsel.bench.worker` (a new
session, so a timeout kills the worker and any compiler processes it started). What can go wrong
in a kernel library, and what the sweep records:
  * the kernel raises              -> the worker records `error` (or `oom`) and goes on;
  * the worker hangs (JIT, deadlock) -> after `item_timeout_s` the parent kills it, records
                                       `timeout` for that row and starts a fresh worker for the rest;
  * the worker dies (segfault, abort) -> `crashed` with the signal and the tail of its stderr,
                                       then a fresh worker for the rest;
  * the worker cannot start         -> every row of that backend gets `error` with the reason.
A (backend, block size) that hung once or crashed twice is not tried on its remaining shapes
(they are recorded as not run, with the reason): a hang costs a full timeout and a crash a worker
restart each time. After `max_restarts` deaths in one backend its remaining rows are not run.
Every row is appended to results.jsonl as soon as it arrives (bench/results.py).

Pre-spawning (bench/TUNE_PERF.md): while backend N runs, the workers of backends N+1 and N+2
(PRESPAWN_AHEAD) are already started;
it imports torch and its kernel library, then waits for "go" before it touches CUDA. It keeps the
same isolation (own session, startup timeout, crash detection); one that dies before "ready" is
replaced by a fresh worker once. It also compiles its backend's JIT modules meanwhile (FlashInfer's
nvcc builds: CPU only, no CUDA context), if its adapter has the optional `prebuild` hook; at "go"
it waits for that build (which its first plan() would have run anyway). Fresh (not pre-spawned)
workers never pre-build.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from attnsel.bench import results as R
from attnsel.bench import timing as T
from attnsel.bench.plan import Plan, WorkloadSpec
from attnsel.bench.worker import DEFAULT_TOOLKIT, mode_label
from attnsel.errors import EnvironmentProblem

DEFAULT_ITEM_TIMEOUT_S = 180.0  # one row incl. a first-call JIT (FlashInfer decode: 12.4 s, gpu-facts.md)
DEFAULT_STARTUP_TIMEOUT_S = 240.0  # import torch + the kernel library (flashinfer: 8.5 s)
DEFAULT_MAX_RESTARTS = 8
CONFIG_CRASH_LIMIT = 2  # crashes of one (backend, block size) before its other shapes are skipped
CONFIG_TIMEOUT_LIMIT = 1
CHECK_POLICIES = ("first", "all", "none")
# Backends run in this order so that each pre-spawned worker's library import hides behind the
# previous backend's rows. FLEX_ATTENTION goes first: it imports only torch (dynamo/inductor,
# 7.6 s on an H100), while `import vllm` (18.9 s there) for the three vLLM-driven workers then
# overlaps its rows. FLASHINFER comes last: its worker starts with the sweep and compiles its JIT
# modules (~100 s of nvcc, cold) while all the others time; in third place ~97 s of its build
# stayed exposed on an H100 (issue "tune measures what vLLM really runs"). Each backend has its
# own process, so the order changes no measurement.
STARTUP_ORDER = ("FLEX_ATTENTION", "TRITON_ATTN", "FLASH_ATTN", "FLASHINFER")
# Backends whose worker is pre-spawned when the sweep starts, whatever their place in the order:
# their pre-build (JIT compile, CPU only) then overlaps every backend before them.
EARLY_PREBUILD_BACKENDS = ("FLASHINFER",)
# How many backends ahead workers are pre-spawned. Two: FLASHINFER's worker then starts with the
# sweep and compiles its JIT modules (103 s of nvcc on a cold H200, 2026-11-21) while TRITON_ATTN
# (38 s) and FLASH_ATTN (26 s) run, instead of during FLASH_ATTN only, most of which its own
# 12 s import would use up. A waiting worker holds no CUDA context, only host memory.
PRESPAWN_AHEAD = 2


@dataclass
class SweepOptions:
    # How each row's call is launched: "vllm" (graph replay where vLLM captures the batch in a full
    # CUDA graph, eager elsewhere), or forced "graph" (--cuda-graph) / "eager" (--eager).
    launch: str = "vllm"
    timer: str = "auto"  # "auto" (CUPTI where cupti-python works, else CUDA events) | "cupti" | "events"
    cold_l2: bool = True
    warmup_ms: float = T.WARMUP_BUDGET_MS
    repeat_ms: float = T.REPEAT_BUDGET_MS
    max_samples: int = T.MAX_SAMPLES
    check: str = "first"  # which rows are checked against the fp32 reference
    tolerance: Optional[float] = None
    seed: int = 0
    keep_samples: bool = False
    item_timeout_s: float = DEFAULT_ITEM_TIMEOUT_S
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    max_restarts: int = DEFAULT_MAX_RESTARTS
    # Start backend N+1's worker (imports only, no CUDA) while backend N runs; ATTNSEL_TUNE_PRESPAWN=0
    # turns it off (to measure what it saves, or if a library's import ever disturbs a timing).
    prespawn: bool = field(default_factory=lambda: os.environ.get("ATTNSEL_TUNE_PRESPAWN", "1") != "0")
    # A pre-spawned worker also compiles its backend's JIT modules (FlashInfer: nvcc) before "go",
    # while the previous backend times; ATTNSEL_TUNE_PREBUILD=0 turns only that off. No prespawn,
    # no pre-build.
    prebuild: bool = field(default_factory=lambda: os.environ.get("ATTNSEL_TUNE_PREBUILD", "1") != "0")
    # The worker's boundary to torch + kernels; ATTNSEL_TUNE_TOOLKIT swaps in a fake (CI only).
    toolkit: str = field(default_factory=lambda: os.environ.get("ATTNSEL_TUNE_TOOLKIT") or DEFAULT_TOOLKIT)

    def worker_options(self) -> dict:
        return {
            "launch": self.launch, "timer": self.timer, "cold_l2": self.cold_l2, "warmup_ms": self.warmup_ms, "repeat_ms": self.repeat_ms,
            "max_samples": self.max_samples, "tolerance": self.tolerance, "seed": self.seed,
            "keep_samples": self.keep_samples,
        }

    def to_dict(self) -> dict:
        d = self.worker_options()
        d.update(check=self.check, item_timeout_s=self.item_timeout_s, startup_timeout_s=self.startup_timeout_s,
                 prespawn=self.prespawn, prebuild=self.prespawn and self.prebuild)
        return d


# ---------------------------------------------------------------------------------------------
# Items


def items_for(plan: Plan, options: SweepOptions, skip_keys: set[str] = frozenset()) -> dict[str, list[dict]]:
    """Rows to time, grouped by backend; `check` marks rows compared with the fp32 reference
    ("first": the smallest shape of each workload kind per block size -- the reference on a
    256 x 16k decode batch would cost more than the sweep)."""
    mode = mode_label(options.worker_options())
    shape = plan.shape
    smallest = {}
    for w in plan.workloads:
        if w.kind not in smallest or w.kv_tokens < smallest[w.kind].kv_tokens:
            smallest[w.kind] = w
    groups: dict[str, list[dict]] = {}
    for config in plan.runnable_configs:
        for w in plan.workloads:
            key = R.row_key(config.backend, config.block_size, w.label(), shape.dtype, shape.kv_cache_dtype, mode)
            if key in skip_keys:
                continue
            check = options.check == "all" or (options.check == "first" and w == smallest[w.kind])
            launch, why = plan.launch(config.backend, w)
            groups.setdefault(config.backend, []).append({
                "key": key,
                "block_size": config.block_size,
                "kernel_block_size": config.kernel_block_size,
                "workload": w.to_dict(),
                "check": check,
                "launch": launch,
                "launch_reason": why,
            })
    return groups


def skipped_rows(plan: Plan, options: SweepOptions) -> list[dict]:
    """One row per vLLM-refused (backend, block size) x shape: listed with vLLM's reasons, never timed."""
    mode = mode_label(options.worker_options())
    shape = plan.shape
    rows = []
    for config in plan.skipped_configs:
        for w in plan.workloads:
            rows.append({
                "key": R.row_key(config.backend, config.block_size, w.label(), shape.dtype, shape.kv_cache_dtype, mode),
                "backend": config.backend, "block_size": config.block_size, "kernel_block_size": None,
                "workload": w.to_dict(), "workload_label": w.label(), "kind": w.kind,
                "dtype": shape.dtype, "kv_cache_dtype": shape.kv_cache_dtype, "mode": mode,
                "status": R.STATUS_SKIPPED_BY_VLLM, "error": "; ".join(config.reasons),
                "vllm_reasons": list(config.reasons),
            })
    return rows


def failure_row(item: dict, backend: str, shape: dict, options: SweepOptions, status: str, error: str) -> dict:
    w = WorkloadSpec.from_dict(item["workload"])
    return {
        "key": item["key"], "backend": backend, "block_size": item["block_size"],
        "kernel_block_size": item.get("kernel_block_size"), "workload": w.to_dict(), "workload_label": w.label(),
        "kind": w.kind, "dtype": shape.get("dtype"), "kv_cache_dtype": shape.get("kv_cache_dtype", "auto"),
        "mode": mode_label(options.worker_options()), "status": status, "error": error,
    }


# ---------------------------------------------------------------------------------------------
# One worker process


def _describe_exit(returncode: Optional[int]) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _tail(path: Path, start: int, limit: int = 600) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").strip()
    return text[-limit:]


class WorkerProcess:
    """One `python -m attnsel.bench.worker` child: send a job, read protocol lines with timeouts."""

    def __init__(self, job: dict, log_path: Path, *, prespawned: bool = False):
        self.log_path = log_path
        self.prespawned = prespawned
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        self.log_start = self._log.tell()
        self.spawned_at = time.time()
        self.go_at: Optional[float] = None
        self.imported: Optional[dict] = None  # the worker's "imported" startup figures
        self.imported_seen_at: Optional[float] = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnsel.bench.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            start_new_session=True,  # its own process group: a timeout kills compiler children too
        )
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._write(json.dumps({**job, "spawned_at": self.spawned_at}) + "\n")

    def _write(self, text: str) -> None:
        try:
            self.proc.stdin.write(text.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # it died (or stdin is closed); the reader sees EOF

    def go(self) -> None:
        """Lets the worker touch CUDA and start its items (it waits for this after importing)."""
        if self.go_at is None:
            self.go_at = time.time()
            self._write("go\n")
            self._close_stdin()

    def _close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self._lines.put(raw.decode("utf-8", errors="replace"))
        self._lines.put(None)

    def next_message(self, timeout_s: float) -> Optional[dict]:
        """The next protocol message; None at EOF; raises queue.Empty on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise queue.Empty
            line = self._lines.get(timeout=remaining)
            if line is None:
                return None
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "type" in message:
                return message

    def kill(self) -> None:
        self._close_stdin()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group of the child we started
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.wait()

    def wait(self) -> Optional[int]:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def stderr_tail(self) -> str:
        return _tail(self.log_path, self.log_start)


@dataclass
class GroupOutcome:
    rows: list[dict] = field(default_factory=list)
    info: Optional[dict] = None
    restarts: int = 0
    started_at: Optional[float] = None  # wall clock (time.time) when the group began / ended
    ended_at: Optional[float] = None
    workers: list[dict] = field(default_factory=list)  # one startup record per worker process
    prespawn_failures: int = 0  # pre-spawned workers that died before "ready" (replaced by a fresh one)

    @property
    def wall_s(self) -> Optional[float]:
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at


def worker_record(worker: "WorkerProcess", ready_startup: Optional[dict], ready_at: Optional[float],
                  group_started_at: float) -> dict:
    """Startup of one worker, as the parent saw it (wall clock) and as the worker measured it.
    `exposed_s` is what the sweep waited for: from max(go, group start) to "ready"; a pre-spawned
    worker's import before that was hidden behind the previous backend (`overlapped_s`)."""
    figures = dict(ready_startup or worker.imported or {})
    go_at = worker.go_at or group_started_at
    begin = max(go_at, group_started_at)
    imported_at = figures.get("imported_at")
    record = {
        "pid": worker.proc.pid,
        "prespawned": worker.prespawned,
        "spawned_at": worker.spawned_at,
        "imported_at": imported_at,
        "go_at": worker.go_at,
        "ready_at": ready_at,
        "startup_s": (ready_at - worker.spawned_at) if ready_at else None,
        "exposed_s": (ready_at - begin) if ready_at else None,
        "overlapped_s": max(0.0, min(imported_at or begin, begin) - worker.spawned_at) if worker.prespawned else 0.0,
    }
    for key in ("interpreter_s", "torch_import_s", "library_import_s", "waited_s", "cuda_init_s",
                "cuda_initialized_by_import", "prebuild"):
        record[key] = figures.get(key)
    return record


def group_job(backend: str, items: list[dict], shape: dict, options: SweepOptions) -> dict:
    return {"action": "run", "toolkit": options.toolkit, "backend": backend, "shape": shape,
            "options": options.worker_options(), "items": items}


def prebuild_wait_s(options: SweepOptions) -> float:
    """How long a pre-spawned worker may wait after "go" for its JIT pre-build: the build it waits
    for is one its first plan() would have run anyway, but it must answer "ready" within the
    startup timeout, with room for the CUDA init."""
    return max(0.0, options.startup_timeout_s - min(60.0, options.startup_timeout_s / 4))


def prespawn_worker(backend: str, items: list[dict], shape: dict, options: SweepOptions,
                    log_path: Path, *, previous_backend: Optional[str] = None,
                    capability: Optional[tuple[int, int]] = None) -> "WorkerProcess":
    """A worker that imports torch + `backend`'s library now and waits for go() before CUDA;
    meanwhile it compiles the JIT modules its items need, if its adapter can (options.prebuild)."""
    job = group_job(backend, items, shape, options)
    if options.prebuild:
        job["prebuild"] = {"previous_backend": previous_backend,
                           "device_capability": list(capability) if capability else None,
                           "wait_s": prebuild_wait_s(options)}
    return WorkerProcess(job, log_path, prespawned=True)


def run_backend_group(
    backend: str,
    items: list[dict],
    shape: dict,
    options: SweepOptions,
    log_path: Path,
    on_row: Callable[[dict], None],
    on_start: Optional[Callable[[dict], None]] = None,
    on_info: Optional[Callable[[dict], None]] = None,
    worker: Optional["WorkerProcess"] = None,
) -> GroupOutcome:
    """All items of one backend, restarting the worker after a timeout or a crash. `worker`: one
    pre-spawned for exactly these items (prespawn_worker); it is used first, then replaced as usual."""
    return _GroupRun(backend, items, shape, options, log_path, on_row, on_start, on_info, worker).run()


class _GroupRun:
    def __init__(self, backend, items, shape, options, log_path, on_row, on_start, on_info, worker=None):
        self.backend, self.shape, self.options, self.log_path = backend, shape, options, log_path
        self.on_row, self.on_start, self.on_info = on_row, on_start, on_info
        self.pending: list[dict] = list(items)
        self.by_key = {item["key"]: item for item in items}
        self.outcome = GroupOutcome()
        self.failures: dict[tuple[int, str], int] = {}  # (block size, status) -> count
        self.prespawned = worker
        self.retry_startup = False  # set by drive(): a pre-spawned worker died before "ready"

    def emit(self, row: dict) -> None:
        self.outcome.rows.append(row)
        self.on_row(row)

    def fail(self, item: dict, status: str, error: str) -> None:
        self.emit(failure_row(item, self.backend, self.shape, self.options, status, error))
        self.pending = [i for i in self.pending if i["key"] != item["key"]]

    def fail_all(self, status: str, error: str) -> None:
        for item in list(self.pending):
            self.fail(item, status, error)

    def run(self) -> GroupOutcome:
        self.outcome.started_at = time.time()
        try:
            self._run()
        finally:
            self.outcome.ended_at = time.time()
        return self.outcome

    def _run(self) -> None:
        deaths = 0
        while self.pending:
            worker, self.prespawned = self.prespawned, None
            if worker is None:
                worker = WorkerProcess(group_job(self.backend, self.pending, self.shape, self.options), self.log_path)
            self.retry_startup = False
            try:
                finished = self.drive(worker)
            except BaseException:
                worker.kill()  # Ctrl-C or a bug in the parent: never leave a worker running on the GPU
                raise
            if finished or not self.pending:
                break
            if self.retry_startup:
                # The pre-spawned worker died while importing/waiting: start a fresh one, once,
                # the way this backend would have started without pre-spawning.
                self.outcome.prespawn_failures += 1
                continue
            deaths += 1
            self.outcome.restarts = deaths
            if deaths > self.options.max_restarts:
                self.fail_all(R.STATUS_CRASHED, f"not run: the {self.backend} worker failed {deaths} times")

    def give_up_on_config(self, failed: dict, status: str) -> None:
        """After a hang or repeated crashes, record the config's other shapes as not run."""
        bs = failed["block_size"]
        count = self.failures[(bs, status)] = self.failures.get((bs, status), 0) + 1
        limit = CONFIG_TIMEOUT_LIMIT if status == R.STATUS_TIMEOUT else CONFIG_CRASH_LIMIT
        if count < limit:
            return
        label = WorkloadSpec.from_dict(failed["workload"]).label()
        what = "timed out" if status == R.STATUS_TIMEOUT else f"crashed the worker {count} times"
        for other in [i for i in self.pending if i["block_size"] == bs]:
            self.fail(other, status, f"not run: {self.backend} --block-size {bs} {what} (last on {label})")

    def drive(self, worker: WorkerProcess) -> bool:
        """Read one worker's messages until it finishes (True), dies or hangs (False)."""
        ready = False
        current: Optional[dict] = None
        worker.go()
        record_index = len(self.outcome.workers)
        self.outcome.workers.append(worker_record(worker, None, None, self.outcome.started_at))
        while True:
            limit = self.options.item_timeout_s if ready else self.options.startup_timeout_s
            try:
                message = worker.next_message(limit)
            except queue.Empty:
                worker.kill()
                if current is not None:
                    self.fail(current, R.STATUS_TIMEOUT, f"no result within {limit:g} s; the worker was killed")
                    self.give_up_on_config(current, R.STATUS_TIMEOUT)
                else:
                    what = "did not start" if not ready else "stopped answering"
                    self.fail_all(R.STATUS_TIMEOUT, f"worker {what} within {limit:g} s")
                return False
            if message is None:  # EOF: the worker died (segfault, abort) or exited early
                how = _describe_exit(worker.wait())
                tail = worker.stderr_tail()
                detail = f"worker {how}" + (f"; stderr: {tail[-300:]}" if tail else "")
                if current is not None:
                    self.fail(current, R.STATUS_CRASHED, detail)
                    self.give_up_on_config(current, R.STATUS_CRASHED)
                elif not ready:
                    if worker.prespawned and not self.outcome.prespawn_failures:
                        self.outcome.workers[record_index]["error"] = detail
                        self.retry_startup = True
                        return False
                    self.fail_all(R.STATUS_ERROR, detail)
                return False
            kind = message["type"]
            if kind == "imported":
                worker.imported = message.get("startup") or {}
                worker.imported_seen_at = time.time()
            elif kind == "ready":
                ready = True
                self.outcome.workers[record_index] = worker_record(worker, message.get("startup"), time.time(),
                                                                   self.outcome.started_at)
                self.outcome.info = message.get("info")
                if self.on_info and self.outcome.info:
                    self.on_info(self.outcome.info)
            elif kind == "start":
                current = self.by_key.get(message.get("key"))
                if self.on_start and current is not None:
                    self.on_start(current)
            elif kind == "row":
                row = message["row"]
                self.emit(row)
                self.pending = [i for i in self.pending if i["key"] != row.get("key")]
                current = None
            elif kind == "fatal":
                worker.wait()
                self.fail_all(R.STATUS_ERROR, f"worker could not start: {message.get('error')}")
                return False
            elif kind == "done":
                worker.wait()
                self.fail_all(R.STATUS_ERROR, "the worker finished without a result for this row")
                return True


def probe_device(toolkit: str = DEFAULT_TOOLKIT, timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
                 log_path: Optional[Path] = None) -> dict:
    """Device facts as the worker's torch sees them (name, capability, L2, versions)."""
    import tempfile

    log = log_path or Path(tempfile.gettempdir()) / f"attnsel-tune-probe-{os.getpid()}.log"
    worker = WorkerProcess({"action": "probe", "toolkit": toolkit}, log)
    worker.go()
    try:
        return _read_probe(worker, timeout_s)
    finally:
        worker.kill()  # a no-op once it exited; closes the log
        if log_path is None:
            log.unlink(missing_ok=True)


def _read_probe(worker: WorkerProcess, timeout_s: float) -> dict:
    info = None
    try:
        while True:
            message = worker.next_message(timeout_s)
            if message is None or message["type"] == "done":
                break
            if message["type"] == "ready":
                info = message.get("info")
            elif message["type"] == "fatal":
                raise EnvironmentProblem(f"tune needs torch with CUDA and attnsel's kernel adapters: {message.get('error')}")
    except queue.Empty:
        raise EnvironmentProblem(f"the GPU probe did not answer within {timeout_s:g} s") from None
    worker.wait()  # it exits by itself after "done"
    if info is None:
        raise EnvironmentProblem(f"the GPU probe failed: {worker.stderr_tail()[-300:] or 'no output'}")
    return info


# ---------------------------------------------------------------------------------------------
# The whole sweep


@dataclass
class SweepProgress:
    """Callbacks the CLI uses to draw its progress bar (all optional)."""

    on_total: Callable[[int], None] = lambda total: None
    on_start: Callable[[dict], None] = lambda item: None
    on_row: Callable[[dict], None] = lambda row: None
    on_backend: Callable[[str, int], None] = lambda backend, count: None


def run_sweep(
    plan: Plan,
    options: SweepOptions,
    output_dir: Path,
    *,
    resume: bool = False,
    retry_failed: bool = False,
    progress: Optional[SweepProgress] = None,
    enrich: Callable[[dict], dict] = lambda row: row,
    outcomes: Optional[dict[str, GroupOutcome]] = None,
) -> tuple[list[dict], dict[str, dict]]:
    """Run every planned row not already in results.jsonl; return (all rows, worker info by backend).
    `enrich` adds parent-side figures (% of peak bandwidth) before a row is written; `outcomes`
    (if given) receives each backend's GroupOutcome (startup records, wall times) for the phases.
    While backend N runs, the workers of the next PRESPAWN_AHEAD backends are already importing
    (and pre-building JIT modules) (options.prespawn)."""
    progress = progress or SweepProgress()
    path = Path(output_dir) / R.RESULTS_FILE
    existing = R.read_rows(path) if resume else []
    done = R.keys_to_skip_on_resume(existing, retry_failed=retry_failed)
    groups = items_for(plan, options, done)
    progress.on_total(sum(len(v) for v in groups.values()))
    infos: dict[str, dict] = {}
    shape = plan.shape.to_dict()
    with R.ResultsWriter(path) as writer:
        for row in skipped_rows(plan, options):
            if row["key"] not in done:
                writer.write(row)
        order = sorted(groups.items(), key=lambda kv: STARTUP_ORDER.index(kv[0]) if kv[0] in STARTUP_ORDER
                       else len(STARTUP_ORDER))
        log_for = {backend: Path(output_dir) / f"worker-{backend}.log" for backend, _ in order}
        waiting: dict[int, WorkerProcess] = {}  # pre-spawned workers by position in `order`
        try:
            for i, (backend, items) in enumerate(order):
                progress.on_backend(backend, len(items))
                worker = waiting.pop(i, None)
                if options.prespawn:
                    early = [j for j in range(i + 1, len(order)) if order[j][0] in EARLY_PREBUILD_BACKENDS
                             and options.prebuild]
                    for j in sorted(set(range(i + 1, min(len(order), i + 1 + PRESPAWN_AHEAD))) | set(early)):
                        if j not in waiting:
                            following, following_items = order[j]
                            waiting[j] = prespawn_worker(
                                following, following_items, shape, options, log_for[following],
                                previous_backend=" and ".join(b for b, _ in order[i:j]), capability=plan.capability)

                def on_row(row: dict) -> None:
                    row = enrich(row)
                    writer.write(row)
                    progress.on_row(row)

                outcome = run_backend_group(
                    backend, items, shape, options, log_for[backend],
                    on_row=on_row, on_start=progress.on_start, worker=worker,
                )
                if outcome.info:
                    infos[backend] = outcome.info
                if outcomes is not None:
                    outcomes[backend] = outcome
        finally:
            for waiting_worker in waiting.values():
                waiting_worker.kill()  # Ctrl-C or an error: a pre-spawned worker must not outlive us
    return list(R.latest_by_key(R.read_rows(path)).values()), infos
