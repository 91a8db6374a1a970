"""verify.json as typed records (bench/verify/run.py writes it): the candidates vLLM started, each
shape's figures, the comparisons with vLLM's default, the verdict and tune's advice it checked.
Read with `from_dict`, written back byte for byte with `to_dict` (bench/tune/records.py says
how); reports/tune/input_checks.py derives what `attnsel report` accepts from these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from attnsel.bench.tune import Record, Scalar, Verdict, required_field
from attnsel.bench.verify.compare import EngineVerdict, Judgement


# What an engine start and a shape may end with: engine_process.py CandidateRun.status (ok, error, oom,
# timeout, crashed), run.py (refused: vLLM's rules refuse the pair), engine_worker.py (does not fit) and
# engine_process.py (not run: an earlier shape stopped the engine).
ENGINE_STATUSES = ("ok", "error", "oom", "timeout", "crashed", "refused")
SHAPE_STATUSES = ("ok", "error", "oom", "timeout", "crashed", "does not fit", "not run")


@dataclass
class Figure(Record):
    """median (and relative spread) of one figure over the repeats (compare.py shape_figures)."""

    median: Optional[float] = field(default=None, metadata={"above_zero": True})  # a time or a rate: above 0
    spread: Optional[float] = None


@dataclass
class ShapeFigures(Record):
    decode_step_ms: Optional[Figure] = None
    output_tokens_per_s: Optional[Figure] = None
    prefill_tokens_per_s: Optional[Figure] = None


@dataclass
class EngineFacts(Record):
    """What one engine logged about itself (bench/verify/engine_log.py)."""

    vllm_version: Optional[str] = None
    backend_used: Optional[str] = None
    block_size_used: Optional[Scalar] = None
    torch_compile_s: Optional[float] = None
    compile_cache: Optional[str] = None
    graph_capture_s: Optional[float] = None
    flashinfer_autotune_s: Optional[float] = None
    kv_cache_tokens: Optional[float] = None
    num_gpu_blocks: Optional[float] = None
    cudagraph_mode: Optional[str] = None


@dataclass
class ShapeResult(Record):
    batch: Optional[int] = None
    context: Optional[int] = None
    n1: Optional[int] = None
    n2: Optional[int] = None
    status: Optional[str] = field(default=None, metadata={"one_of": SHAPE_STATUSES})
    error: Optional[str] = None
    label: Optional[str] = None
    requests_fit: Optional[float] = None
    kernel_ms: Optional[float] = None
    attention_share: Optional[float] = None
    figures: Optional[ShapeFigures] = None


@dataclass
class EngineStart(Record):
    """One engine start of a pair: the candidate's own row, and each further start (--repeat-engine)."""

    short: Optional[str] = None
    name: Optional[str] = None
    status: Optional[str] = field(default=None, metadata={"one_of": ENGINE_STATUSES})
    error: Optional[str] = None
    start_s: Optional[float] = None
    roles: Optional[list[str]] = None
    engine: Optional[EngineFacts] = None
    shapes: Optional[list[ShapeResult]] = None


@dataclass
class Candidate(EngineStart):
    restarts: Optional[list[EngineStart]] = None  # --repeat-engine: the pair's further engine starts


@dataclass
class Judged(Record):
    """One figure of a candidate against vLLM's default at one shape."""

    margin_pct: Optional[float] = None
    noise_pct: Optional[float] = None
    result: Optional[Judgement] = None
    within_noise_pct: Optional[float] = None  # --repeat-engine: the gate before the start-to-start spread
    start_spread_pct: Optional[float] = None


@dataclass
class Comparison(Record):
    short: Optional[str] = None
    candidate: Optional[str] = None
    batch: int = required_field()
    context: int = required_field()
    missing: Optional[str] = None
    predicted_kernel_margin_pct: Optional[float] = None
    predicted_source: Optional[str] = None
    expected_step_margin_pct: Optional[float] = None
    decode: Optional[Judged] = None
    end_to_end: Optional[Judged] = None
    prefill: Optional[Judged] = None


@dataclass
class StartFigure(Record):
    """One figure of a pair over its engine starts (bench/verify/verdict.py engine_start_spreads)."""

    medians: Optional[list[float]] = None
    median: Optional[float] = None
    start_spread_pct: Optional[float] = None
    within_noise_pct: Optional[float] = None
    gate_pct: Optional[float] = None


@dataclass
class StartSpread(Record):
    """A pair started --repeat-engine times, at one shape: the spread between its starts."""

    short: Optional[str] = None
    candidate: Optional[str] = None
    batch: Optional[int] = None
    context: Optional[int] = None
    starts: Optional[int] = None
    measured: Optional[int] = None
    decode: Optional[StartFigure] = None
    end_to_end: Optional[StartFigure] = None


@dataclass
class VerdictRecord(Record):
    verdict: Optional[EngineVerdict] = None
    text: Optional[str] = None
    flags: Optional[str] = None


@dataclass
class ModelFacts(Record):
    name: Optional[str] = None
    model_type: Optional[str] = None
    attention_layers: Optional[Scalar] = None
    is_hybrid: Optional[bool] = None
    tensor_parallel_size: Optional[Scalar] = None


@dataclass
class GpuFacts(Record):
    name: Optional[str] = None
    memory_total_bytes: Optional[float] = None
    memory_used_bytes: Optional[float] = None


@dataclass
class VllmFacts(Record):
    installed_version: Optional[str] = None
    rule_profile: Optional[str] = None


@dataclass
class VerifyOptions(Record):
    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[Scalar] = None
    repeats: Optional[Scalar] = None
    repeat_engine: Optional[Scalar] = None


@dataclass
class TuneAdvice(Record):
    """The tune decision verify checked (bench/verify/run.py _tune_summary)."""

    margin_pct: Optional[float] = None
    verdict: Optional[Verdict] = None
    scope: Optional[str] = None
    source: Optional[str] = None
    flags: Optional[str] = None
    advised_flags: Optional[str] = None
    min_gain_pct: Optional[float] = None


@dataclass
class VerifyDocument(Record):
    candidates: list[Candidate] = required_field()
    comparisons: Optional[list[Comparison]] = None
    warnings: Optional[list[str]] = None
    verdict: Optional[VerdictRecord] = None
    model: Optional[ModelFacts] = None
    gpu: Optional[GpuFacts] = None
    vllm: Optional[VllmFacts] = None
    options: VerifyOptions = required_field()
    tune: Optional[TuneAdvice] = None
    engine_starts: Optional[list[StartSpread]] = None
