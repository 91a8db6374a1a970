"""Runs a tune plan: the backend groups in order, one worker process per backend (bench/sweep/groups.py
runs one group: timeouts, crash detection, restarts), every row appended to results.jsonl as soon
as it arrives (bench/sweep/results.py), resume, and with --gpus one lane per GPU (bench/sweep/multi_gpu.py).
The parent stays torch-free.

Pre-spawning (docs/tune-performance.md): while backend N runs, the workers of backends N+1 and N+2
(PRESPAWN_AHEAD) are already started;
it imports torch and its kernel library, then waits for "go" before it touches CUDA. It keeps the
same isolation (own session, startup timeout, crash detection); one that dies before "ready" is
replaced by a fresh worker once. It also compiles its backend's JIT modules meanwhile (FlashInfer's
nvcc builds: CPU only, no CUDA context), if its adapter has the optional `prebuild` hook; at "go"
it waits for that build (which its first plan() would have run anyway). Fresh (not pre-spawned)
workers never pre-build.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from pathlib import Path

from attnsel.bench.plan import Plan, WorkloadSpec
from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.groups import GroupOutcome, prespawn_worker, run_backend_group
from attnsel.bench.sweep.lanes import EARLY_PREBUILD_BACKENDS, PRESPAWN_AHEAD
from attnsel.bench.sweep.multi_gpu import Lane, gpu_lane, run_on_gpus
from attnsel.bench.sweep.worker_process import (
    WorkerProcess,
    allow_workers,
    workers_importing,
)
from attnsel.bench.timing import mode_label
from attnsel.bench.timing import stats as T
from attnsel.bench.timing.launch_mode import LaunchMode, Timer
from attnsel.bench.worker import DEFAULT_TOOLKIT
from attnsel.errors import EnvironmentProblem
from attnsel.probe import usable_cpu_count
from attnsel.words import Word

DEFAULT_ITEM_TIMEOUT_S = 180.0  # one row incl. a first-call JIT (FlashInfer decode: 12.4 s, docs/gpu-facts.md §1)
DEFAULT_STARTUP_TIMEOUT_S = 240.0  # import torch + the kernel library (flashinfer: 8.5 s)
DEFAULT_MAX_RESTARTS = 8


class CheckPolicy(Word):
    """--check: which rows are checked against the fp32 reference."""

    FIRST = "first"  # the smallest shape of each workload kind per block size
    ALL = "all"
    NONE = "none"


CHECK_POLICIES: tuple[CheckPolicy, ...] = tuple(CheckPolicy)
# Backends run in this order so that each pre-spawned worker's library import hides behind the
# previous backend's rows. FLEX_ATTENTION goes first: it imports only torch (dynamo/inductor,
# 7.6 s on an H100), while `import vllm` (18.9 s there) for the three vLLM-driven workers then
# overlaps its rows. FLASHINFER comes last: its worker starts with the sweep and compiles its JIT
# modules (~100 s of nvcc, cold) while all the others time; in third place ~97 s of its build
# stayed exposed on an H100 (issue "tune measures what vLLM really runs"). Each backend has its
# own process, so the order changes no measurement.
STARTUP_ORDER = ("FLEX_ATTENTION", "TRITON_ATTN", "FLASH_ATTN", "FLASHINFER")
# At most this many workers import at once per this many CPU cores (the first backend's worker
# included): each import keeps a core busy for ~16 s (torch + vLLM), next to the first backend's
# exposed start, FlashInfer's nvcc and the compilers. 16 cores (the H100 machines): 4, the sweep's
# four workers, so nothing waits there; on 4-8 cores the later backends' imports start as earlier
# ones finish, still behind the running backend. FlashInfer's pre-building worker goes first.
CORES_PER_IMPORTING_WORKER = 4


def import_slots(cpu_count: int | None = None) -> int:
    """How many workers may import at the same time on this machine.

    >>> import_slots(16), import_slots(2), import_slots(None) >= 1
    (4, 1, True)
    """
    cores = cpu_count if cpu_count is not None else usable_cpu_count()
    return max(1, cores // CORES_PER_IMPORTING_WORKER)


@dataclass
class SweepOptions:
    # How each row's call is launched: "vllm" (graph replay where vLLM captures the batch in a full
    # CUDA graph, eager elsewhere), or forced "graph" (--cuda-graph) / "eager" (--eager).
    launch: str = LaunchMode.VLLM
    timer: str = Timer.AUTO  # "auto" (CUPTI where cupti-python works, else CUDA events) | "cupti" | "events"
    cold_l2: bool = True
    warmup_ms: float = T.WARMUP_BUDGET_MS
    repeat_ms: float = T.REPEAT_BUDGET_MS
    max_samples: int = T.MAX_SAMPLES
    check: str = CheckPolicy.FIRST  # which rows are checked against the fp32 reference
    tolerance: float | None = None
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
    # --gpus: CUDA ordinals of this process to spread the sweep over (None: the default GPU)
    gpus: list[str] | None = None
    # How many workers may import at once (all lanes): by the machine's cores (import_slots)
    import_slots: int = field(default_factory=lambda: import_slots())

    def worker_options(self) -> dict:
        return {
            "launch": self.launch, "timer": self.timer, "cold_l2": self.cold_l2, "warmup_ms": self.warmup_ms, "repeat_ms": self.repeat_ms,
            "max_samples": self.max_samples, "tolerance": self.tolerance, "seed": self.seed,
            "keep_samples": self.keep_samples,
        }

    def to_dict(self) -> dict:
        d = self.worker_options()
        d.update(check=self.check, item_timeout_s=self.item_timeout_s, startup_timeout_s=self.startup_timeout_s,
                 prespawn=self.prespawn, prebuild=self.prespawn and self.prebuild, gpus=self.gpus)
        return d


# ---------------------------------------------------------------------------------------------
# Items


def items_for(plan: Plan, options: SweepOptions, skip_keys: Set[str] = frozenset()) -> dict[str, list[dict]]:
    """Rows to time, grouped by backend; `check` marks rows compared with the fp32 reference
    ("first": the smallest shape of each workload kind per block size -- the reference on a
    256 x 16k decode batch would cost more than the sweep)."""
    mode = mode_label(options.worker_options())
    shape = plan.shape
    smallest: dict[str, WorkloadSpec] = {}
    for w in plan.workloads:
        if w.kind not in smallest or w.kv_tokens < smallest[w.kind].kv_tokens:
            smallest[w.kind] = w
    groups: dict[str, list[dict]] = {}
    for config in plan.runnable_configs:
        for w in plan.workloads:
            key = R.row_key(config.backend, config.block_size, w.label(), shape.dtype, shape.kv_cache_dtype, mode)
            if key in skip_keys:
                continue
            check = options.check == CheckPolicy.ALL or (options.check == CheckPolicy.FIRST and w == smallest[w.kind])
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
            key = R.row_key(config.backend, config.block_size, w.label(), shape.dtype, shape.kv_cache_dtype, mode)
            row = R.new_row(key, config.backend, config.block_size, None, w, shape.dtype, shape.kv_cache_dtype, mode,
                            R.STATUS_SKIPPED_BY_VLLM, "; ".join(config.reasons))
            row.vllm_reasons = list(config.reasons)
            rows.append(row.to_dict())
    return rows


def probe_device(toolkit: str = DEFAULT_TOOLKIT, timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
                 log_path: Path | None = None) -> dict:
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


def ordered_groups(groups: dict[str, list[dict]]) -> list[tuple[str, list[dict]]]:
    return sorted(groups.items(), key=lambda kv: STARTUP_ORDER.index(kv[0]) if kv[0] in STARTUP_ORDER
                  else len(STARTUP_ORDER))


def run_sweep(
    plan: Plan,
    options: SweepOptions,
    output_dir: Path,
    *,
    resume: bool = False,
    retry_failed: bool = False,
    progress: SweepProgress | None = None,
    enrich: Callable[[dict], dict] = lambda row: row,
    outcomes: dict[str, GroupOutcome] | None = None,
    facts: dict | None = None,
) -> tuple[list[dict], dict[str, dict]]:
    """Run every planned row not already in results.jsonl; return (all rows, worker info by backend).
    `facts` (if given) receives what a --gpus sweep decided (calibration, lanes).
    `enrich` adds parent-side figures (% of peak bandwidth) before a row is written; `outcomes`
    (if given) receives each backend's GroupOutcome (startup records, wall times) for the phases.
    While backend N runs, the workers of the next PRESPAWN_AHEAD backends are already importing
    (and pre-building JIT modules) (options.prespawn). With several --gpus the groups are spread
    over one lane per GPU (bench/sweep/multi_gpu.py)."""
    progress = progress or SweepProgress()
    allow_workers()
    path = Path(output_dir) / R.RESULTS_FILE
    existing = R.read_rows(path) if resume else []
    done = R.keys_to_skip_on_resume(existing, retry_failed=retry_failed)
    groups = items_for(plan, options, done)
    progress.on_total(sum(len(v) for v in groups.values()))
    infos: dict[str, dict] = {}
    outcomes = {} if outcomes is None else outcomes
    with R.ResultsWriter(path) as writer:
        for row in skipped_rows(plan, options):
            if row["key"] not in done:
                writer.write(row)
        order = ordered_groups(groups)
        if len(options.gpus or ()) > 1:
            run_on_gpus(order, plan, options, Path(output_dir), writer, progress, enrich, outcomes, infos,
                        {} if facts is None else facts,
                        run_groups=run_groups, prespawn_lane=prespawn_lane)
        else:
            lane = Lane(*gpu_lane(options.gpus[0])) if options.gpus else Lane()
            run_groups(order, plan, options, Path(output_dir), writer, progress, enrich, outcomes, infos, lane)
    return list(R.latest_by_key(R.read_rows(path)).values()), infos


def positions_to_prespawn(order: list[tuple[str, list[dict]]], i: int, options: SweepOptions) -> list[int]:
    """Positions in `order` whose workers import while position i runs: the next PRESPAWN_AHEAD,
    and FLASHINFER's from the start (its JIT pre-build is the longest start of all)."""
    if not options.prespawn:
        return []
    early = [j for j in range(i + 1, len(order)) if order[j][0] in EARLY_PREBUILD_BACKENDS and options.prebuild]
    ahead = set(range(i + 1, min(len(order), i + 1 + PRESPAWN_AHEAD))) - set(early)
    return early + sorted(ahead)  # the pre-building worker first: it gets an import slot first


def prespawn_lane(order: list[tuple[str, list[dict]]], plan: Plan, options: SweepOptions, output_dir: Path,
                  lane: Lane, *, before: str = "the --gpus calibration") -> dict[int, WorkerProcess]:
    """The lane's first worker, started now (while `before` runs): its import is then hidden. Only
    the first: on 2 x H200 also starting the next one and FlashInfer's JIT pre-build during the
    calibration starved that nvcc build of CPU (136 s instead of ~94 s, cold; docs/tune-performance.md)."""
    if not options.prespawn or not order:
        return {}
    return {0: _prespawn_at(order, 0, plan, options, output_dir, lane, previous=before)}


def _prespawn_at(order: list[tuple[str, list[dict]]], j: int, plan: Plan, options: SweepOptions, output_dir: Path, lane: Lane,
                 previous: str) -> WorkerProcess:
    backend, items = order[j]
    return prespawn_worker(backend, items, plan.shape.to_dict(), options, Path(output_dir) / lane.log_name(backend),
                           previous_backend=previous, capability=plan.capability, env=lane.env)


def run_groups(order: list[tuple[str, list[dict]]], plan: Plan, options: SweepOptions, output_dir: Path,
               writer: R.ResultsWriter, progress: SweepProgress, enrich: Callable[[dict], dict],
               outcomes: dict, infos: dict, lane: Lane,
               prespawned: dict[int, WorkerProcess] | None = None) -> None:
    """The backend groups of one lane, in order, each with its own worker; the next groups' workers
    are pre-spawned (and FLASHINFER's from the start, for its JIT pre-build). `prespawned`: workers
    already started for positions of `order` (prespawn_lane); this lane owns them from now on.
    With --gpus a group may be a part of a backend (bench/sweep/lanes.py; a lane holds at most one
    part of a backend, so `outcomes`/`infos` keyed by backend and the log names stay one per lane)."""
    shape = plan.shape.to_dict()
    log_for = {backend: Path(output_dir) / lane.log_name(backend) for backend, _ in order}
    waiting: dict[int, WorkerProcess] = dict(prespawned or {})  # pre-spawned workers by position in `order`
    try:
        for i, (backend, items) in enumerate(order):
            progress.on_backend(backend, len(items))
            worker = waiting.pop(i, None)
            due = [j for j in positions_to_prespawn(order, i, options) if j not in waiting]

            def start_due(reserved: int = 0, i: int = i, due: list[int] = due) -> None:
                """Pre-spawn the due workers while an import slot is free (import_slots); the rest
                are tried again after each row."""
                while due and workers_importing() + reserved < options.import_slots:
                    j = due.pop(0)
                    waiting[j] = _prespawn_at(order, j, plan, options, output_dir, lane,
                                              previous=" and ".join(b for b, _ in order[i:j]))

            start_due(reserved=0 if worker is not None else 1)  # a fresh worker for this backend imports too

            def on_row(row: dict, start_due: Callable[..., None] = start_due) -> None:
                if lane.label is not None:
                    row["gpu"] = lane.label
                row = enrich(row)
                writer.write(row)
                progress.on_row(row)
                start_due()

            outcome = run_backend_group(backend, items, shape, options, log_for[backend], on_row=on_row,
                                        on_start=progress.on_start, worker=worker, env=lane.env)
            if outcome.info:
                infos[backend] = outcome.info
            outcomes[backend] = outcome
    finally:
        for waiting_worker in waiting.values():
            waiting_worker.kill()  # Ctrl-C or an error: a pre-spawned worker must not outlive us
