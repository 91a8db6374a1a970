"""The `attnsel tune` result document: tune.json (one row per backend x block size x shape, the
environment, the recommendation, the warnings) and results.csv, its flat rows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from attnsel import __version__, files
from attnsel.bench.plan import WORKLOAD_KINDS
from attnsel.bench.plan import build as P
from attnsel.bench.plan import mla as plan_mla
from attnsel.bench.sweep import STATUS_OK, SweepOptions
from attnsel.bench.tune import env_info
from attnsel.bench.tune import recommend as REC
from attnsel.bench.tune.records import (
    DeviceEnvironment,
    Environment,
    GpuEnvironment,
    PlanRecord,
    RecommendationRecord,
    ResultRow,
    TuneDocument,
)

DOCUMENT_SCHEMA = "attnsel-tune/1"
DOCUMENT_FILE = "tune.json"
CSV_FILE = "results.csv"


def workload_labels(plan: P.Plan) -> dict[str, list[str]]:
    labels: dict[str, list[str]] = {}
    for w in plan.workloads:
        labels.setdefault(w.kind, []).append(w.label())
    return labels


def prespawn_warnings(outcomes: dict) -> list[str]:
    """A pre-spawned worker whose library import created a CUDA context did so while the previous
    backend was timing: harmless in principle (no kernels run), but say so, so it can be ruled out."""
    out = []
    backends = list(outcomes)
    for i, backend in enumerate(backends):
        early = [w for w in outcomes[backend].workers if w.get("prespawned") and w.get("cuda_initialized_by_import")]
        if early and i > 0:
            # Measured on an H200 (2026-11-21, 256 rows): per-row medians with and without
            # pre-spawning agreed (median ratio 1.0003, p10-p90 0.989-1.011), so this is a note.
            out.append(f"importing {backend}'s kernel library created a CUDA context while an earlier backend "
                       f"was being timed (pre-spawned worker; no effect on medians was measured on an H200); "
                       f"ATTNSEL_TUNE_PRESPAWN=0 rules it out")
    return out


def stand_in_warnings(rows: list[dict], capability: tuple[int, int]) -> list[str]:
    """Say where a backend was timed with another provider than the kernel vLLM itself would run,
    since the flags we recommend make vLLM run its own kernel."""
    adapters = {(r.get("backend"), str(r.get("adapter") or "")) for r in rows if r.get("status") == STATUS_OK}
    out = []
    # vLLM runs its own FA3 build on Hopper and FA4 on Blackwell (docs/gpu-facts.md §3, docs/vllm-rules.md §3c)
    if next(iter(capability)) == 9 and any(b == "FLASH_ATTN" and "fa4" in a.lower() for b, a in adapters):
        out.append("FLASH_ATTN was timed with FlashAttention 4 (CuTe) as a stand-in for vLLM's own FA3 "
                   "build on Hopper (docs/gpu-facts.md): vLLM's kernel may be faster or slower")
    if ("TRITON_ATTN", "attnsel-triton") in adapters:
        out.append("TRITON_ATTN was timed with attnsel's own Triton paged-attention kernel (vLLM is not installed "
                   "here): `--attention-backend TRITON_ATTN` runs vLLM's Triton kernel, which may be faster or slower")
    if ("FLASHINFER_MLA", "flashinfer-mla-wrapper") in adapters:
        out.append("FLASHINFER_MLA was timed with FlashInfer's BatchMLAPagedAttentionWrapper (vLLM is not installed "
                   "here): vLLM's FLASHINFER_MLA runs FlashInfer's TRT-LLM MLA decode kernel, which may be faster "
                   "or slower")
    return out


def build_document(plan: P.Plan, options: SweepOptions, rows: list[dict], weights: Mapping[str, float], *,
                   min_gain: float = REC.DEFAULT_MIN_GAIN, device: dict,
                   gpu_env: dict, clocks: dict, worker_info: dict, elapsed_s: float | None = None) -> TuneDocument:
    """The full results: one row per backend x block size x shape, the environment, the advice.
    The rows arrive as the workers wrote them (results.jsonl); the document is the typed record
    `attnsel report` reads back (bench/tune/records.py), written as it always was."""
    default = None
    if plan.vllm_default_backend and plan.vllm_default_block_size:
        default = (plan.vllm_default_backend, int(plan.vllm_default_block_size))
    recommendation = REC.recommend(rows, workload_labels=workload_labels(plan), vllm_default=default, weights=weights,
                                   min_gain=min_gain)
    warnings = env_info.drift_warnings(clocks.get("before"), clocks.get("after"))
    warnings += _bandwidth_warnings(rows)
    warnings += stand_in_warnings(rows, plan.capability)
    warnings += [match.line() for match in plan.known_faults]
    environment = Environment(gpu=GpuEnvironment.from_dict(gpu_env), device=DeviceEnvironment.from_dict(device),
                              clocks=clocks, workers=worker_info, versions=device.get("versions"))
    return TuneDocument(
        schema=DOCUMENT_SCHEMA, attnsel_version=__version__, created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        plan=PlanRecord.from_dict(plan.to_dict()), options=options.to_dict(), environment=environment,
        elapsed_s=elapsed_s, rows=[ResultRow.from_dict(row) for row in sorted(rows, key=_row_order)],
        recommendation=RecommendationRecord.from_dict(recommendation.to_dict()), warnings=warnings,
    )


def _row_order(row: dict) -> tuple:
    w = row.get("workload") or {}
    order = P.BACKENDS + plan_mla.MLA_BACKENDS + plan_mla.SPARSE_MLA_BACKENDS
    return (order.index(row["backend"]) if row.get("backend") in order else 99, row.get("block_size", 0),
            WORKLOAD_KINDS.index(row.get("kind")) if row.get("kind") in WORKLOAD_KINDS else 9,
            w.get("batch", 0), w.get("context_len", 0), w.get("query_len", 0))


def _bandwidth_warnings(rows: list[dict]) -> list[str]:
    """Above 100% of peak means a hot L2 or a bytes-counting bug (docs/measuring.md §6)."""
    over = [r for r in rows if (r.get("pct_of_peak_bandwidth") or 0) > 100 and (r.get("timing") or {}).get("l2") != "hot"]
    if not over:
        return []
    worst = max(over, key=lambda r: r["pct_of_peak_bandwidth"])
    return [f"{len(over)} row(s) report more than 100% of peak memory bandwidth (worst: {worst['backend']} "
            f"--block-size {worst['block_size']} {worst['workload_label']}, {worst['pct_of_peak_bandwidth']:.0f}%): "
            f"the data was partly served from L2; treat those rows with care"]


CSV_COLUMNS = (
    "backend", "block_size", "kernel_block_size", "kernel_block_size_used", "kind", "workload_label", "batch",
    "context_len", "query_len", "dtype", "kv_cache_dtype", "mode", "status", "adapter", "provider", "n", "median_ms",
    "p20_ms", "p80_ms", "bandwidth_tb_per_s", "pct_of_peak_bandwidth", "tflops", "setup_s", "rel_error",
    "gpu", "driver", "error",
)


def csv_rows(document: TuneDocument) -> list[dict]:
    """One flat line per row, with the GPU and driver on each (for spreadsheets and pandas)."""
    gpu = (document.environment or Environment()).gpu or GpuEnvironment()
    out = []
    for r in (row.to_dict() for row in document.rows):
        t, w = r.get("timing") or {}, r.get("workload") or {}
        bw = r.get("bandwidth_bytes_per_s")
        flat = {**{k: r.get(k) for k in CSV_COLUMNS}, **{k: t.get(k) for k in ("n", "median_ms", "p20_ms", "p80_ms")},
                **{k: w.get(k) for k in ("batch", "context_len", "query_len")}}
        flat.update(bandwidth_tb_per_s=bw / 1e12 if bw else None, gpu=gpu.name, driver=gpu.driver_version)
        out.append(flat)
    return out


def write_document(document: TuneDocument, output_dir: Path) -> Path:
    """tune.json (everything) and results.csv (flat rows); written atomically."""
    import csv

    path = Path(output_dir) / DOCUMENT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(files.json_text(document.to_dict()) + "\n", encoding="utf-8")  # RFC 8259: no NaN
    tmp.replace(path)
    csv_path = Path(output_dir) / CSV_FILE
    with open(csv_path.with_suffix(".csv.tmp"), "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS))
        writer.writeheader()
        writer.writerows(csv_rows(document))
    csv_path.with_suffix(".csv.tmp").replace(csv_path)
    return path
