"""Where a tune run's wall time went (tune.json "phases"): the probe, each backend's worker
startup, batch build, setup/JIT, check and timing, and the rest (docs/tune-performance.md item 1).

With --gpus a backend's block sizes may run in several lanes at once (bench/sweep/lanes.py): its
entry then sums its parts (wall_s, startup_s, the row phases, rows, workers: GPU-seconds, as if the
parts had run one after another) and lists each part under `parts` with its GPU, block sizes and
its own phases, from which each lane's elapsed time is read. A backend run whole has no `parts`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnsel.bench.sweep.groups import GroupOutcome

ROW_PHASES = (("batch_s", ("batch_s",)), ("setup_s", ("prepare_s", "first_call_s")), ("check_s", ("check_s",)),
              ("timing_s", ("timing_s",)))


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


def backend_phases(outcome: GroupOutcome) -> dict:
    """Where one backend's wall time went: exposed worker startup, then per-row batch build,
    setup (prepare: plan + JIT + first call, and the extra first call), check, timing, the Triton
    pre-compile pass if the worker ran one (`precompile_s` and its record `precompile`, only then
    present), and the rest (library import inside the first row, release, protocol, worker exit)
    as `other_s`."""
    wall = outcome.wall_s or 0.0
    workers = outcome.workers
    startup = sum(w.get("exposed_s") or 0.0 for w in workers)
    out: dict[str, Any] = {"wall_s": wall, "startup_s": startup}
    for name, parts in ROW_PHASES:
        out[name] = sum((r.get("wall_breakdown_s") or {}).get(p, 0.0) or 0.0 for r in outcome.rows for p in parts)
    precompiles = [w["precompile"] for w in workers if isinstance(w.get("precompile"), dict)]
    if precompiles:  # the worker's Triton pre-compile pass between "ready" and its first row (change 10)
        out["precompile_s"] = sum(float(p.get("seconds") or 0.0) for p in precompiles)
        out["precompile"] = {k: v for k, v in precompiles[-1].items() if k != "note"}  # kernels, threads, errors
    out["other_s"] = wall - sum(out.get(k, 0.0) for k in ("startup_s", "precompile_s", "batch_s", "setup_s",
                                                            "check_s", "timing_s"))
    out["rows"] = len(outcome.rows)
    out["row_wall_s"] = sum(r.get("row_wall_s") or 0.0 for r in outcome.rows)
    detail = {}
    for key in ("interpreter_s", "torch_import_s", "library_import_s", "cuda_init_s", "overlapped_s"):
        values: list[float] = [w[key] for w in workers if isinstance(w.get(key), (int, float))]
        detail[key] = sum(values) if values else None
    out["startup_detail"] = detail
    host = timing_host_s(outcome.rows)
    if host:
        out["timing_host_s"] = host
    out["workers"] = len(workers)
    out["prespawn_failures"] = outcome.prespawn_failures
    out = {k: (_round(v) if isinstance(v, float) else v) for k, v in out.items()} | {
        "startup_detail": {k: _round(v) for k, v in detail.items()}}
    if getattr(outcome, "parts", None):
        out["parts"] = [{"gpu": gpu, "block_sizes": list(sizes), **backend_phases(part)}
                        for gpu, sizes, part in outcome.parts]
    return out


def timing_host_s(rows: Iterable[dict]) -> dict:
    """The rows' `timing.host_s` summed per part (graph capture, estimate, warm-up, timed calls,
    CUPTI start/stop): what a backend's timing_s is made of beyond the GPU time it measured. Empty
    for rows timed before it was recorded."""
    total: dict = {}
    for row in rows:
        for part, seconds in ((row.get("timing") or {}).get("host_s") or {}).items():
            total[part] = total.get(part, 0.0) + float(seconds)
    return {part: round(seconds, 3) for part, seconds in total.items()}


def phase_breakdown(outcomes: dict, *, probe_s: float, total_s: float, probe_source: str) -> dict:
    """tune.json "phases": total = probe + each backend's wall + other (plan, NVML, writing)."""
    backends = {backend: backend_phases(outcome) for backend, outcome in outcomes.items()}
    spent = probe_s + sum(b["wall_s"] or 0.0 for b in backends.values())
    return {"total_s": _round(total_s), "probe_s": _round(probe_s), "probe_source": probe_source,
            "backends": backends, "other_s": _round(total_s - spent)}
