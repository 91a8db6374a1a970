"""Result rows of `attnsel tune` and the append-only JSONL file that holds them.

One row per backend x block size x shape (docs/measuring.md §7). Rows are plain dicts so that the
worker, the parent, the JSON output and the recorded CI fixtures share one schema:

    key              "BACKEND|bs=16|decode b=64 ctx=4096|bf16|kv=auto|events-cold" (resume key)
    backend, block_size, kernel_block_size, workload (dict), workload_label, kind
    status           one of STATUSES
    error            text for skipped/unsupported/error rows
    adapter, provider, notes
    timing           {mode, l2, n, median_ms, p20_ms, p80_ms, ...} (ok rows)
    setup_s, first_call_s       JIT/compile cost, apart from run time
    rel_error, checked      correctness vs the fp32 reference
    bytes_moved, flops, bandwidth_bytes_per_s, pct_of_peak_bandwidth, tflops

The file is written one line per row and flushed (and fsync'ed) at once, so a crash of the
parent loses nothing that was measured; a torn last line is ignored on read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from attnsel import files
from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.sweep.record import (
    Record,
    absent_field,
    positive_field,
    required_field,
    time_field,
)
from attnsel.words import Word


class RowStatus(Word):
    """A result row's "status" (docs/measuring.md §7)."""

    OK = "ok"
    SKIPPED_BY_VLLM = "skipped"  # vLLM would refuse the combination: never timed
    UNAVAILABLE = "unavailable"  # the kernel library is not installed here
    UNSUPPORTED = "unsupported"  # the adapter cannot run this shape (not a vLLM rule)
    WRONG = "wrong"  # ran, but failed the correctness check: disqualified
    ERROR = "error"  # raised
    OOM = "oom"
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # the worker process died (segfault, abort)


STATUS_OK = RowStatus.OK
STATUS_SKIPPED_BY_VLLM = RowStatus.SKIPPED_BY_VLLM
STATUS_UNAVAILABLE = RowStatus.UNAVAILABLE
STATUS_UNSUPPORTED = RowStatus.UNSUPPORTED
STATUS_WRONG = RowStatus.WRONG
STATUS_ERROR = RowStatus.ERROR
STATUS_OOM = RowStatus.OOM
STATUS_TIMEOUT = RowStatus.TIMEOUT
STATUS_CRASHED = RowStatus.CRASHED
STATUSES: tuple[RowStatus, ...] = tuple(RowStatus)
FAILED_STATUSES = (STATUS_WRONG, STATUS_ERROR, STATUS_OOM, STATUS_TIMEOUT, STATUS_CRASHED)

RESULTS_FILE = "results.jsonl"


# --- a result row as the worker writes it and tune.json / `attnsel report` read it ---------------


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
    # what the worker writes besides (bench/worker/items.py), the parent's --gpus lane last
    bytes_moved: float | None = None
    flops: float | None = None
    launch_reason: str | None = None
    launch_source: str | None = None  # "flag", "installed vLLM", "recorded rule" or "default"
    notes: list[str] | None = None
    provider_details: dict | None = None  # what the provider says about itself (layout, knobs)
    tolerance: float | None = None
    traceback: str | None = None
    row_wall_s: float | None = None
    wall_breakdown_s: dict[str, float] | None = None
    gpu: str | None = None  # --gpus: the lane (GPU) that timed the row


def new_row(key: str, backend: str, block_size: int, kernel_block_size: int | None, workload: WorkloadSpec,
            dtype: str | None, kv_cache_dtype: str, mode: str, status: RowStatus | None, error: str | None) -> ResultRow:
    """The start of every result row, whoever writes it: the worker (a measured row), the parent (a
    row whose worker crashed or hung, a row vLLM refuses); its writer adds the rest."""
    return ResultRow.new(
        key=key, backend=backend, block_size=block_size, kernel_block_size=kernel_block_size,
        workload=Workload.from_dict(workload.to_dict()), workload_label=workload.label(), kind=workload.kind,
        dtype=dtype, kv_cache_dtype=kv_cache_dtype, mode=mode, status=status, error=error,
    )


def row_key(backend: str, block_size: int, workload_label: str, dtype: str, kv_cache_dtype: str, mode: str) -> str:
    """The identity of a measurement: `--resume` skips rows whose key is already in the file."""
    return f"{backend}|bs={block_size}|{workload_label}|{dtype}|kv={kv_cache_dtype}|{mode}"


# Backends whose kernel tune runs through vLLM's own classes when vLLM is installed
# (attention/kernels/vllm/backend.py, vllm_mla.py); any other provider of them is a stand-in (e.g.
# FlashInfer's MLA wrapper for FLASHINFER_MLA). FLEX_ATTENTION is torch's flex_attention in vLLM
# and in attnsel alike.
VLLM_DRIVEN_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN",
                        "FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA")
VLLM_ADAPTER = "vllm"


def stand_in_provider(row: ResultRow) -> str | None:
    """The provider that stood in for vLLM's own kernel on this row (None: vLLM's kernel, as vLLM runs it)."""
    if row.backend not in VLLM_DRIVEN_BACKENDS or row.adapter in (None, VLLM_ADAPTER):
        return None
    return f"{row.backend} by {row.adapter}"


def is_timed(row: dict) -> bool:
    return row.get("status") == STATUS_OK and bool(row.get("timing"))


def median_ms(row: dict) -> float | None:
    timing = row.get("timing") or {}
    return timing.get("median_ms")


class ResultsWriter:
    """Appends rows to results.jsonl, one flushed line each (one writer per sweep; thread-safe:
    with --gpus several GPUs' workers report at once)."""

    def __init__(self, path: Path):
        import threading

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, row: dict) -> None:
        line = files.json_text(row, indent=None, sort_keys=True) + "\n"  # RFC 8259: no NaN
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
            try:
                os.fsync(self._fh.fileno())
            except OSError:
                pass  # some filesystems (pipes, special mounts) cannot fsync; the flush still happened

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_rows(path: Path) -> list[dict]:
    """Rows of a results file; a torn or garbled line (the sweep was killed mid-write) is skipped."""
    return list(_iter_rows(Path(path)))


def _iter_rows(path: Path) -> Iterator[dict]:
    if not path.exists():
        return
    with open(path, encoding="utf-8") as fh:
        yield from rows_from_lines(fh)


def rows_from_lines(lines: Iterable[str]) -> Iterator[dict]:
    """The rows among results.jsonl lines; torn or garbled lines are skipped (`attnsel report`
    reads a file it was handed this way, bounded, and checks each row's fields itself)."""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # torn JSON, a number of thousands of digits, absurd nesting
            continue
        if isinstance(row, dict) and "key" in row:
            yield row


def latest_by_key(rows: Iterable[dict]) -> dict[str, dict]:
    """The last row written for each key wins (a resumed sweep may re-measure a failed row)."""
    out: dict[str, dict] = {}
    for row in rows:
        out[row["key"]] = row
    return out


def keys_to_skip_on_resume(rows: Iterable[dict], *, retry_failed: bool = False) -> set[str]:
    """Keys `--resume` does not run again. Failed rows are kept (a crash is a result) unless the
    user asks to retry them."""
    done = set()
    for key, row in latest_by_key(rows).items():
        if retry_failed and row.get("status") in FAILED_STATUSES:
            continue
        done.add(key)
    return done
