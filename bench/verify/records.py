"""verify.json as typed records (bench/verify/run.py writes it): the candidates vLLM started, each
shape's figures, the comparisons with vLLM's default, the verdict and tune's advice it checked.
Read with `from_dict`, written back byte for byte with `to_dict` (bench/tune/records.py says
how); reports/tune/input_checks.py derives what `attnsel report` accepts from these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnsel.bench.tune import Record, Scalar, Verdict, required_field
from attnsel.bench.verify.compare import EngineVerdict, Judgement
from attnsel.bench.verify.status import ENGINE_STATUSES, SHAPE_STATUSES


@dataclass
class Figure(Record):
    """median (and relative spread) of one figure over the repeats (compare.py shape_figures)."""

    median: float | None = field(default=None, metadata={"above_zero": True})  # a time or a rate: above 0
    spread: float | None = None


@dataclass
class ShapeFigures(Record):
    decode_step_ms: Figure | None = None
    output_tokens_per_s: Figure | None = None
    prefill_tokens_per_s: Figure | None = None


@dataclass
class EngineFacts(Record):
    """What one engine logged about itself (bench/verify/engine_log.py)."""

    vllm_version: str | None = None
    backend_used: str | None = None
    block_size_used: Scalar | None = None
    torch_compile_s: float | None = None
    compile_cache: str | None = None
    graph_capture_s: float | None = None
    flashinfer_autotune_s: float | None = None
    kv_cache_tokens: float | None = None
    num_gpu_blocks: float | None = None
    cudagraph_mode: str | None = None


@dataclass
class ShapeResult(Record):
    batch: int | None = None
    context: int | None = None
    n1: int | None = None
    n2: int | None = None
    status: str | None = field(default=None, metadata={"one_of": SHAPE_STATUSES})
    error: str | None = None
    label: str | None = None
    requests_fit: float | None = None
    kernel_ms: float | None = None
    attention_share: float | None = None
    figures: ShapeFigures | None = None


@dataclass
class EngineStart(Record):
    """One engine start of a pair: the candidate's own row, and each further start (--repeat-engine)."""

    short: str | None = None
    name: str | None = None
    status: str | None = field(default=None, metadata={"one_of": ENGINE_STATUSES})
    error: str | None = None
    start_s: float | None = None
    roles: list[str] | None = None
    engine: EngineFacts | None = None
    shapes: list[ShapeResult] | None = None
    # the pair (bench/verify/plan.py Candidate.to_dict) and how its engine ran (bench/verify/run.py)
    backend: str | None = None
    block_size: int | None = None
    start: int | None = None  # a further start's number (--repeat-engine)
    predicted: list[Scalar] | None = None  # vLLM's predicted pair: [backend, block size]
    flags: str | None = None
    reasons: list[str] | None = None
    gpu_memory_utilization: float | None = None
    memory_note: str | None = None
    memory_free_bytes: float | None = None
    log: str | None = None
    wall_s: float | None = None
    exit: str | None = None
    resumed: bool | None = None
    prespawn: dict[str, object] | None = None  # the worker spawned ahead of its turn (bench/verify/beside.py)
    hold: dict[str, object] | None = None


@dataclass
class Candidate(EngineStart):
    restarts: list[EngineStart] | None = None  # --repeat-engine: the pair's further engine starts


@dataclass
class Judged(Record):
    """One figure of a candidate against vLLM's default at one shape."""

    margin_pct: float | None = None
    noise_pct: float | None = None
    result: Judgement | None = None
    within_noise_pct: float | None = None  # --repeat-engine: the gate before the start-to-start spread
    start_spread_pct: float | None = None


@dataclass
class Comparison(Record):
    short: str | None = None
    candidate: str | None = None
    batch: int = required_field()
    context: int = required_field()
    missing: str | None = None
    predicted_kernel_margin_pct: float | None = None
    predicted_source: str | None = None
    expected_step_margin_pct: float | None = None
    decode: Judged | None = None
    end_to_end: Judged | None = None
    prefill: Judged | None = None
    roles: list[str] | None = None
    flags: str | None = None
    shape: str | None = None


@dataclass
class StartFigure(Record):
    """One figure of a pair over its engine starts (bench/verify/verdict.py engine_start_spreads)."""

    medians: list[float] | None = None
    median: float | None = None
    start_spread_pct: float | None = None
    within_noise_pct: float | None = None
    gate_pct: float | None = None


@dataclass
class StartSpread(Record):
    """A pair started --repeat-engine times, at one shape: the spread between its starts."""

    short: str | None = None
    candidate: str | None = None
    batch: int | None = None
    context: int | None = None
    starts: int | None = None
    measured: int | None = None
    decode: StartFigure | None = None
    end_to_end: StartFigure | None = None
    shape: str | None = None


@dataclass
class ShapeVerdict(Record):
    """One shape's word on tune's advice (bench/verify/verdict.py _shape_verdict)."""

    shape: str | None = None
    end_to_end: EngineVerdict | None = None
    decode: EngineVerdict | None = None


@dataclass
class BestPair(Record):
    """The pair with the best tokens/s end to end (bench/verify/verdict.py best_end_to_end)."""

    name: str | None = None
    flags: str | None = None
    gain_pct: float | None = None


@dataclass
class VerdictRecord(Record):
    """The verdict: with a subject compared, the pick and the question asked come first; without
    one ("not measured"), only the word, the empty shapes and the reason (bench/verify/verdict.py)."""

    verdict: EngineVerdict | None = None
    text: str | None = None
    flags: str | None = None
    pick: str | None = None
    pick_is_default: bool | None = None
    tune_advised_flags: bool | None = None
    min_gain_pct: float | None = None
    compared: str | None = None
    shapes: list[ShapeVerdict] | None = None
    best_end_to_end: BestPair | None = None


@dataclass
class ModelFacts(Record):
    name: str | None = None
    model_type: str | None = None
    attention_layers: Scalar | None = None
    is_hybrid: bool | None = None
    tensor_parallel_size: Scalar | None = None
    num_hidden_layers: Scalar | None = None
    max_position_embeddings: Scalar | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None


@dataclass
class GpuFacts(Record):
    name: str | None = None
    memory_total_bytes: float | None = None
    memory_used_bytes: float | None = None


@dataclass
class VllmFacts(Record):
    installed_version: str | None = None
    rule_profile: str | None = None
    predicted_default: list[Scalar] | None = None  # [backend, block size] vLLM picks without flags


@dataclass
class VerifyOptions(Record):
    gpu_memory_utilization: float | None = None
    max_model_len: Scalar | None = None
    repeats: Scalar | None = None
    repeat_engine: Scalar | None = None
    # the rest of the options bench/verify/request.py writes
    shapes: list[list[int]] | None = None
    decode_steps: int | None = None
    gpu_memory_utilization_requested: float | None = None
    engine_overrides: dict[str, object] | None = None
    start_timeout_s: float | None = None
    call_timeout_s: float | None = None
    engine: str | None = None
    compile_cache_root: str | None = None
    prefix_caching: bool | None = None
    weights: str | None = None


@dataclass
class TuneAdvice(Record):
    """The tune decision verify checked (bench/verify/request.py _tune_summary)."""

    margin_pct: float | None = None
    verdict: Verdict | None = None
    scope: str | None = None
    source: str | None = None
    flags: str | None = None
    advised_flags: str | None = None
    min_gain_pct: float | None = None
    advice: str | None = None
    gpu: str | None = None
    created: str | None = None


@dataclass
class VerifyDocument(Record):
    candidates: list[Candidate] = required_field()  # noqa: RUF009 -- a field() marked required, not a shared default
    comparisons: list[Comparison] | None = None
    warnings: list[str] | None = None
    verdict: VerdictRecord | None = None
    model: ModelFacts | None = None
    gpu: GpuFacts | None = None
    vllm: VllmFacts | None = None
    options: VerifyOptions = required_field()  # noqa: RUF009 -- a field() marked required, not a shared default
    tune: TuneAdvice | None = None
    engine_starts: list[StartSpread] | None = None
