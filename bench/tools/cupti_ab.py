"""CUPTI set up once per process vs. set up and finalized for every row (ATTNSEL_CUPTI_FINALIZE=1),
on a GPU: the host seconds each costs a row, and whether the two read the same kernel times.

    python3 -m attnsel.bench.tools.cupti_ab --rows 40 --output cupti_ab.json

Rows alternate between the two modes over the same prepared calls (a decode-sized and a
prefill-sized torch SDPA call, each replayed from a CUDA graph as tune launches vLLM's kernels), so
drift hits both alike. Needs torch with CUDA and cupti-python >= 13.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from attnsel.bench.timing import gpu as G
from attnsel.bench.tools.jsonout import emit

MODES = {"process": "0", "finalize": "1"}


def _calls(torch: Any) -> dict[str, Callable[[], object]]:
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def attention(batch: int, queries: int, keys: int) -> Callable[[], object]:
        q = torch.randn(batch, 32, queries, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, 8, keys, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        return lambda: sdpa(q, k, v, enable_gqa=True)

    return {"decode b=32 ctx=4096": attention(32, 1, 4096), "prefill b=1 len=2048": attention(1, 2048, 2048)}


def run(rows: int) -> dict:
    import torch

    reason = G.cupti_unavailable_reason()
    if reason is not None or not torch.cuda.is_available():
        raise SystemExit(f"cupti_ab needs a CUDA GPU and cupti-python: {reason or 'no CUDA device'}")
    calls = _calls(torch)
    seen: dict[str, dict[str, list]] = {mode: {"host_s": [], **{name: [] for name in calls}} for mode in MODES}
    for row in range(rows):
        for mode in (MODES if row % 2 == 0 else reversed(list(MODES))):
            os.environ[G.CUPTI_FINALIZE_ENV] = MODES[mode]
            for name, fn in calls.items():
                result = G.time_call(fn, launch="graph", timer="cupti")
                if result.timer != "cupti":
                    raise SystemExit(f"{mode}: {result.note}")
                host_s = result.host_s or {}  # CUPTI's start/stop host time (always recorded by this timer)
                seen[mode]["host_s"].append(host_s.get("cupti_start", 0) + host_s.get("cupti_stop", 0))
                seen[mode][name].append(result.stats.median_ms)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "rows_per_mode": rows * len(calls)}
    for mode, got in seen.items():
        out[mode] = {"cupti_host_s_per_row_median": round(statistics.median(got["host_s"]), 5),
                     "cupti_host_s_total": round(sum(got["host_s"]), 3),
                     **{name: round(statistics.median(got[name]), 5) for name in calls}}
    out["median_ms_ratio_process_over_finalize"] = {
        name: round(out["process"][name] / out["finalize"][name], 4) for name in calls}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40, help="rows per mode and call (default 40)")
    parser.add_argument("--output", help="write the JSON here (default: standard output)")
    args = parser.parse_args(argv)
    emit(run(args.rows), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
