"""Developer check: are tune's timings kernel-exact? Re-time a sweep's rows with FlashInfer's own
`flashinfer.testing.bench_gpu_time` (CUPTI, and CUDA-graph replay where the row was replayed) and
print, per row, the sweep's median over FlashInfer's.

    python -m attnsel.bench.tools.fidelity RUN_DIR [--backends FLASHINFER] [--limit N] [--jsonl OUT]

Each row's call is rebuilt in this process exactly as the sweep built it (same toolkit, workload,
block size, seed and provider), so the two timers see the same kernels. The bar (issue "tune
measures what vLLM really runs"): the sweep within +-5% of FlashInfer's CUPTI figure on >= 95% of
the rows, small shapes included. Exit 0 when met, 1 when not, 3 without a GPU or FlashInfer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BAR_TOLERANCE = 0.05
BAR_SHARE = 0.95


def within(ratio: float | None, tolerance: float = BAR_TOLERANCE) -> bool:
    """True when `ratio` (ours / FlashInfer's) is within +-tolerance.

    >>> within(1.04), within(0.94), within(None)
    (True, False, False)
    """
    return ratio is not None and abs(ratio - 1.0) <= tolerance


def summarize(ratios: list[float | None], tolerance: float = BAR_TOLERANCE, share: float = BAR_SHARE) -> dict:
    """The bar over all rows: share within tolerance, median and spread of the ratios.

    >>> summarize([1.0, 1.02, 0.97, 1.2])["met"]
    False
    """
    good = [r for r in ratios if r is not None]
    inside = sum(within(r, tolerance) for r in ratios)
    return {
        "rows": len(ratios), "within": inside, "share_within": inside / len(ratios) if ratios else 0.0,
        "median_ratio": statistics.median(good) if good else None,
        "min_ratio": min(good) if good else None, "max_ratio": max(good) if good else None,
        "tolerance": tolerance, "required_share": share,
        "met": bool(ratios) and inside / len(ratios) >= share,
    }


def _rows(run_dir: Path, backends: set[str]) -> tuple[list[dict], dict, dict]:
    from attnsel.bench.sweep import results as R

    rows = [r for r in R.latest_by_key(R.read_rows(run_dir / R.RESULTS_FILE)).values()
            if r.get("status") == R.STATUS_OK and r.get("backend") in backends]
    doc = json.loads((run_dir / "tune.json").read_text()) if (run_dir / "tune.json").exists() else {}
    shape = (doc.get("plan") or {}).get("shape") or {}
    options = doc.get("options") or {}
    return rows, shape, options


def retime_row(toolkit, row: dict, shape: dict, options: dict, bench_gpu_time) -> dict:
    """Our timer and FlashInfer's on one rebuilt row."""
    from attnsel.bench.plan import WorkloadSpec
    from attnsel.bench.timing import gpu as G

    spec = WorkloadSpec.from_dict(row["workload"])
    workload = toolkit.workload(shape, spec)
    batch = toolkit.make_batch(workload, int(row["block_size"]), int(options.get("seed", 0)))
    adapter = next(a for a in toolkit.adapters_for(row["backend"]) if a.name == row["adapter"])
    prepared = adapter.prepare(batch)
    graph = row.get("launch") == "graph"
    theirs = bench_gpu_time(prepared.run, enable_cupti=True, use_cuda_graph=graph, cold_l2_cache=True,
                            dry_run_time_ms=25, repeat_time_ms=100)
    ours = G.time_call(prepared.run, launch="graph" if graph else "eager", timer="auto")
    fi_ms = statistics.median(theirs)
    sweep_ms = row["timing"]["median_ms"]
    out = {"backend": row["backend"], "block_size": row["block_size"], "workload": row["workload_label"],
           "launch": row.get("launch"), "sweep_timer": row["timing"].get("timer"), "sweep_ms": sweep_ms,
           "rerun_ms": ours.stats.median_ms, "rerun_timer": ours.timer, "flashinfer_cupti_ms": fi_ms,
           "ratio_sweep": sweep_ms / fi_ms, "ratio_rerun": ours.stats.median_ms / fi_ms}
    toolkit.release()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--backends", default="FLASHINFER", help="comma list (default FLASHINFER)")
    parser.add_argument("--limit", type=int, default=0, help="at most N rows (0: all)")
    parser.add_argument("--jsonl", type=Path, help="also write one JSON line per row here")
    args = parser.parse_args(argv)
    try:
        import torch
        from flashinfer.testing import bench_gpu_time  # type: ignore
    except Exception as exc:  # noqa: BLE001
        print(f"fidelity needs torch and flashinfer: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("fidelity needs a CUDA GPU", file=sys.stderr)
        return 3
    from attnsel.bench.worker import KernelToolkit

    rows, shape, options = _rows(args.run_dir, {b.strip().upper() for b in args.backends.split(",")})
    if args.limit:
        rows = rows[: args.limit]
    toolkit = KernelToolkit()
    results = []
    sink = args.jsonl.open("w") if args.jsonl else None
    for row in rows:
        try:
            result = retime_row(toolkit, row, shape, options, bench_gpu_time)
        except Exception as exc:  # noqa: BLE001 -- one row's failure is reported, the rest go on
            result = {"backend": row["backend"], "block_size": row["block_size"], "workload": row["workload_label"],
                      "error": f"{type(exc).__name__}: {exc}"}
        results.append(result)
        if sink:
            sink.write(json.dumps(result) + "\n")
            sink.flush()
        ratio = result.get("ratio_sweep")
        print(f"{result['backend']:<11} bs={result['block_size']:<4} {result['workload']:<32} "
              + (f"sweep {result['sweep_ms'] * 1e3:8.1f} us  FlashInfer CUPTI {result['flashinfer_cupti_ms'] * 1e3:8.1f} us"
                 f"  ratio {ratio:.3f}{'' if within(ratio) else '  OUTSIDE'}" if ratio else result.get("error", "")))
    summary = summarize([r.get("ratio_sweep") for r in results])
    print(json.dumps({"summary": summary, "rerun": summarize([r.get("ratio_rerun") for r in results])}))
    if sink:
        sink.write(json.dumps({"summary": summary}) + "\n")
        sink.close()
    return 0 if summary["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
