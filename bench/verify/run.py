"""`attnsel verify` / `attnsel tune --verify`: start vLLM's own engine once per candidate pair
(backend, block size), measure what a deployment feels, and say whether tune's kernel-level
recommendation holds end to end.

    tune.json (or --model + --candidates) -> candidates, shapes, refusals (bench/verify/plan.py)
    -> one engine worker process per candidate (bench/verify/engine_process.py, bench/verify/engine_worker.py)
    -> its figures and vLLM's own log lines (bench/verify/compare.py, bench/verify/engine_log.py)
    -> predicted (kernel) vs observed (engine) margins and the verdict -> verify.json.
Torch-free: every engine runs in its own process; this module only reads NVML and files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from attnsel import files
from attnsel.bench.verify import engine_log
from attnsel.bench.verify import plan as VP
from attnsel.bench.verify import prebuild as PB
from attnsel.bench.verify.beside import (
    Beside,
    flashinfer_attention,
    planned_runs,
    runs_flashinfer,
    start_beside,
)
from attnsel.bench.verify.compare import shape_figures
from attnsel.bench.verify.engine_process import (
    run_engine,
)
from attnsel.bench.verify.flags import vllm_version_or_fail
from attnsel.bench.verify.gpu_state import wait_for_memory
from attnsel.bench.verify.readback import engine_facts, engine_warnings
from attnsel.bench.verify.records import (
    Candidate,
    EngineFacts,
    EngineStart,
    ShapeResult,
    VerifyOptions,
)
from attnsel.bench.verify.request import (
    LOG_DIR,
    SCHEMA,
    VerifyPlan,
    VerifyRequest,
    plan_document,
    release_log_patterns,
    write_model_dir,
)
from attnsel.bench.verify.resume import DOCUMENT_FILE, kept_rows, previous_rows, row_key
from attnsel.bench.verify.status import RunStatus
from attnsel.bench.verify.verdict import (
    comparison_records,
    start_spread_records,
    verdict_record,
)

if TYPE_CHECKING:
    from attnsel.bench.verify.protocol import Progress

# the names other modules read from here since they were defined here (bench/verify/request.py has them now)
__all__ = ["SCHEMA", "VerifyProgress", "VerifyRequest", "release_log_patterns", "run_verify", "write_model_dir"]


@dataclass
class VerifyProgress:
    """Callbacks for the CLI's progress display (all optional)."""

    on_plan: Callable[[dict], None] = lambda document: None
    on_candidate: Callable[[int, int, dict, float], None] = lambda index, total, candidate, estimate_s: None
    on_message: Callable[[Progress], None] = lambda message: None
    on_tick: Callable[[], None] = lambda: None
    on_candidate_done: Callable[[dict], None] = lambda row: None


# ---------------------------------------------------------------------------------------------
# The run


def engine_job(req: VerifyRequest, plan: VerifyPlan, candidate: VP.Candidate, util: float | None, start: int = 1) -> dict:
    opts, model = plan.options, plan.model
    return {"engine": req.engine, "backend": candidate.backend, "block_size": candidate.block_size,
            "model_dir": str(plan.model_dir), "tensor_parallel_size": model.tensor_parallel_size,
            "dtype": model.dtype, "kv_cache_dtype": model.kv_cache_dtype,
            "gpu_memory_utilization": util, "max_model_len": opts.max_model_len,
            "engine_overrides": opts.engine_overrides or {},
            "vocab_size": VP.vocab_size(plan.hf_config), "shapes": [{"batch": b, "context": c} for b, c in opts.shapes or []],
            "repeats": req.repeats, "decode_steps": req.decode_steps, "seed": 0, "engine_start": start,
            # the installed release's engine data, chosen once by the parent (the worker reads its inspection rules)
            "release_engine": plan.profile.engine}


def run_verify(req: VerifyRequest, output_dir: Path, progress: VerifyProgress | None = None,
               env: Mapping[str, str] = os.environ) -> dict:
    """Plan, run every candidate's engine, compare, write verify.json (after each candidate too)."""
    progress = progress or VerifyProgress()
    output_dir = Path(output_dir)
    previous = previous_rows(output_dir, req.resume)
    vllm_version = vllm_version_or_fail(req.engine)  # no vLLM: exit 3 before the output folder exists
    output_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    plan = plan_document(req, output_dir, vllm_version, env)
    document = plan.document
    kept = kept_rows(previous, document)
    write_document(document, output_dir)
    progress.on_plan(document)
    run = _Run(req, plan, output_dir, progress, env, _beside(req, plan, kept, output_dir, env),
               _Timing(len(plan.candidates) * req.repeat_engine))
    try:
        _run_engines(run, kept)
    finally:
        prebuild = run.beside.close()
        if prebuild is not None:
            document["prebuild"] = dict(prebuild, note=PB.note(prebuild))
    # what verify derives is built as its records (bench/verify/records.py) and written as they write themselves
    comparisons = comparison_records(document, plan.tune_doc)
    document["comparisons"] = [c.to_dict() for c in comparisons]
    starts = start_spread_records(document) if req.repeat_engine > 1 else []
    if req.repeat_engine > 1:
        document["engine_starts"] = [s.to_dict() for s in starts]
    document["verdict"] = verdict_record(document, comparisons, starts).to_dict()
    document["elapsed_s"] = time.time() - started
    document["warnings"] += engine_warnings(document)
    write_document(document, output_dir)
    return document


@dataclass
class _Timing:
    """What the engines started so far took, for the next one's estimate and the progress count."""

    total: int
    done: int = 0
    starts: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)


@dataclass
class _Run:
    """One verify run once planned: what every engine start reads."""

    req: VerifyRequest
    plan: VerifyPlan
    output_dir: Path
    progress: VerifyProgress
    env: Mapping[str, str]
    beside: Beside
    timing: _Timing


def _run_engines(run: _Run, kept: dict) -> None:
    document = run.plan.document
    for candidate in run.plan.candidates:
        planned = candidate.to_dict()
        row = Candidate.new(**planned)  # a row is built as its record, its keys in the order they are set
        if row_key(planned) in kept:
            row = Candidate.from_dict(dict(kept[row_key(planned)], resumed=True))  # measured by the run being resumed
        elif candidate.reasons:
            row.status, row.error = RunStatus.REFUSED, "vLLM would refuse this pair: " + "; ".join(candidate.reasons)
        else:
            _timed_start(run, candidate, row)
        written = row.to_dict()
        document["candidates"].append(written)
        run.progress.on_candidate_done(written)
        write_document(document, run.output_dir)
    _restart_engines(run)


def _beside(req: VerifyRequest, plan: VerifyPlan, kept: dict, output_dir: Path, env: Mapping[str, str]) -> Beside:
    """The pre-build (started now, beside the first engine) and the pre-spawned workers."""
    runs = planned_runs(plan.candidates, kept, req.repeat_engine, lambda slug, start: _log_path(output_dir, slug, start))
    return start_beside(plan.profile, plan.document, runs, req.engine, env, engine_env(env), output_dir / LOG_DIR,
                        attention=flashinfer_attention(plan.candidates, runs, plan.attention))


def _log_path(output_dir: Path, slug: str, start: int) -> Path:
    return output_dir / LOG_DIR / (f"engine-{slug}.log" if start == 1 else f"engine-{slug}-start{start}.log")


def _timed_start(run: _Run, candidate: VP.Candidate, row: EngineStart, start: int = 1) -> None:
    timing = run.timing
    estimate = _estimate(run.req, run.plan.options, candidate, timing.starts, timing.measured)
    run.progress.on_candidate(timing.done, timing.total, row.to_dict(), estimate)
    timing.done += 1
    _run_candidate(run, candidate, row, start)
    if row.start_s:
        timing.starts.append(row.start_s - ((row.engine.torch_compile_s if row.engine else None) or 0.0))
        timing.measured.append(max(0.0, (row.wall_s or 0.0) - row.start_s))


def _restart_engines(run: _Run) -> None:
    """--repeat-engine N: starts 2..N of every pair that was not refused, round by round (A B A B,
    not A A B B, so a drift of the GPU over the run reaches every pair alike), each row's further
    starts kept under its "restarts"; a resumed row keeps the starts it already has."""
    if run.req.repeat_engine < 2:
        return
    document = run.plan.document
    for start in range(2, run.req.repeat_engine + 1):
        for candidate, row in zip(run.plan.candidates, document["candidates"]):
            if candidate.reasons:
                continue
            restarts = row.setdefault("restarts", [])
            if len(restarts) >= start - 1:
                continue
            again = EngineStart.new(start=start, name=f"{row['name']} start {start}", short=f"{row['short']} #{start}",
                                    backend=row.get("backend"), block_size=row.get("block_size"))
            _timed_start(run, candidate, again, start)
            restarts.append(again.to_dict())
            run.progress.on_candidate_done(restarts[-1])
            write_document(document, run.output_dir)


def _estimate(req: VerifyRequest, options: VerifyOptions, candidate: VP.Candidate, starts: list[float],
              measured: list[float]) -> float:
    cache = VP.compile_cache_root() / "torch_compile_cache"
    warm = cache.is_dir() and any(cache.iterdir())
    cubin = _installed("flashinfer-cubin")
    shapes = [(int(b), int(c)) for b, c in options.shapes or []]
    return (VP.start_estimate(candidate, starts, warm, cubin)
            + VP.measure_estimate(shapes, req.repeats, req.decode_steps, measured))


def _installed(distribution: str) -> bool:
    import importlib.metadata

    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _run_candidate(run: _Run, candidate: VP.Candidate, row: EngineStart, start: int = 1) -> None:
    req, plan = run.req, run.plan
    gpu = wait_for_memory(plan.gpu.get("memory_free_bytes"), run.env)
    util, note = VP.memory_budget(gpu.get("memory_total_bytes"), gpu.get("memory_free_bytes"), req.gpu_memory_utilization,
                                  plan.profile.memory)
    row.gpu_memory_utilization, row.memory_note, row.memory_free_bytes = util, note, gpu.get("memory_free_bytes")
    log_path = _log_path(run.output_dir, candidate.slug, start)
    row.log = str(log_path.relative_to(run.output_dir))
    beside, key = run.beside, (candidate.slug, start)
    process, prespawned = beside.take(key)
    progress = run.progress
    result = run_engine(engine_job(req, plan, candidate, util, start), log_path,
                        start_timeout_s=req.start_timeout_s, call_timeout_s=req.call_timeout_s,
                        env=engine_env(run.env), on_message=progress.on_message, on_tick=progress.on_tick,
                        process=process, on_spawned=lambda: beside.spawn_next(key),
                        hold=beside.hold_for(key, progress.on_tick, loads_built=runs_flashinfer(candidate)))
    beside.measured()
    own = plan.log_patterns
    log = engine_log.parse_engine_log(engine_log.read_log(log_path), own)
    row.status, row.error, row.start_s, row.wall_s = result.status, result.error, result.start_s, result.wall_s
    row.exit = result.exit
    row.engine = EngineFacts.from_dict(engine_facts(result.facts, log, tuple(p.field for p in own)))
    row.shapes = [ShapeResult.from_dict(shape_row(s)) for s in result.shapes]
    if prespawned:
        row.prespawn = prespawned
    if result.hold:
        row.hold = result.hold


def engine_env(env: Mapping[str, str]) -> dict:
    """The engine's environment: ours (VLLM_CACHE_ROOT included, so every engine shares one compile
    cache), unbuffered, and vLLM's INFO log lines on unless the user chose a level: the backend,
    KV-cache and compile lines are evidence (bench/verify/engine_log.py)."""
    out = dict(env, PYTHONUNBUFFERED="1")
    out.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    return out


def shape_row(result: dict) -> dict:
    row = dict(result)
    if row.get("status") == RunStatus.OK:
        row["figures"] = shape_figures(row)
    return row


def write_document(document: dict, output_dir: Path) -> Path:
    """verify.json, replaced whole (written to a temporary file, flushed to disk, renamed): a run
    interrupted between two engines keeps the rows measured so far."""
    import tempfile

    path = Path(output_dir) / DOCUMENT_FILE
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=".verify-", delete=False) as fh:
        fh.write(files.json_text(document) + "\n")  # RFC 8259: no NaN
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(fh.name, path)
    return path
