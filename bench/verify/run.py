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

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attnsel import __version__, files
from attnsel.attention import versions
from attnsel.attention.model import attention_layer_count
from attnsel.attention.model import config as MC
from attnsel.bench.plan import shape_from_model, vllm_default_choice
from attnsel.bench.tune import (
    DecisionRecord,
    GpuEnvironment,
    TuneDocument,
    advised_flags,
)
from attnsel.bench.verify import engine_log
from attnsel.bench.verify import engine_worker as EW
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
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    run_engine,
)
from attnsel.bench.verify.flags import (
    ENGINE_ENV,
    MAX_ENGINE_STARTS,
    vllm_version_or_fail,
)
from attnsel.bench.verify.gpu_state import read_gpu, wait_for_memory
from attnsel.bench.verify.readback import engine_facts, engine_warnings
from attnsel.bench.verify.resume import DOCUMENT_FILE, kept_rows, previous_rows, row_key
from attnsel.bench.verify.verdict import (
    build_comparisons,
    engine_start_spreads,
    summarize,
)
from attnsel.errors import UserInputError

SCHEMA = "attnsel-verify/1"
LOG_DIR = "verify"  # engine logs and the model's config.json, inside the run folder
TUNE_DOCUMENT = "tune.json"
# vLLM 0.24.0's own default (vllm/config/cache.py:67): engines get the share a deployment gets
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92


@dataclass
class VerifyRequest:
    tune_dir: Path | None = None  # a `tune --output` folder: its tune.json gives candidates and kernel margins
    model: str | None = None  # config.json, folder or catalog name (default: the tuned model)
    candidates: list[tuple[str, int]] | None = None  # instead of tune's pick and runner-up
    shapes: list[tuple[int, int]] | None = None  # (batch, context) decode shapes
    repeats: int = 2  # timed N1/N2 pairs per shape (>= 2: the spread is the noise)
    repeat_engine: int = 1  # engine starts per pair (>= 2: their spread is reported and gates the verdict)
    decode_steps: int = 128  # N2 - N1
    gpu_memory_utilization: float = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    engine: str = field(default_factory=lambda: os.environ.get(ENGINE_ENV) or EW.DEFAULT_ENGINE)
    resume: bool = False  # keep the engines a previous run in the same folder measured (same options)


@dataclass
class VerifyProgress:
    """Callbacks for the CLI's progress display (all optional)."""

    on_plan: Callable[[dict], None] = lambda document: None
    on_candidate: Callable[[int, int, dict, float], None] = lambda index, total, candidate, estimate_s: None
    on_message: Callable[[dict], None] = lambda message: None
    on_tick: Callable[[], None] = lambda: None
    on_candidate_done: Callable[[dict], None] = lambda row: None


# ---------------------------------------------------------------------------------------------
# Inputs


def load_tune_document(tune_dir: Path) -> dict:
    path = Path(tune_dir)
    path = path / TUNE_DOCUMENT if path.is_dir() else path
    if not path.is_file():
        raise UserInputError(f"{path} does not exist: pass the folder `attnsel tune --output` wrote (it holds {TUNE_DOCUMENT})")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserInputError(f"{path} is not a readable tune result: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("plan"), dict) or not isinstance(doc.get("rows"), list):
        raise UserInputError(f"{path} is not a tune result (no plan / rows): pass a `tune --output` folder")
    return doc


def resolve_model(req: VerifyRequest, tune_doc: dict | None) -> tuple[str, dict]:
    name = req.model or ((tune_doc or {}).get("plan", {}).get("shape") or {}).get("model")
    if not name:
        raise UserInputError("pass --model CONFIG (a config.json, a folder or a catalog name): the tune result "
                             "was made from --head-size flags, and vLLM's engine needs a model config")
    return str(name), MC.load_model_config(name)


def write_model_dir(hf_config: dict, folder: Path) -> Path:
    """A folder holding only config.json: vLLM builds the model from it with dummy weights."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------------------------
# The run


def plan_document(req: VerifyRequest, output_dir: Path, env=os.environ) -> tuple[dict, list, dict]:
    """Everything decided before the first engine: (document, candidates, context)."""
    tune_doc = load_tune_document(req.tune_dir) if req.tune_dir else None
    if tune_doc is None and req.candidates is None:
        raise UserInputError("pass a tune result folder (attnsel verify RUN_DIR) or --candidates BACKEND:BLOCK_SIZE,...")
    vllm_version = vllm_version_or_fail(req.engine)
    gpu = read_gpu(env)
    capability = tuple(gpu["capability"])
    model_name, hf_config = resolve_model(req, tune_doc)
    if tune_doc:
        shape = VP.shape_from_document(tune_doc["plan"], capability)
        default = tune_doc["plan"].get("vllm_default") or {}
        vllm_default = (default["backend"], int(default["block_size"])) if default.get("backend") else None
    else:
        shape = VP.engine_shape(shape_from_model(model_name, capability=capability))
        backend, block, _error = vllm_default_choice(shape, capability)
        vllm_default = (backend, int(block)) if backend and block else None
    shape = VP.engine_shape(shape)
    candidates = VP.choose_candidates((tune_doc or {}).get("recommendation"), vllm_default, req.candidates)
    VP.check_refusals(candidates, shape, capability)
    model_max = VP.model_max_len(hf_config)
    shapes = req.shapes or VP.default_shapes(VP.decode_shapes_of((tune_doc or {}).get("plan") or {}), model_max)
    profile = versions.select_profile(None).profile  # the release that answers for the installed vLLM
    util, memory_note = VP.memory_budget(gpu.get("memory_total_bytes"), gpu.get("memory_free_bytes"),
                                         req.gpu_memory_utilization)
    document = {
        "schema": SCHEMA, "attnsel_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "tune": _tune_summary(req, tune_doc),
        "model": {"name": model_name, "model_type": hf_config.get("model_type"),
                  "attention_layers": attention_layer_count(hf_config),
                  "num_hidden_layers": (hf_config.get("text_config") or hf_config).get("num_hidden_layers"),
                  "is_hybrid": shape.is_hybrid, "max_position_embeddings": model_max,
                  "tensor_parallel_size": shape.tensor_parallel_size, "dtype": shape.dtype,
                  "kv_cache_dtype": shape.kv_cache_dtype},
        "gpu": {k: gpu.get(k) for k in ("name", "capability", "uuid", "memory_total_bytes", "memory_free_bytes",
                                        "memory_used_bytes", "processes")},
        "vllm": {"installed_version": vllm_version, "rule_profile": profile.name,
                 "predicted_default": list(vllm_default) if vllm_default else None},
        "options": {"shapes": [list(s) for s in shapes], "repeats": req.repeats, "decode_steps": req.decode_steps,
                    "gpu_memory_utilization_requested": req.gpu_memory_utilization, "gpu_memory_utilization": util,
                    "max_model_len": VP.max_model_len_for(shapes, req.decode_steps, model_max),
                    "engine_overrides": VP.graph_overrides(profile.cudagraph, shapes),
                    "start_timeout_s": req.start_timeout_s, "call_timeout_s": req.call_timeout_s,
                    "engine": req.engine, "compile_cache_root": str(VP.compile_cache_root(env)),
                    "prefix_caching": False, "weights": "dummy (load_format=dummy, config.json only)",
                    **({"repeat_engine": req.repeat_engine} if req.repeat_engine > 1 else {})},
        "candidates": [], "comparisons": [], "verdict": None,
        "warnings": [memory_note] if memory_note else [],
    }
    context = {"hf_config": hf_config, "tune_doc": tune_doc, "gpu": gpu,
               "model_dir": write_model_dir(hf_config, Path(output_dir) / LOG_DIR / "model"),
               "attention": {"dtype": shape.dtype, "head_size": shape.head_size, "kv_cache_dtype": shape.kv_cache_dtype}}
    return document, candidates, context


def _tune_summary(req: VerifyRequest, tune_doc: dict | None) -> dict | None:
    if not tune_doc:
        return None
    tune = TuneDocument.from_dict(tune_doc)
    scope = VP.tune_scope(tune.recommendation) or DecisionRecord()
    gpu = (tune.environment.gpu if tune.environment else None) or GpuEnvironment()
    return {"source": str(req.tune_dir), "scope": scope.scope, "verdict": scope.verdict,
            "margin_pct": scope.margin_pct, "flags": scope.flags, "advice": scope.advice,
            "advised_flags": advised_flags(scope), "min_gain_pct": scope.min_gain_pct,
            "gpu": gpu.name or (tune.plan.gpu if tune.plan else None), "created": tune.created}


def engine_job(req: VerifyRequest, document: dict, candidate: VP.Candidate, context: dict, util: float,
               start: int = 1) -> dict:
    opts = document["options"]
    return {"engine": req.engine, "backend": candidate.backend, "block_size": candidate.block_size,
            "model_dir": str(context["model_dir"]), "tensor_parallel_size": document["model"]["tensor_parallel_size"],
            "dtype": document["model"]["dtype"], "kv_cache_dtype": document["model"]["kv_cache_dtype"],
            "gpu_memory_utilization": util, "max_model_len": opts["max_model_len"],
            "engine_overrides": opts.get("engine_overrides") or {},
            "vocab_size": VP.vocab_size(context["hf_config"]), "shapes": [{"batch": b, "context": c} for b, c in opts["shapes"]],
            "repeats": req.repeats, "decode_steps": req.decode_steps, "seed": 0, "engine_start": start}


def run_verify(req: VerifyRequest, output_dir: Path, progress: VerifyProgress | None = None,
               env=os.environ) -> dict:
    """Plan, run every candidate's engine, compare, write verify.json (after each candidate too)."""
    if req.repeats < 2:
        raise UserInputError("--repeats must be at least 2: the spread of the repeats is the noise the verdict uses")
    if not 1 <= req.repeat_engine <= MAX_ENGINE_STARTS:
        raise UserInputError(f"--repeat-engine must be between 1 and {MAX_ENGINE_STARTS} engine starts per pair")
    progress = progress or VerifyProgress()
    output_dir = Path(output_dir)
    previous = previous_rows(output_dir, req.resume)
    vllm_version_or_fail(req.engine)  # no vLLM: exit 3 before the output folder exists
    output_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    document, candidates, context = plan_document(req, output_dir, env)
    kept = kept_rows(previous, document)
    write_document(document, output_dir)
    progress.on_plan(document)
    context["beside"] = _beside(req, document, candidates, kept, output_dir, env, context)
    try:
        _run_engines(req, document, candidates, context, kept, output_dir, progress, env)
    finally:
        prebuild = context["beside"].close()
        if prebuild is not None:
            document["prebuild"] = dict(prebuild, note=PB.note(prebuild))
    document["comparisons"] = build_comparisons(document, context["tune_doc"])
    if req.repeat_engine > 1:
        document["engine_starts"] = engine_start_spreads(document)
    document["verdict"] = summarize(document)
    document["elapsed_s"] = time.time() - started
    document["warnings"] += engine_warnings(document)
    write_document(document, output_dir)
    return document


def _run_engines(req, document, candidates, context, kept, output_dir, progress, env) -> None:
    timing = _Timing(len(candidates) * req.repeat_engine)
    for candidate in candidates:
        row = candidate.to_dict()
        if row_key(row) in kept:
            row = dict(kept[row_key(row)], resumed=True)  # measured by the run being resumed
        elif candidate.reasons:
            row.update(status="refused", error="vLLM would refuse this pair: " + "; ".join(candidate.reasons))
        else:
            _timed_start(req, document, candidate, context, row, output_dir, progress, env, timing)
        document["candidates"].append(row)
        progress.on_candidate_done(row)
        write_document(document, output_dir)
    _restart_engines(req, document, candidates, context, output_dir, progress, env, timing)


def _beside(req, document, candidates, kept, output_dir, env, context) -> Beside:
    """The pre-build (started now, beside the first engine) and the pre-spawned workers."""
    runs = planned_runs(candidates, kept, req.repeat_engine, lambda slug, start: _log_path(output_dir, slug, start))
    return start_beside(document, runs, req.engine, env, engine_env(env), output_dir / LOG_DIR,
                        attention=flashinfer_attention(candidates, runs, context.get("attention")))


def _log_path(output_dir: Path, slug: str, start: int) -> Path:
    return output_dir / LOG_DIR / (f"engine-{slug}.log" if start == 1 else f"engine-{slug}-start{start}.log")


@dataclass
class _Timing:
    """What the engines started so far took, for the next one's estimate and the progress count."""

    total: int
    done: int = 0
    starts: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)


def _timed_start(req, document, candidate, context, row, output_dir, progress, env, timing: _Timing,
                 start: int = 1) -> None:
    estimate = _estimate(req, document, candidate, timing.starts, timing.measured)
    progress.on_candidate(timing.done, timing.total, row, estimate)
    timing.done += 1
    _run_candidate(req, document, candidate, context, row, output_dir, progress, env, start)
    if row.get("start_s"):
        timing.starts.append(row["start_s"] - (row.get("engine", {}).get("torch_compile_s") or 0.0))
        timing.measured.append(max(0.0, (row.get("wall_s") or 0.0) - row["start_s"]))


def _restart_engines(req, document, candidates, context, output_dir, progress, env, timing: _Timing) -> None:
    """--repeat-engine N: starts 2..N of every pair that was not refused, round by round (A B A B,
    not A A B B, so a drift of the GPU over the run reaches every pair alike), each row's further
    starts kept under its "restarts"; a resumed row keeps the starts it already has."""
    if req.repeat_engine < 2:
        return
    for start in range(2, req.repeat_engine + 1):
        for candidate, row in zip(candidates, document["candidates"]):
            if candidate.reasons:
                continue
            restarts = row.setdefault("restarts", [])
            if len(restarts) >= start - 1:
                continue
            again = {"start": start, "name": f"{row['name']} start {start}", "short": f"{row['short']} #{start}",
                     "backend": row.get("backend"), "block_size": row.get("block_size")}
            _timed_start(req, document, candidate, context, again, output_dir, progress, env, timing, start)
            restarts.append(again)
            progress.on_candidate_done(again)
            write_document(document, output_dir)


def _estimate(req, document, candidate, starts, measured) -> float:
    cache = VP.compile_cache_root() / "torch_compile_cache"
    warm = cache.is_dir() and any(cache.iterdir())
    cubin = _installed("flashinfer-cubin")
    shapes = [tuple(s) for s in document["options"]["shapes"]]
    return (VP.start_estimate(candidate, starts, warm, cubin)
            + VP.measure_estimate(shapes, req.repeats, req.decode_steps, measured))


def _installed(distribution: str) -> bool:
    import importlib.metadata

    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _run_candidate(req, document, candidate, context, row, output_dir, progress, env, start: int = 1) -> None:
    gpu = wait_for_memory(context["gpu"].get("memory_free_bytes"), env)
    util, note = VP.memory_budget(gpu.get("memory_total_bytes"), gpu.get("memory_free_bytes"), req.gpu_memory_utilization)
    row.update(gpu_memory_utilization=util, memory_note=note, memory_free_bytes=gpu.get("memory_free_bytes"))
    log_path = _log_path(output_dir, candidate.slug, start)
    row["log"] = str(log_path.relative_to(output_dir))
    beside, key = context["beside"], (candidate.slug, start)
    process, prespawned = beside.take(key)
    run = run_engine(engine_job(req, document, candidate, context, util, start), log_path,
                     start_timeout_s=req.start_timeout_s, call_timeout_s=req.call_timeout_s,
                     env=engine_env(env), on_message=progress.on_message, on_tick=progress.on_tick,
                     process=process, on_spawned=lambda: beside.spawn_next(key),
                     hold=beside.hold_for(key, progress.on_tick, loads_built=runs_flashinfer(candidate)))
    beside.measured()
    own = release_log_patterns(document["vllm"].get("installed_version"))
    log = engine_log.parse_engine_log(engine_log.read_log(log_path), own)
    row.update(status=run.status, error=run.error, start_s=run.start_s, wall_s=run.wall_s, exit=run.exit,
               engine=engine_facts(run.facts, log, tuple(p.field for p in own)), shapes=[shape_row(s) for s in run.shapes])
    row.update({k: v for k, v in (("prespawn", prespawned), ("hold", run.hold)) if v})


def release_log_patterns(installed_version: str | None) -> tuple:
    """The log lines the engine's own release brought (engine_log.release_patterns); none without an
    installed vLLM (a stand-in engine logs what PATTERNS read)."""
    if not installed_version:
        return ()
    return engine_log.release_patterns(versions.select_profile(installed_version).profile.engine)


def engine_env(env) -> dict:
    """The engine's environment: ours (VLLM_CACHE_ROOT included, so every engine shares one compile
    cache), unbuffered, and vLLM's INFO log lines on unless the user chose a level: the backend,
    KV-cache and compile lines are evidence (bench/verify/engine_log.py)."""
    out = dict(env, PYTHONUNBUFFERED="1")
    out.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    return out


def shape_row(result: dict) -> dict:
    row = dict(result)
    if row.get("status") == "ok":
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
