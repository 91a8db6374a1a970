"""vLLM's own memory figures from recorded engines, beside attention/memory's plan of the same start.

    python -m attnsel.bench.tools.memory_breakdown DIR [DIR ...] [--json]

Reads each `attnsel-memory-record/1` JSON (bench/tools/memory_record.py) and the engine log next to
it (`<name>.log`), pulls the lines vLLM logs about its memory and prints them beside the plan's figures
(predict_record): how the reserve splits, which part the plan misses. The lines (0.33.0 / 0.34.0):
- "Model loading took W GiB memory" (v1/worker/gpu/model_runner.py:429 @ 0.33.0);
- "Available KV cache memory: K GiB" (v1/worker/gpu_worker.py:773 @ 0.33.0);
- "Actual usage is C GiB for consumed memory (weights + non-torch), P GiB for peak activation, and G GiB
  for CUDAGraph memory" (gpu_worker.py:1044-1063 @ 0.33.0; P holds the CUDA-graph estimate too);
- "CUDA graph pool memory: A GiB (actual), E GiB (estimated)" (gpu_worker.py:1004 @ 0.33.0);
- "Memory after warmup: F GiB free, ... T GiB allocated at peak ...; N KV cache blocks" (0.34.0,
  v1/worker/extensible_kv_cache.py:693-707).
A developer tool: it fits nothing by itself; docs/memory.md says which records fitted which constant.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

NUMBER = r"([\d,]+(?:\.\d+)?)"
LINES = {
    "weights": rf"Model loading took {NUMBER} GiB memory",
    "kv_available": rf"Available KV cache memory: {NUMBER} GiB",
    "consumed": rf"Actual usage is {NUMBER} GiB for consumed memory",
    "peak": rf"{NUMBER} GiB for peak activation",
    "graphs": rf"{NUMBER} GiB for CUDAGraph memory",
    "graph_estimate": rf"CUDA graph pool memory: {NUMBER} GiB \(actual\), {NUMBER} GiB \(estimated\)",
    "after_warmup_free": rf"Memory after warmup: {NUMBER} GiB free",
    "after_warmup_peak": rf"\({NUMBER} GiB allocated at peak",
    "after_warmup_blocks": rf"; {NUMBER} KV cache blocks",
    "extended": rf"Extended KV cache to {NUMBER} blocks",
    "extensible_off": r"Disabling the extensible KV cache: ([^.]+)\.",
}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def read_lines(log: str) -> dict[str, Any]:
    """The last match of each line (a start logs most of them once)."""
    found: dict[str, Any] = {}
    for key, pattern in LINES.items():
        matches = list(re.finditer(pattern, log))
        if not matches:
            continue
        last = matches[-1]
        if key == "extensible_off":
            found[key] = last.group(1)
        elif key == "graph_estimate":
            found["graph_actual"], found["graph_estimate"] = _num(last.group(1)), _num(last.group(2))
        else:
            found[key] = _num(last.group(1))
    if "consumed" in found and "weights" in found:
        found["non_torch"] = round(found["consumed"] - found["weights"], 2)
    if "peak" in found:
        found["activation"] = round(found["peak"] - found.get("graph_estimate", 0.0), 2)
    return found


def breakdown(path: Path) -> dict[str, Any]:
    from attnsel.bench.tools.memory_record import predict_record

    record = json.loads(path.read_text())
    log = path.with_suffix(".log")
    logged = read_lines(log.read_text(errors="replace")) if log.is_file() else {}
    plan = predict_record(record)
    tokens = record["vllm"].get("kv_cache_tokens")
    row: dict[str, Any] = {"name": path.stem, "model": record["model"], "vllm": record["vllm_version"],
                           "flags": {k: v for k, v in record["flags"].items() if v is not None},
                           "vllm_tokens": tokens, "vllm_error": record["vllm"].get("error") or "",
                           "vllm_status": record["vllm"].get("status"),
                           "logged": logged}
    if plan is not None:
        row.update(plan_tokens=plan.kv_cache_tokens, plan_verdict=str(plan.verdict), plan_kv_gib=round(plan.kv_cache_gib, 2),
                   plan_weights_gib=round(plan.weights_gib, 2), plan_parts=plan.reserve_parts_gib,
                   plan_reserve_gib=[round(r, 2) for r in plan.reserved_gib], plan_sizing=plan.kv_sizing,
                   plan_number=plan.estimated_max_model_len or plan.mamba_block_bound,
                   miss=round(plan.kv_cache_tokens / tokens - 1, 4) if tokens else None)
    return row


def markdown_row(row: dict) -> str:
    """| record | vLLM | settings | vLLM's tokens or refusal | predicted | miss |"""
    from attnsel.bench.tools.memory_record import vllm_verdict

    flags = ", ".join(f"{k} {v}" for k, v in row["flags"].items()) or "defaults"
    verdict, number = vllm_verdict(row.get("vllm_status") or "ok", row["vllm_error"] or None)
    said = f"{row['vllm_tokens']:,}" if verdict == "fits" else f"**{verdict}**" + (f" ({number})" if number else "")
    ours = f"{row.get('plan_tokens') or 0:,}" if row.get("plan_verdict") == "fits" else str(row.get("plan_verdict"))
    if row.get("plan_verdict") not in ("fits", None) and row.get("plan_number"):
        ours += f" ({row['plan_number']})"
    miss = "" if row.get("miss") is None or verdict != "fits" else f"{100 * row['miss']:+.1f}%"
    if verdict != "fits" and number and row.get("plan_number"):
        miss = f"{100 * (row['plan_number'] / number - 1):+.1f}%"
    model = Path(row["model"]).stem if row["model"].endswith(".json") else row["model"]
    return f"| {model} | {row['vllm']} | {flags} | {said} | {ours} | {miss} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="docs/memory.md's table rows")
    args = parser.parse_args(argv)
    rows = [breakdown(p) for d in args.dirs for p in sorted(d.glob("*.json"))]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if args.markdown:
        for row in rows:
            print(markdown_row(row))
        return 0
    for row in rows:
        miss = "" if row.get("miss") is None else f"{100 * row['miss']:+.1f}%"
        print(f"{row['name']}: vLLM {row['vllm']} {row['vllm_tokens']} tokens, plan {row.get('plan_tokens')} {miss} "
              f"({row.get('plan_verdict')}) logged {row['logged']} plan parts {row.get('plan_parts')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
