"""Developer summary: per tune run, the recommendation and the share of HBM peak of the best rows.

    python -m attnsel.bench.tools.peak_share RUN_DIR [RUN_DIR ...] [--json]

For each run (a `tune --output` folder or its tune.json): the shape, vLLM's default, each
workload's recommended flags with margin and timing mode, and the decode row that reached the
highest share of the GPU's peak memory bandwidth (bytes counted as in attention/kernels: Q read,
the KV cache read once over the real lengths, O written; an fp8 cache counts one byte per value,
an MLA latent cache once for all heads), plus the recommended config's best decode row.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(path: str) -> dict:
    p = Path(path)
    return json.loads((p / "tune.json" if p.is_dir() else p).read_text(encoding="utf-8"))


def _row_text(row: dict) -> str:
    bw = row.get("bandwidth_bytes_per_s") or 0.0
    return (f"{row['backend']} --block-size {row['block_size']} {row['workload_label']}: "
            f"{row['timing']['median_ms'] * 1e3:.1f} us, {bw / 1e12:.2f} TB/s = {row['pct_of_peak_bandwidth']:.1f}% "
            f"of peak ({row.get('launch') or row['timing'].get('mode')})")


def best_rows(doc: dict) -> dict:
    """{"best": the decode row with the highest % of peak, "recommended": the recommended decode
    config's best row (None when the recommendation keeps vLLM's default or nothing was timed)}."""
    rows = [r for r in doc["rows"] if r.get("status") == "ok" and r.get("kind") == "decode"
            and r.get("pct_of_peak_bandwidth") is not None]
    share = lambda r: r["pct_of_peak_bandwidth"]  # noqa: E731
    best = max(rows, key=share) if rows else None
    decision = (doc.get("recommendation") or {}).get("workloads", {}).get("decode") or {}
    pick = decision.get("best") or {}
    mine = [r for r in rows if (r["backend"], r["block_size"]) == (pick.get("backend"), pick.get("block_size"))]
    return {"best": best, "recommended": max(mine, key=share) if mine else None}


def summary(doc: dict, name: str) -> list[str]:
    plan = doc["plan"]
    shape, default = plan["shape"], plan["vllm_default"]
    peak = (doc.get("environment") or {}).get("gpu", {}).get("peak_memory_bandwidth_bytes_per_s")
    lines = [f"{name}: {shape.get('model') or 'flags'} TP={shape['tensor_parallel_size']}, {shape['num_q_heads']} "
             f"query heads/GPU, kv cache {shape['kv_cache_dtype']}; vLLM's default {default['backend']} "
             f"--block-size {default['block_size']}; peak {peak / 1e12 if peak else float('nan'):.2f} TB/s"]
    for kind, decision in (doc.get("recommendation") or {}).get("workloads", {}).items():
        lines.append(f"  {kind}: {decision['advice']}")
    rows = best_rows(doc)
    for label in ("best", "recommended"):
        if rows[label] is not None:
            lines.append(f"  {label} decode row: {_row_text(rows[label])}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = {}
    for run in args.runs:
        try:
            doc = load(run)
        except (OSError, ValueError) as exc:
            print(f"{run}: cannot read tune.json ({exc})", file=sys.stderr)
            continue
        if args.json:
            out[run] = best_rows(doc)
        else:
            print("\n".join(summary(doc, Path(run).name)))
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    return 0 if out or not args.json else 1


if __name__ == "__main__":
    sys.exit(main())
