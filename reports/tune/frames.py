"""pandas DataFrames (and the summary dict) every report format is built from. Plain data in,
plain data out; no NVML, no CUDA."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnsel.attention.explain import saved_flags
from attnsel.attention.kernels import BACKENDS
from attnsel.bench.plan.workloads import WORKLOAD_KINDS
from attnsel.bench.sweep import results as R
from attnsel.bench.tune import (
    Choice,
    DecisionRecord,
    DeviceEnvironment,
    GpuEnvironment,
    RecommendationRecord,
    Timing,
    Verdict,
    Workload,
    advised_flags,
)
from attnsel.reports.tune.loaders import ReportData, TuneData

REPORT_SCHEMA = "attnsel-report/1"  # `report --format json` (docs/schemas/; before it: `schema_version: 1`)

KIND_ORDER = WORKLOAD_KINDS
# what the per-kind margins are: tune times the attention kernels alone, never a whole step
KERNEL_LEVEL_NOTE = "kernel-level gains (the attention kernels alone); check end to end with attnsel verify"
BACKEND_ORDER = BACKENDS  # the plan's order (attention/kernels/base.py)

ROW_COLUMNS = [
    "backend", "block_size", "kernel_block_size", "kind", "workload", "batch", "context_len", "query_len", "status",
    "median_ms", "p20_ms", "p80_ms", "n", "bandwidth_tb_s", "pct_of_peak", "tflops", "rel_error", "checked",
    "adapter", "provider", "first_call_s", "mode", "dtype", "kv_cache_dtype", "error",
]


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _order(name: str) -> int:
    return BACKEND_ORDER.index(name) if name in BACKEND_ORDER else len(BACKEND_ORDER)


def rows_frame(tune: TuneData) -> pd.DataFrame:
    """One line per result row, flat, in a stable order (backend, block size, kind, shape)."""
    records = []
    for row in tune.rows:
        timing, w = row.timing or Timing(), row.workload or Workload()
        bandwidth = _num(row.bandwidth_bytes_per_s)
        records.append({
            "backend": row.backend,
            "block_size": row.block_size,
            "kernel_block_size": row.kernel_block_size,
            "kind": row.kind,
            "workload": row.workload_label,
            "batch": w.batch,
            "context_len": w.context_len,
            "query_len": w.query_len,
            "status": row.status,
            "median_ms": _num(timing.median_ms),
            "p20_ms": _num(timing.p20_ms),
            "p80_ms": _num(timing.p80_ms),
            "n": timing.n,
            "bandwidth_tb_s": bandwidth / 1e12 if bandwidth else None,
            "pct_of_peak": _num(row.pct_of_peak_bandwidth),
            "tflops": _num(row.tflops),
            "rel_error": _num(row.rel_error),
            "checked": row.checked,
            "adapter": row.adapter,
            "provider": row.provider,
            "first_call_s": _num(row.first_call_s),
            "mode": row.mode,
            "dtype": row.dtype,
            "kv_cache_dtype": row.kv_cache_dtype,
            "error": row.error,
        })
    frame = pd.DataFrame.from_records(records, columns=ROW_COLUMNS)
    if frame.empty:
        return frame
    frame["_b"] = frame["backend"].map(_order)
    frame["_k"] = frame["kind"].map(lambda k: KIND_ORDER.index(k) if k in KIND_ORDER else 9)
    frame = frame.sort_values(["_k", "batch", "context_len", "query_len", "_b", "backend", "block_size"], kind="stable")
    return frame.drop(columns=["_b", "_k"]).reset_index(drop=True)


def workloads(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """(kind, label) of every shape, in plan order."""
    if frame.empty:
        return []
    seen = frame[["kind", "workload"]].drop_duplicates()
    return [(k, w) for k, w in seen.itertuples(index=False, name=None)]


def latency_table(frame: pd.DataFrame, workload: str) -> pd.DataFrame:
    """Median ms, backend x --block-size, for one shape; NaN where not timed."""
    sub = frame[(frame["workload"] == workload) & (frame["status"] == R.STATUS_OK)]
    if sub.empty:
        return pd.DataFrame()
    table = sub.pivot_table(index="backend", columns="block_size", values="median_ms", aggfunc="first")
    table = table.reindex(sorted(table.index, key=lambda b: (_order(b), b)))
    return table.reindex(sorted(table.columns), axis=1)


def status_table(frame: pd.DataFrame, workload: str) -> pd.DataFrame:
    """Status per backend x --block-size for one shape (shows what was skipped or failed)."""
    sub = frame[frame["workload"] == workload]
    table = sub.pivot_table(index="backend", columns="block_size", values="status", aggfunc="first")
    table = table.reindex(sorted(table.index, key=lambda b: (_order(b), b)))
    return table.reindex(sorted(table.columns), axis=1)


def best_bandwidth(frame: pd.DataFrame) -> pd.DataFrame:
    """For each shape and backend, the block size with the highest % of peak bandwidth."""
    ok = frame[(frame["status"] == R.STATUS_OK) & frame["pct_of_peak"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=["kind", "workload", "backend", "block_size", "pct_of_peak", "bandwidth_tb_s"])
    index = ok.groupby(["workload", "backend"], sort=False)["pct_of_peak"].idxmax()
    best = ok.loc[index.values, ["kind", "workload", "backend", "block_size", "pct_of_peak", "bandwidth_tb_s"]]
    best = best.assign(_b=best["backend"].map(_order))
    order = {w: i for i, (_k, w) in enumerate(workloads(frame))}
    best = best.assign(_w=best["workload"].map(order)).sort_values(["_w", "_b"], kind="stable")
    return best.drop(columns=["_b", "_w"]).reset_index(drop=True)


def problems_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that were not timed for a reason other than vLLM's rules: crashes, wrong results..."""
    bad = frame[~frame["status"].isin([R.STATUS_OK, R.STATUS_SKIPPED_BY_VLLM])]
    return bad[["backend", "block_size", "workload", "status", "error"]].reset_index(drop=True)


def skipped_configs(tune: TuneData) -> pd.DataFrame:
    """(backend, --block-size) pairs vLLM's rules refuse, with vLLM's reasons."""
    configs = tune.plan.configs or []
    records = [
        {"backend": c.backend, "block_size": c.block_size, "reasons": list(c.reasons or [])}
        for c in configs if c.status == "skipped"
    ]
    if not configs:  # no plan (bare results.jsonl): the skipped rows carry the same reasons
        seen = set()
        for row in tune.rows:
            key = (row.backend, row.block_size)
            if row.status == R.STATUS_SKIPPED_BY_VLLM and key not in seen:
                seen.add(key)
                reasons = row.vllm_reasons or [r for r in str(row.error or "").split("; ") if r]
                records.append({"backend": key[0], "block_size": key[1], "reasons": reasons})
    return pd.DataFrame.from_records(records, columns=["backend", "block_size", "reasons"])


def reason_matrix(entries: list[tuple[str, list[str]]]) -> pd.DataFrame:
    """Boolean matrix: one row per entry (a backend, or backend + block size), one column per
    distinct reason (vLLM's words, first-seen order)."""
    reasons: list[str] = []
    for _name, rs in entries:
        for r in rs:
            if r not in reasons:
                reasons.append(r)
    return pd.DataFrame([[r in rs for r in reasons] for _name, rs in entries],
                        index=[name for name, _rs in entries], columns=reasons, dtype=bool)


def explain_frame(doc: dict) -> pd.DataFrame:
    rows = list(doc.get("backends") or [])
    explicit = doc.get("explicit_backend")
    if explicit and explicit.get("name") not in [b.get("name") for b in rows]:
        rows.append(explicit)
    records = [{
        "priority": b.get("priority"),
        "backend": b.get("name"),
        "valid": bool(b.get("valid")),
        "selected": b.get("name") == doc.get("selected"),
        "reasons": "; ".join(b.get("reasons") or []),
    } for b in rows]
    return pd.DataFrame.from_records(records, columns=["priority", "backend", "valid", "selected", "reasons"])


def explain_matrix(doc: dict) -> pd.DataFrame:
    entries = [(b.get("name"), list(b.get("reasons") or [])) for b in doc.get("backends") or []]
    return reason_matrix(entries)


# ---------------------------------------------------------------------------------------------
# The summary every format opens with


def _tb(value: float | None) -> str | None:
    return f"{value / 1e12:.2f} TB/s" if value else None


def _pair(choice: Choice | None) -> str | None:
    return f"{choice.backend} --block-size {choice.block_size}" if choice else None


def _decision_summary(decision: DecisionRecord | None) -> dict | None:
    if not decision:
        return None
    known = Verdict.read(decision.verdict)
    return {
        "scope": decision.scope,
        "best": _pair(decision.best),
        "best_geomean_ms": decision.best.geomean_ms if decision.best else None,
        "default": _pair(decision.vllm_default),
        "margin_pct": decision.margin_pct,
        "noise_threshold_pct": decision.noise_threshold_pct,
        "verdict": decision.verdict,
        "confidence": known.confidence if known is not None else decision.verdict,  # a newer word, as written
        "flags": advised_flags(decision),
        "best_flags": decision.flags,
        "advice": decision.advice,
    }


def _kind_order(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else 9


def tune_summary(tune: TuneData) -> dict:
    """GPU, environment, shape, vLLM's default, the recommendation with margin and confidence."""
    env = tune.environment
    gpu, device = env.gpu or GpuEnvironment(), env.device or DeviceEnvironment()
    plan = tune.plan
    rec = tune.recommendation or RecommendationRecord()
    overall = _decision_summary(rec.overall)
    by_kind = sorted((rec.workloads or {}).items(), key=lambda kv: _kind_order(kv[0]))
    per_kind = [_decision_summary(d) for _k, d in by_kind]
    versions = {k: v for k, v in (env.versions or device.versions or {}).items() if v}
    capability = plan.capability or (".".join(str(x) for x in device.capability) if device.capability else None)
    statuses: dict[str, int] = {}
    for row in tune.rows:
        statuses[row.status or "?"] = statuses.get(row.status or "?", 0) + 1
    return {
        "gpu": gpu.name or device.name or plan.gpu,
        "capability": capability,
        "memory_gib": (gpu.memory_total_bytes or device.total_memory_bytes or 0) / 2**30 or None,
        "peak_bandwidth": _tb(gpu.peak_memory_bandwidth_bytes_per_s),
        "peak_bandwidth_source": gpu.peak_bandwidth_source,
        "driver": gpu.driver_version,
        "cuda": gpu.cuda_driver_version or device.torch_cuda,
        "versions": versions,
        "shape": plan.shape.to_dict() if plan.shape else {},
        "grid": plan.grid,
        "timing_mode": (tune.rows[0].mode if tune.rows else None),
        "vllm_default": _pair(rec.vllm_default),
        "overall": overall,
        "per_kind": [d for d in per_kind if d],
        "vllm_flags": (overall or {}).get("flags"),  # only when tune advised them (bench's advised_flags)
        "fastest_flags": rec.overall.flags if rec.overall else None,
        "statuses": statuses,
        "warnings": list(tune.record.warnings or []),
        "note": tune.note,
        "complete": tune.complete,
        "created": tune.record.created,
        "elapsed_s": tune.record.elapsed_s,
        "source": tune.source,
    }


def explain_summary(doc: dict) -> dict:
    gpu = doc.get("gpu") or {}
    return {
        "gpu": gpu.get("name"),
        "capability": gpu.get("capability"),
        "profile": f"{doc.get('profile')} (vLLM {doc.get('profile_vllm_version')})",
        "model": (doc.get("model") or {}).get("model_type"),
        "inputs": doc.get("inputs") or {},
        "selected": doc.get("selected"),
        "block_size": doc.get("block_size"),
        "kernel_block_size": doc.get("kernel_block_size"),
        "error": doc.get("error"),
        "error_type": doc.get("error_type"),
        "warnings": list(doc.get("warnings") or []),
        "vllm_args": saved_flags(doc),  # today's rule: flags only where the answer forced a choice
        "valid": [b["name"] for b in doc.get("backends") or [] if b.get("valid")],
    }


def report_dict(data: ReportData) -> dict:
    """The `report --format json` document: summaries plus every row, flat."""
    out: dict[str, Any] = {"schema": REPORT_SCHEMA, "sources": data.sources}
    if data.tune is not None:
        frame = rows_frame(data.tune)
        out["tune"] = {
            "summary": tune_summary(data.tune),
            "rows": _records(frame),
            "best_bandwidth": _records(best_bandwidth(frame)),
            "skipped_configs": _records(skipped_configs(data.tune)),
        }
    out["explain"] = [{"summary": explain_summary(d), "backends": _records(explain_frame(d))} for d in data.explains]
    if data.verify is not None:
        out["verify"] = data.verify  # already a JSON document (bench/verify/run.py): passed through as written
    return out


def _records(frame: pd.DataFrame) -> list[dict]:
    if frame.empty:
        return []
    clean = frame.astype(object).where(frame.notna(), None)
    return clean.to_dict(orient="records")
