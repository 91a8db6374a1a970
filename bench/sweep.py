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


@dataclass
class SweepOptions:
    mode: str = "events"  # "events" | "graph"
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
    # The worker's boundary to torch + kernels; ATTNSEL_TUNE_TOOLKIT swaps in a fake (CI only).
    toolkit: str = field(default_factory=lambda: os.environ.get("ATTNSEL_TUNE_TOOLKIT") or DEFAULT_TOOLKIT)

    def worker_options(self) -> dict:
        return {
            "mode": self.mode, "cold_l2": self.cold_l2, "warmup_ms": self.warmup_ms, "repeat_ms": self.repeat_ms,
            "max_samples": self.max_samples, "tolerance": self.tolerance, "seed": self.seed,
            "keep_samples": self.keep_samples,
        }

    def to_dict(self) -> dict:
        d = self.worker_options()
        d.update(check=self.check, item_timeout_s=self.item_timeout_s, startup_timeout_s=self.startup_timeout_s)
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
            groups.setdefault(config.backend, []).append({
                "key": key,
                "block_size": config.block_size,
                "kernel_block_size": config.kernel_block_size,
                "workload": w.to_dict(),
                "check": check,
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

    def __init__(self, job: dict, log_path: Path):
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        self.log_start = self._log.tell()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnsel.bench.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            start_new_session=True,  # its own process group: a timeout kills compiler children too
        )
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.proc.stdin.write(json.dumps(job).encode())
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once; the reader sees EOF

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


def run_backend_group(
    backend: str,
    items: list[dict],
    shape: dict,
    options: SweepOptions,
    log_path: Path,
    on_row: Callable[[dict], None],
    on_start: Optional[Callable[[dict], None]] = None,
    on_info: Optional[Callable[[dict], None]] = None,
) -> GroupOutcome:
    """All items of one backend, restarting the worker after a timeout or a crash."""
    return _GroupRun(backend, items, shape, options, log_path, on_row, on_start, on_info).run()


class _GroupRun:
    def __init__(self, backend, items, shape, options, log_path, on_row, on_start, on_info):
        self.backend, self.shape, self.options, self.log_path = backend, shape, options, log_path
        self.on_row, self.on_start, self.on_info = on_row, on_start, on_info
        self.pending: list[dict] = list(items)
        self.by_key = {item["key"]: item for item in items}
        self.outcome = GroupOutcome()
        self.failures: dict[tuple[int, str], int] = {}  # (block size, status) -> count

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
        deaths = 0
        while self.pending:
            job = {"action": "run", "toolkit": self.options.toolkit, "backend": self.backend, "shape": self.shape,
                   "options": self.options.worker_options(), "items": self.pending}
            worker = WorkerProcess(job, self.log_path)
            try:
                finished = self.drive(worker)
            except BaseException:
                worker.kill()  # Ctrl-C or a bug in the parent: never leave a worker running on the GPU
                raise
            if finished or not self.pending:
                break
            deaths += 1
            self.outcome.restarts = deaths
            if deaths > self.options.max_restarts:
                self.fail_all(R.STATUS_CRASHED, f"not run: the {self.backend} worker failed {deaths} times")
        return self.outcome

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
                    self.fail_all(R.STATUS_ERROR, detail)
                return False
            kind = message["type"]
            if kind == "ready":
                ready = True
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
) -> tuple[list[dict], dict[str, dict]]:
    """Run every planned row not already in results.jsonl; return (all rows, worker info by backend).
    `enrich` adds parent-side figures (% of peak bandwidth) before a row is written."""
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
        for backend, items in groups.items():
            progress.on_backend(backend, len(items))

            def on_row(row: dict) -> None:
                row = enrich(row)
                writer.write(row)
                progress.on_row(row)

            outcome = run_backend_group(
                backend, items, shape, options, Path(output_dir) / f"worker-{backend}.log",
                on_row=on_row, on_start=progress.on_start,
            )
            if outcome.info:
                infos[backend] = outcome.info
    return list(R.latest_by_key(R.read_rows(path)).values()), infos
