"""One backend's rows in one worker process (bench/worker/main.py), with the parent's side of the
protocol: timeouts, crash detection, restarts, pre-spawned workers (bench/sweep/run.py orders the
groups and runs them; this module runs one; the child process itself: bench/sweep/worker_process.py).

What can go wrong in a kernel library, and what is recorded:
  * the kernel raises              -> the worker records `error` (or `oom`) and goes on;
  * the worker hangs (JIT, deadlock) -> after `item_timeout_s` the parent kills it, records
                                       `timeout` for that row and starts a fresh worker for the rest;
  * the worker dies (segfault, abort) -> `crashed` with the signal and the tail of its stderr,
                                       then a fresh worker for the rest;
  * the worker cannot start         -> every row of that backend gets `error` with the reason.
A (backend, block size) that hung once or crashed twice is not tried on its remaining shapes;
after `max_restarts` deaths in one group its remaining rows are not run. With --gpus a group may be
a part of a backend (some of its block sizes, bench/sweep/lanes.py): a block size is never split,
so the per-(backend, block size) limits are unchanged; `max_restarts` counts per part.
"""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.worker_process import WorkerProcess
from attnsel.bench.timing import mode_label

if TYPE_CHECKING:  # pragma: no cover
    from attnsel.bench.sweep.run import SweepOptions

CONFIG_CRASH_LIMIT = 2  # crashes of one (backend, block size) before its other shapes are skipped
CONFIG_TIMEOUT_LIMIT = 1


def failure_row(item: dict, backend: str, shape: dict, options: SweepOptions, status: R.RowStatus,
                error: str) -> dict:
    """The row of an item whose worker crashed, hung or never started, as results.jsonl holds it."""
    return R.new_row(item["key"], backend, item["block_size"], item.get("kernel_block_size"),
                     WorkloadSpec.from_dict(item["workload"]), shape.get("dtype"), shape.get("kv_cache_dtype", "auto"),
                     mode_label(options.worker_options()), status, error).to_dict()


# ---------------------------------------------------------------------------------------------
# One worker process


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass
class GroupOutcome:
    rows: list[dict] = field(default_factory=list)
    info: dict | None = None
    restarts: int = 0
    started_at: float | None = None  # wall clock (time.time) when the group began / ended
    ended_at: float | None = None
    workers: list[dict] = field(default_factory=list)  # one startup record per worker process
    prespawn_failures: int = 0  # pre-spawned workers that died before "ready" (replaced by a fresh one)
    # --gpus: a backend whose block sizes ran in several lanes: (gpu, block sizes, that lane's outcome)
    parts: list[tuple[str, list[int], GroupOutcome]] = field(default_factory=list)

    @property
    def wall_s(self) -> float | None:
        """The group's wall time; a backend split over lanes: the sum of its parts' (they overlap,
        so this is GPU-seconds, like its rows' phases; started_at..ended_at is its elapsed span)."""
        if self.parts:
            return sum(part.wall_s or 0.0 for _, _, part in self.parts)
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at

    @classmethod
    def merged(cls, parts: list[tuple[str, list[int], GroupOutcome]]) -> GroupOutcome:
        """One backend's outcome from its parts in several lanes (GPU order): rows and workers in
        that order, restarts and failed pre-spawns summed, the first part's worker info."""
        outcomes = [outcome for _, _, outcome in parts]
        starts = [o.started_at for o in outcomes if o.started_at is not None]
        ends = [o.ended_at for o in outcomes if o.ended_at is not None]
        return cls(rows=[r for o in outcomes for r in o.rows], info=next((o.info for o in outcomes if o.info), None),
                   restarts=sum(o.restarts for o in outcomes), started_at=min(starts) if starts else None,
                   ended_at=max(ends) if ends else None, workers=[w for o in outcomes for w in o.workers],
                   prespawn_failures=sum(o.prespawn_failures for o in outcomes), parts=list(parts))


def worker_record(worker: WorkerProcess, ready_startup: dict | None, ready_at: float | None,
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
                    log_path: Path, *, previous_backend: str | None = None,
                    capability: tuple[int, int] | None = None, env: dict | None = None) -> WorkerProcess:
    """A worker that imports torch + `backend`'s library now and waits for go() before CUDA;
    meanwhile it compiles the JIT modules its items need, if its adapter can (options.prebuild)."""
    job = group_job(backend, items, shape, options)
    if options.prebuild:
        job["prebuild"] = {"previous_backend": previous_backend,
                           "device_capability": list(capability) if capability else None,
                           "wait_s": prebuild_wait_s(options)}
    return WorkerProcess(job, log_path, prespawned=True, env=env)


def run_backend_group(
    backend: str,
    items: list[dict],
    shape: dict,
    options: SweepOptions,
    log_path: Path,
    on_row: Callable[[dict], None],
    on_start: Callable[[dict], None] | None = None,
    on_info: Callable[[dict], None] | None = None,
    worker: WorkerProcess | None = None,
    env: dict | None = None,
) -> GroupOutcome:
    """All items of one backend, restarting the worker after a timeout or a crash. `worker`: one
    pre-spawned for exactly these items (prespawn_worker); it is used first, then replaced as usual.
    `env`: extra environment of its workers (--gpus: which GPU they see)."""
    run = _GroupRun(backend, items, shape, options, log_path, on_row, on_start, on_info, worker)
    run.env = env
    return run.run()


class _GroupRun:
    def __init__(self, backend: str, items: list[dict], shape: dict, options: SweepOptions, log_path: Path,
                 on_row: Callable[[dict], None], on_start: Callable[[dict], None] | None,
                 on_info: Callable[[dict], None] | None, worker: WorkerProcess | None = None):
        self.backend, self.shape, self.options, self.log_path = backend, shape, options, log_path
        self.env: dict | None = None
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

    def fail(self, item: dict, status: R.RowStatus, error: str) -> None:
        self.emit(failure_row(item, self.backend, self.shape, self.options, status, error))
        self.pending = [i for i in self.pending if i["key"] != item["key"]]

    def fail_all(self, status: R.RowStatus, error: str) -> None:
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
                worker = WorkerProcess(group_job(self.backend, self.pending, self.shape, self.options), self.log_path,
                                       env=getattr(self, "env", None))
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

    def give_up_on_config(self, failed: dict, status: R.RowStatus) -> None:
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

    @property
    def group_started_at(self) -> float:
        assert self.outcome.started_at is not None  # run() sets it before any worker is driven
        return self.outcome.started_at

    def drive(self, worker: WorkerProcess) -> bool:
        """Read one worker's messages until it finishes (True), dies or hangs (False)."""
        worker.go()
        watch = _Watch(worker, record_index=len(self.outcome.workers))
        self.outcome.workers.append(worker_record(worker, None, None, self.group_started_at))
        while True:
            limit = self.options.item_timeout_s if watch.ready else self.options.startup_timeout_s
            try:
                message = worker.next_message(limit)
            except queue.Empty:
                self._silent(watch, limit)
                return False
            if message is None:  # EOF: the worker died (segfault, abort) or exited early
                self._died(watch)
                return False
            finished = self._handle(watch, message)
            if finished is not None:
                return finished

    def _silent(self, watch: _Watch, limit: float) -> None:
        """No message within the limit: kill the worker; its row (or every row) timed out."""
        watch.worker.kill()
        if watch.current is not None:
            self.fail(watch.current, R.STATUS_TIMEOUT, f"no result within {limit:g} s; the worker was killed")
            self.give_up_on_config(watch.current, R.STATUS_TIMEOUT)
        else:
            what = "did not start" if not watch.ready else "stopped answering"
            self.fail_all(R.STATUS_TIMEOUT, f"worker {what} within {limit:g} s")

    def _died(self, watch: _Watch) -> None:
        """The worker's output ended: its row crashed; a pre-spawned worker that died before
        "ready" is retried once (retry_startup); any other that did not start fails every row."""
        worker = watch.worker
        how = _describe_exit(worker.wait())
        tail = worker.stderr_tail()
        detail = f"worker {how}" + (f"; stderr: {tail[-300:]}" if tail else "")
        if watch.current is not None:
            self.fail(watch.current, R.STATUS_CRASHED, detail)
            self.give_up_on_config(watch.current, R.STATUS_CRASHED)
        elif not watch.ready:
            if worker.prespawned and not self.outcome.prespawn_failures:
                self.outcome.workers[watch.record_index]["error"] = detail
                self.retry_startup = True
                return
            self.fail_all(R.STATUS_ERROR, detail)

    def _handle(self, watch: _Watch, message: dict) -> bool | None:
        """One protocol message (bench/worker/main.py); True/False when the worker is through, else None."""
        worker, kind = watch.worker, message["type"]
        if kind == "imported":
            worker.imported = message.get("startup") or {}
            worker.imported_seen_at = time.time()
        elif kind == "ready":
            watch.ready = True
            self.outcome.workers[watch.record_index] = worker_record(worker, message.get("startup"), time.time(),
                                                                     self.group_started_at)
            self.outcome.info = message.get("info")
            if self.on_info and self.outcome.info:
                self.on_info(self.outcome.info)
        elif kind == "precompiled":  # the worker's Triton pre-compile pass (bench/worker/precompile.py)
            self.outcome.workers[watch.record_index]["precompile"] = message.get("precompile")
        elif kind == "start":
            watch.current = self.by_key.get(message.get("key"))
            if self.on_start and watch.current is not None:
                self.on_start(watch.current)
        elif kind == "row":
            row = message["row"]
            self.emit(row)
            self.pending = [i for i in self.pending if i["key"] != row.get("key")]
            watch.current = None
        elif kind == "fatal":
            worker.wait()
            self.fail_all(R.STATUS_ERROR, f"worker could not start: {message.get('error')}")
            return False
        elif kind == "done":
            worker.wait()
            self.fail_all(R.STATUS_ERROR, "the worker finished without a result for this row")
            return True
        return None


@dataclass
class _Watch:
    """What drive() knows about the worker it reads: has it said "ready", which row is it on."""

    worker: WorkerProcess
    record_index: int  # its entry in GroupOutcome.workers
    ready: bool = False
    current: dict | None = None  # the item of its last "start" message, until its row arrives
