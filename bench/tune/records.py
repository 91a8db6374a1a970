"""tune.json as typed records: a decision, the recommendation, the plan and environment fields the
reports read, and the document that holds them; the result row is bench/sweep/results.py's, the
record framework bench/sweep/record.py (both lie below tune: the worker writes rows).

Each record is a dataclass read from the JSON with `from_dict` and written back with `to_dict`,
byte for byte: a field keeps its place in the object, a field this version does not know is kept
as it was (documents from newer attnsel versions add fields), and an absent field stays absent
(absent and null are not the same to a reader of the file). The field types are the one
description of the format: reports/tune/input_checks.py derives what `attnsel report` accepts
from them. Metadata on a field: "key" (its JSON name where that is no Python name), "required"
(it must be present and not null), "positive" (a whole number above 0), "above_zero" (a number
above 0: a time; "not measured" is null), "one_of" (the words it may hold), "required_if"
((key, value): required when the record's key holds value).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnsel.bench.sweep.record import Record as Record
from attnsel.bench.sweep.record import Scalar as Scalar
from attnsel.bench.sweep.record import absent_field as absent_field
from attnsel.bench.sweep.record import positive_field as positive_field
from attnsel.bench.sweep.record import renamed_field as renamed_field
from attnsel.bench.sweep.record import required_field as required_field
from attnsel.bench.sweep.results import ResultRow as ResultRow
from attnsel.bench.sweep.results import Timing as Timing
from attnsel.bench.sweep.results import Workload as Workload
from attnsel.bench.tune.verdict import Verdict

# --- the recommendation (bench/tune/recommend.py) ----------------------------------------------


@dataclass
class Choice(Record):
    """A (backend, block size) pair with its score: a decision's best, vLLM's default, a ranked config
    (bench/tune/recommend.py scores them; tune.json holds them)."""

    backend: str = absent_field()
    block_size: int = positive_field()
    geomean_ms: float | None = None
    kernel_block_size: int | None = None
    shapes: int | None = None
    vs_best: str | None = None  # "best", "tie" (within noise of it) or "slower"
    launch: str | None = None  # "graph", "eager" or "graph+eager"

    written_order = ("backend", "block_size", "kernel_block_size", "geomean_ms", "shapes", "vs_best", "launch")

    @property
    def config(self) -> tuple[str, int]:
        return (self.backend, self.block_size)

    @property
    def score_ms(self) -> float:
        """The geometric-mean time of a config recommend.py scored (it always has one)."""
        if self.geomean_ms is None:
            raise ValueError(f"{self.backend} --block-size {self.block_size} has no score")
        return self.geomean_ms


@dataclass
class Disqualified(Record):
    """A config whose rows failed the correctness check: reported, never recommended."""

    backend: str | None = None
    block_size: int | None = None
    reason: str | None = None


@dataclass
class DecisionRecord(Record):
    """One workload kind's (or the overall) decision as tune.json holds it."""

    scope: str | None = None
    best: Choice | None = None
    vllm_default: Choice | None = None
    margin_pct: float | None = None
    noise_threshold_pct: float | None = None
    verdict: Verdict | None = None
    flags: str | None = None
    advice: str | None = None
    above_noise: bool | None = None
    advised_flags: str | None = None
    min_gain_pct: float | None = None
    ranking: list[Choice] | None = None
    weights: dict[str, float] | None = None


@dataclass
class RecommendationRecord(Record):
    overall: DecisionRecord | None = None
    workloads: dict[str, DecisionRecord | None] | None = None
    vllm_default: Choice | None = None
    disqualified: list[Disqualified] | None = None


# --- the plan and the environment --------------------------------------------------------------


@dataclass
class PlanShape(Record):
    model: str | None = None
    tensor_parallel_size: int | None = None
    head_size: int | None = None
    num_q_heads: int | None = None
    num_kv_heads: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None


@dataclass
class PlanConfig(Record):
    backend: str = absent_field()
    block_size: int = positive_field()
    status: str | None = None
    reasons: list[str] | None = None


@dataclass
class PlanDefault(Record):
    backend: str | None = None
    block_size: int | None = None


@dataclass
class PlanRecord(Record):
    capability: Scalar | None = None
    gpu: str | None = None
    grid: str | None = None
    shape: PlanShape | None = None
    configs: list[PlanConfig] | None = None
    vllm_default: PlanDefault | None = None


@dataclass
class GpuEnvironment(Record):
    name: str | None = None
    memory_total_bytes: float | None = None
    peak_memory_bandwidth_bytes_per_s: float | None = None
    peak_bandwidth_source: str | None = None
    driver_version: Scalar | None = None
    cuda_driver_version: Scalar | None = None


@dataclass
class DeviceEnvironment(Record):
    name: str | None = None
    capability: list[int] | None = None
    total_memory_bytes: float | None = None
    torch_cuda: Scalar | None = None
    versions: dict[str, Scalar | None] | None = None


@dataclass
class Environment(Record):
    gpu: GpuEnvironment | None = None
    device: DeviceEnvironment | None = None
    versions: dict[str, Scalar | None] | None = None
    clocks: dict | None = None  # NVML's clocks before and after the sweep (bench/tune/env_info.py)
    workers: dict | None = None  # each backend worker's own report of its libraries and device

    written_order = ("gpu", "device", "clocks", "workers", "versions")


@dataclass
class TuneDocument(Record):
    """tune.json: written by bench/tune/document.py and read back by `attnsel report` (or a bare
    results.jsonl read as {"rows": [...]})."""

    rows: list[ResultRow] = absent_field()  # noqa: RUF009 -- None when absent, never a shared default
    recommendation: RecommendationRecord | None = None
    plan: PlanRecord | None = None
    environment: Environment | None = None
    warnings: list[str] | None = None
    note: str | None = renamed_field("_note")
    created: str | None = None
    elapsed_s: float | None = None
    options: dict | None = None  # the sweep's options (bench/sweep SweepOptions.to_dict), read as written
    phases: dict | None = None  # where the wall time went (bench/tune/phases.py), read as written
    schema: str | None = None  # "attnsel-tune/1"
    attnsel_version: str | None = None
    gpus: dict | None = None  # --gpus: the GPUs asked for, their calibration and lanes (bench/tune/run.py)

    written_order = ("schema", "attnsel_version", "created", "plan", "options", "environment", "elapsed_s", "rows",
                     "recommendation", "warnings", "phases", "gpus")
    written_if_set = frozenset({"phases", "gpus"})  # bench/tune/run.py adds them
