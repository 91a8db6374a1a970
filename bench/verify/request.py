"""What `attnsel verify` decides before its first engine starts: the request (its options, parsed and
checked once), its inputs (the tune result, the model's config, the installed vLLM) and the plan
of the run (the verify.json so far, the engines to start, and the release data of the installed
vLLM, chosen once). bench/verify/run.py then runs the engines.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from attnsel import __version__
from attnsel.attention import versions
from attnsel.attention.model import attention_layer_count, check_size
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
from attnsel.bench.verify.engine_process import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
)
from attnsel.bench.verify.flags import (
    ENGINE_ENV,
    MAX_ENGINE_STARTS,
    MAX_REPEATS,
)
from attnsel.bench.verify.gpu_state import read_gpu
from attnsel.bench.verify.records import (
    ModelFacts,
    TuneAdvice,
    VerifyOptions,
    VllmFacts,
)
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from attnsel.attention.versions import RuleProfile

SCHEMA = "attnsel-verify/1"
LOG_DIR = "verify"  # engine logs and the model's config.json, inside the run folder
TUNE_DOCUMENT = "tune.json"
# vLLM 0.24.0's own default (vllm/config/cache.py:67): engines get the share a deployment gets


@dataclass(frozen=True)
class VerifyRequest:
    """verify's options, parsed and checked once (cli/verify_cmd.py and bench/verify/flags.py;
    `tune --verify`: the sweep's folder alone). The counts it holds are checked here, where it is made."""

    tune_dir: Path | None = None  # a `tune --output` folder: its tune.json gives candidates and kernel margins
    model: str | None = None  # config.json, folder or catalog name (default: the tuned model)
    candidates: list[tuple[str, int]] | None = None  # instead of tune's pick and runner-up
    shapes: list[tuple[int, int]] | None = None  # (batch, context) decode shapes
    repeats: int = 2  # timed N1/N2 pairs per shape (>= 2: the spread is the noise)
    repeat_engine: int = 1  # engine starts per pair (>= 2: their spread is reported and gates the verdict)
    decode_steps: int = 128  # N2 - N1
    gpu_memory_utilization: float | None = None  # None: the release's own default (vLLM chooses it)
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    engine: str = field(default_factory=lambda: os.environ.get(ENGINE_ENV) or EW.DEFAULT_ENGINE)
    resume: bool = False  # keep the engines a previous run in the same folder measured (same options)

    def __post_init__(self) -> None:
        if self.repeats < 2:
            raise UserInputError("--repeats must be at least 2: the spread of the repeats is the noise the verdict uses")
        if self.repeats > MAX_REPEATS:
            raise UserInputError(f"--repeats {self.repeats} is too many: at most {MAX_REPEATS} timed pairs per shape")
        check_size("--repeat-engine", self.repeat_engine, minimum=1, maximum=MAX_ENGINE_STARTS)


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


@dataclass
class VerifyPlan:
    """Everything decided before the first engine: the document so far, the engines to start, and
    what the runs read (the installed vLLM's release data is chosen once, here)."""

    document: dict
    candidates: list[VP.Candidate]
    hf_config: dict
    tune_doc: dict | None
    gpu: dict
    model_dir: Path
    attention: dict
    profile: RuleProfile
    log_patterns: tuple[engine_log.LogPattern, ...]  # the lines the installed release brought
    options: VerifyOptions  # the document's "options" and "model", as their records
    model: ModelFacts


def plan_document(req: VerifyRequest, output_dir: Path, vllm_version: str | None,
                  env: Mapping[str, str] = os.environ) -> VerifyPlan:
    """Everything decided before the first engine (`vllm_version`: vllm_version_or_fail's)."""
    tune_doc = load_tune_document(req.tune_dir) if req.tune_dir else None
    if tune_doc is None and req.candidates is None:
        raise UserInputError("pass a tune result folder (attnsel verify RUN_DIR) or --candidates BACKEND:BLOCK_SIZE,...")
    gpu = read_gpu(env)
    capability = (int(gpu["capability"][0]), int(gpu["capability"][1]))
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
                                         req.gpu_memory_utilization, profile.memory)
    # the parts decided here are built as their records (bench/verify/records.py), keys in the order written
    model = ModelFacts.new(
        name=model_name, model_type=hf_config.get("model_type"), attention_layers=attention_layer_count(hf_config),
        num_hidden_layers=(hf_config.get("text_config") or hf_config).get("num_hidden_layers"),
        is_hybrid=shape.is_hybrid, max_position_embeddings=model_max, tensor_parallel_size=shape.tensor_parallel_size,
        dtype=shape.dtype, kv_cache_dtype=shape.kv_cache_dtype)
    options = VerifyOptions.new(
        shapes=[list(s) for s in shapes], repeats=req.repeats, decode_steps=req.decode_steps,
        gpu_memory_utilization_requested=req.gpu_memory_utilization, gpu_memory_utilization=util,
        max_model_len=VP.max_model_len_for(shapes, req.decode_steps, model_max),
        engine_overrides=VP.graph_overrides(profile.cudagraph, shapes),
        start_timeout_s=req.start_timeout_s, call_timeout_s=req.call_timeout_s,
        engine=req.engine, compile_cache_root=str(VP.compile_cache_root(env)),
        prefix_caching=False, weights="dummy (load_format=dummy, config.json only)",
        **({"repeat_engine": req.repeat_engine} if req.repeat_engine > 1 else {}))
    vllm = VllmFacts.new(installed_version=vllm_version, rule_profile=profile.name,
                         predicted_default=list(vllm_default) if vllm_default else None)
    tune = _tune_summary(req, tune_doc)
    document = {
        "schema": SCHEMA, "attnsel_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "tune": tune.to_dict() if tune else None, "model": model.to_dict(),
        "gpu": {k: gpu.get(k) for k in ("name", "capability", "uuid", "memory_total_bytes", "memory_free_bytes",
                                        "memory_used_bytes", "processes")},
        "vllm": vllm.to_dict(), "options": options.to_dict(),
        "candidates": [], "comparisons": [], "verdict": None,
        "warnings": [memory_note] if memory_note else [],
    }
    return VerifyPlan(document, candidates, hf_config, tune_doc, gpu,
                 model_dir=write_model_dir(hf_config, Path(output_dir) / LOG_DIR / "model"),
                 attention={"dtype": shape.dtype, "head_size": shape.head_size, "kv_cache_dtype": shape.kv_cache_dtype},
                 profile=profile, log_patterns=_own_patterns(profile, vllm_version), options=options, model=model)


def _tune_summary(req: VerifyRequest, tune_doc: dict | None) -> TuneAdvice | None:
    if not tune_doc:
        return None
    tune = TuneDocument.from_dict(tune_doc)
    assert isinstance(tune, TuneDocument)
    scope = VP.tune_scope(tune.recommendation) or DecisionRecord()
    gpu = (tune.environment.gpu if tune.environment else None) or GpuEnvironment()
    return TuneAdvice.new(source=str(req.tune_dir), scope=scope.scope, verdict=scope.verdict,
                          margin_pct=scope.margin_pct, flags=scope.flags, advice=scope.advice,
                          advised_flags=advised_flags(scope), min_gain_pct=scope.min_gain_pct,
                          gpu=gpu.name or (tune.plan.gpu if tune.plan else None), created=tune.created)


def release_log_patterns(installed_version: str | None) -> tuple[engine_log.LogPattern, ...]:
    """The log lines the engine's own release brought (engine_log.release_patterns); none without an
    installed vLLM (a stand-in engine logs what PATTERNS read)."""
    if not installed_version:
        return ()
    return _own_patterns(versions.select_profile(installed_version).profile, installed_version)


def _own_patterns(profile: RuleProfile, installed_version: str | None) -> tuple[engine_log.LogPattern, ...]:
    """release_log_patterns for the profile already chosen for the installed vLLM."""
    return engine_log.release_patterns(profile.engine) if installed_version else ()
