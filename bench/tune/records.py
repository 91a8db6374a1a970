"""tune.json as typed records: a result row, a decision, the recommendation, the plan and
environment fields the reports read, and the document that holds them.

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

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import UnionType
from typing import Any, ClassVar, TypeVar, Union

from attnsel.bench.sweep import STATUS_OK, STATUSES
from attnsel.bench.tune.verdict import Verdict

Scalar = str | int | float  # a version or a capability: "9.0", 12.4, 550
R = TypeVar("R", bound="Record")


def required_field(**metadata: Any) -> Any:
    return field(default=None, metadata={"required": True, **metadata})


def positive_field(**metadata: Any) -> Any:
    return field(default=None, metadata={"positive": True, **metadata})


def renamed_field(name: str) -> Any:
    return field(default=None, metadata={"key": name})


def absent_field() -> Any:
    """A field that is never null in a document, though it may be absent (then None here)."""
    return field(default=None)


@dataclass
class Record:
    """The base of every record: the JSON keys in their order, and the keys this version does not know."""

    _keys: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)
    _unknown: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _types: ClassVar[dict[type, dict]] = {}
    _readers: ClassVar[dict[type, dict]] = {}
    # A record built in code (not read from a file) writes its keys in this order (None: the
    # fields' order), leaving out the keys of `written_if_set` while they hold None.
    written_order: ClassVar[tuple[str, ...] | None] = None
    written_if_set: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def json_fields(cls) -> dict[str, tuple[str, Any, Mapping]]:
        """JSON key -> (attribute, type, metadata), in the order the document writes them."""
        if cls not in Record._types:
            hints = typing.get_type_hints(cls)
            Record._types[cls] = {f.metadata.get("key", f.name): (f.name, hints[f.name], f.metadata)
                                  for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        return Record._types[cls]

    @classmethod
    def from_dict(cls: type[R], data: Mapping) -> R:
        readers = Record._readers.get(cls)
        if readers is None:  # worked out once per record type: a sweep's tune.json holds thousands of rows
            fields = cls.json_fields().items()
            readers = Record._readers[cls] = {k: (name, _reader(kind)) for k, (name, kind, _m) in fields}
        values, unknown = {}, {}
        for key, value in data.items():
            if key in readers:
                name, read = readers[key]
                values[name] = value if read is None else read(value)
            else:
                unknown[key] = value
        record = cls(**values)
        record._keys, record._unknown = tuple(data), unknown
        return record

    def __bool__(self) -> bool:
        """A record read from an empty object is as falsy as that object (`record or default`
        reads like the `.get(key) or {}` it replaces); one built in code is true."""
        return self._keys is None or bool(self._keys)

    def to_dict(self) -> dict:
        known = self.json_fields()
        keys = self._keys if self._keys is not None else self._written_keys()
        return {k: _write(getattr(self, known[k][0])) if k in known else self._unknown[k] for k in keys}

    def _written_keys(self) -> tuple[str, ...]:
        known = self.json_fields()
        return tuple(k for k in self.written_order or tuple(known)
                     if k not in self.written_if_set or getattr(self, known[k][0]) is not None)


def _reader(kind: Any) -> Callable[[Any], Any] | None:
    """How a JSON value becomes a field of type `kind` (None: as it is): a record from its object, a
    verdict from its word, lists and maps item by item. A value of another shape stays as it is:
    the input checks decide what a report refuses, and a record never loses what the file held."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, UnionType):  # Optional[X] and X | None
        inner = [a for a in args if a is not type(None)]
        return _reader(inner[0]) if len(inner) == 1 else None
    if isinstance(kind, type) and issubclass(kind, Record):
        return lambda value: kind.from_dict(value) if isinstance(value, Mapping) else value
    if isinstance(kind, type) and issubclass(kind, Enum):
        words = {member.value: member for member in kind}
        return lambda value: words.get(value, value) if isinstance(value, str) else value  # a newer word stays a word
    item = _reader(args[-1]) if origin in (list, dict) else None
    if item is None:
        return None
    if origin is list:
        return lambda value: [item(v) for v in value] if isinstance(value, list) else value
    return lambda value: {k: item(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def _write(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_write(v) for v in value]
    if isinstance(value, dict):
        return {k: _write(v) for k, v in value.items()}
    return value


# --- a results row (bench/sweep/results.py) ----------------------------------------------------


def time_field(**metadata: Any) -> Any:
    return field(default=None, metadata={"above_zero": True, **metadata})


@dataclass
class Timing(Record):
    # the recommendation's geometric mean and every ratio divide by these: a time is above zero
    median_ms: float | None = time_field(required=True)
    p20_ms: float | None = time_field()
    p80_ms: float | None = time_field()
    n: int | None = None
    l2: str | None = None
    mode: str | None = None
    timer: str | None = None  # "cupti" or "events"


@dataclass
class Workload(Record):
    batch: int | None = None
    context_len: int | None = None
    query_len: int | None = None
    kind: str | None = None
    label: str | None = None


@dataclass
class ResultRow(Record):
    backend: str = required_field()
    block_size: int = positive_field(required=True)
    status: str = required_field(one_of=STATUSES)
    key: str = absent_field()
    kind: str | None = None
    workload_label: str | None = None
    error: str | None = None
    adapter: str | None = None
    provider: str | None = None
    mode: str | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    checked: bool | None = None
    kernel_block_size: int | None = None
    workload: Workload | None = None
    timing: Timing | None = field(default=None, metadata={"required_if": ("status", STATUS_OK)})  # a measured row
    bandwidth_bytes_per_s: float | None = None
    pct_of_peak_bandwidth: float | None = None
    tflops: float | None = None
    rel_error: float | None = None
    first_call_s: float | None = None
    peak_memory_bandwidth_bytes_per_s: float | None = None
    vllm_reasons: list[str] | None = None
    launch: str | None = None  # "graph" or "eager": how the timed calls were launched
    kernel_block_size_used: int | None = None
    setup_s: float | None = None
    library_import_s: float | None = None


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
