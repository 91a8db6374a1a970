"""Developer check: one sweep against another, shape by shape (e.g. vLLM's own kernels vs the
stand-ins tune uses without vLLM: FA4 for FA3, attnsel's Triton kernel for vLLM's, FlashInfer
called directly).

    python -m attnsel.bench.tools.compare_runs REFERENCE_DIR OTHER_DIR [--json]

Rows are matched on (backend, block size, workload); the table gives each side's provider and
median and OTHER / REFERENCE. The stand-in run is made with `ATTNSEL_TUNE_STANDINS=1` (vLLM's
classes are then skipped) and, for FlashInfer, a PYTHONPATH whose flashinfer is the stand-in's
release (bench/tools/gpu_session.sh does both).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def _key(row: dict) -> tuple:
    return (row["backend"], int(row["block_size"]), row["workload_label"])


def matched_rows(reference: list[dict], other: list[dict]) -> list[dict]:
    """Timed rows present in both runs, with the ratio other / reference of their medians.

    >>> a = [{"backend": "FLASH_ATTN", "block_size": 16, "workload_label": "w", "status": "ok",
    ...       "adapter": "vllm", "timing": {"median_ms": 0.2}}]
    >>> b = [dict(a[0], adapter="fa4-cute", timing={"median_ms": 0.3})]
    >>> round(matched_rows(a, b)[0]["ratio"], 2)
    1.5
    """
    ours = {_key(r): r for r in other if r.get("status") == "ok"}
    out = []
    for ref in reference:
        if ref.get("status") != "ok" or _key(ref) not in ours:
            continue
        oth = ours[_key(ref)]
        ref_ms, oth_ms = ref["timing"]["median_ms"], oth["timing"]["median_ms"]
        out.append({"backend": ref["backend"], "block_size": int(ref["block_size"]), "workload": ref["workload_label"],
                    "launch": ref.get("launch"), "reference_provider": ref.get("provider") or ref.get("adapter"),
                    "other_provider": oth.get("provider") or oth.get("adapter"),
                    "reference_ms": ref_ms, "other_ms": oth_ms, "ratio": oth_ms / ref_ms})
    return out


def by_backend(matched: list[dict]) -> dict[str, dict]:
    """Per backend: geometric-mean ratio and its range over shapes (the figure the warnings quote)."""
    import math

    out: dict[str, dict] = {}
    for backend in sorted({m["backend"] for m in matched}):
        ratios = [m["ratio"] for m in matched if m["backend"] == backend]
        out[backend] = {"rows": len(ratios), "geomean_ratio": math.exp(statistics.fmean(math.log(r) for r in ratios)),
                        "min_ratio": min(ratios), "max_ratio": max(ratios),
                        "other_providers": sorted({m["other_provider"] for m in matched if m["backend"] == backend})}
    return out


def _load(run_dir: Path) -> list[dict]:
    from attnsel.bench.sweep import results as R

    return list(R.latest_by_key(R.read_rows(Path(run_dir) / R.RESULTS_FILE)).values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("other", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    matched = matched_rows(_load(args.reference), _load(args.other))
    summary = by_backend(matched)
    if args.json:
        print(json.dumps({"rows": matched, "by_backend": summary}, indent=1))
        return 0
    for m in matched:
        print(f"{m['backend']:<11} bs={m['block_size']:<4} {m['workload']:<34} {m['reference_ms'] * 1e3:8.1f} us "
              f"vs {m['other_ms'] * 1e3:8.1f} us  x{m['ratio']:.2f}  ({m['other_provider']})")
    for backend, s in summary.items():
        print(f"{backend}: stand-in / reference geomean x{s['geomean_ratio']:.2f} "
              f"(x{s['min_ratio']:.2f}..x{s['max_ratio']:.2f} over {s['rows']} rows) by {', '.join(s['other_providers'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
