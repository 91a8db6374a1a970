"""The workload shapes `attnsel tune` times for each kind (decode, prefill, mixed).

Default grid (sized so one model shape takes < 3 min cold, < 60 s warm on one GPU):
  decode       batch {1, 16, 64, 256} x context {1024, 4096, 16384}, minus shapes whose KV cache
               exceeds 2**20 tokens (256 x 16384): 11 shapes
  prefill      chunked prefill: 1 x 2048 new tokens on an empty cache, 1 x 2048 new tokens
               after 14336 cached ones (context 16384), 4 x 512 new after 3584 (context 4096)
  mixed        decodes and chunked prefills in one step, as vLLM's scheduler mixes them (one
               request in eight brings a chunk): 32 requests at context 4096 with 512-token
               chunks, 128 requests at context 2048 with 256-token chunks
`--quick` keeps 3 decode, 1 prefill and 1 mixed shape; `--full` widens decode to batch
{1,4,16,32,64,128,256} x context {512 ... 32768} (up to 2**22 KV tokens) and adds prefill/mixed.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from attnsel.attention.kernels.base import (
    WorkloadKind,  # one definition (torch-free), the plan's too
)
from attnsel.errors import UserInputError

WORKLOAD_KINDS: tuple[WorkloadKind, ...] = tuple(WorkloadKind)
GRIDS: tuple[str, ...] = ("quick", "default", "full")


@dataclass(frozen=True)
class WorkloadSpec:
    """One timed shape, as attention/kernels/paged.py `Workload` builds it. `context_len` is each
    request's KV length (cached + new tokens, like vLLM's seq_lens; lengths are ragged around it);
    `query_len` the new tokens per request (1 for decode). For "mixed", one request in eight (at
    least one) brings a `query_len` chunk and the rest decode (paged.mixed_prefill_count)."""

    kind: WorkloadKind
    batch: int
    context_len: int
    query_len: int = 1

    def label(self) -> str:
        if self.kind == WorkloadKind.DECODE:
            return f"decode b={self.batch} ctx={self.context_len}"
        if self.kind == WorkloadKind.PREFILL:
            return f"prefill b={self.batch} q={self.query_len} ctx={self.context_len}"
        return f"mixed b={self.batch} ctx={self.context_len} chunk={self.query_len}"

    @property
    def kv_tokens(self) -> int:
        return self.batch * self.context_len

    @property
    def query_tokens(self) -> int:
        if self.kind == WorkloadKind.MIXED:
            chunks = mixed_prefill_count(self.batch)
            return (self.batch - chunks) + chunks * self.query_len
        return self.batch * self.query_len

    def to_dict(self) -> dict:
        d = asdict(self)
        d["label"] = self.label()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> WorkloadSpec:
        return cls(WorkloadKind(d["kind"]), int(d["batch"]), int(d["context_len"]), int(d.get("query_len", 1)))


def mixed_prefill_count(batch: int) -> int:
    """Same rule as attention/kernels/paged.py (kept here so the parent stays torch-free)."""
    if batch == 1:
        return 1
    return min(batch - 1, max(1, batch // 8))


def _decode_grid(batches: Iterable[int], contexts: Iterable[int], max_kv_tokens: int) -> list[WorkloadSpec]:
    return [WorkloadSpec(WorkloadKind.DECODE, b, c) for b in batches for c in contexts if b * c <= max_kv_tokens]


def workload_grid(kinds: Sequence[WorkloadKind], grid: str = "default") -> list[WorkloadSpec]:
    """The shapes timed for each workload kind (see the module docstring for the reasoning)."""
    if grid not in GRIDS:
        raise UserInputError(f"unknown grid {grid!r}")
    decode = {
        "quick": [WorkloadSpec(WorkloadKind.DECODE, 1, 4096), WorkloadSpec(WorkloadKind.DECODE, 64, 4096), WorkloadSpec(WorkloadKind.DECODE, 256, 1024)],
        "default": _decode_grid((1, 16, 64, 256), (1024, 4096, 16384), 2**20),
        "full": _decode_grid((1, 4, 16, 32, 64, 128, 256), (512, 1024, 2048, 4096, 8192, 16384, 32768), 2**22),
    }
    prefill = {
        "quick": [WorkloadSpec(WorkloadKind.PREFILL, 1, 2048, 2048)],
        "default": [WorkloadSpec(WorkloadKind.PREFILL, 1, 2048, 2048), WorkloadSpec(WorkloadKind.PREFILL, 1, 16384, 2048),
                    WorkloadSpec(WorkloadKind.PREFILL, 4, 4096, 512)],
        "full": [WorkloadSpec(WorkloadKind.PREFILL, 1, 2048, 2048), WorkloadSpec(WorkloadKind.PREFILL, 1, 16384, 2048),
                 WorkloadSpec(WorkloadKind.PREFILL, 4, 4096, 512), WorkloadSpec(WorkloadKind.PREFILL, 1, 8192, 8192),
                 WorkloadSpec(WorkloadKind.PREFILL, 8, 8192, 1024), WorkloadSpec(WorkloadKind.PREFILL, 1, 32768, 512)],
    }
    mixed = {
        "quick": [WorkloadSpec(WorkloadKind.MIXED, 32, 4096, 512)],
        "default": [WorkloadSpec(WorkloadKind.MIXED, 32, 4096, 512), WorkloadSpec(WorkloadKind.MIXED, 128, 2048, 256)],
        "full": [WorkloadSpec(WorkloadKind.MIXED, 32, 4096, 512), WorkloadSpec(WorkloadKind.MIXED, 128, 2048, 256),
                 WorkloadSpec(WorkloadKind.MIXED, 16, 16384, 2048), WorkloadSpec(WorkloadKind.MIXED, 256, 1024, 128)],
    }
    table = {WorkloadKind.DECODE: decode, WorkloadKind.PREFILL: prefill, WorkloadKind.MIXED: mixed}
    out: list[WorkloadSpec] = []
    for kind in kinds:
        out.extend(table[kind][grid])
    return out


def parse_workloads(value: str) -> list[WorkloadKind]:
    value = (value or "all").strip().lower()
    if value == "all":
        return list(WORKLOAD_KINDS)
    kinds = [v.strip() for v in value.split(",") if v.strip()]
    bad = [k for k in kinds if k not in WORKLOAD_KINDS]
    if bad or not kinds:
        raise UserInputError(f"unknown --workload {value!r}; use decode, prefill, mixed or all")
    return [WorkloadKind(k) for k in dict.fromkeys(kinds)]

