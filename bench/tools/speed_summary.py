"""Issue 25's speed table from one `bash bench/tools/gpu_session.sh speed OUT` run.

    python bench/tools/speed_summary.py OUT
prints one Markdown table (what, measured, target, where the time went) and the machine it ran on.
It reads only the files the run left (steps.txt, tune_*/tune.json and summary.txt, probe.txt,
verify/verify.json) and imports nothing of attnsel, so it also summarises a run made with another
checkout (the "before" figures, docs/tune-performance.md "Speed benchmark").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

TARGETS = {"tune_cold": 120.0, "tune_warm": 40.0, "probe": 0.2, "verify": 300.0}
LABELS = {
    "tune_cold": "`tune --head-size 128 --dtype bf16`, caches emptied",
    "tune_warm": "the same, warm",
    "probe": "`probe --json`, median of 7",
    "verify": "`verify` 3 engines, Llama-3.1-8B, 1x32768,4x16384,64x4096",
}


def read_json(path: Path) -> Any | None:
    """The JSON document at `path`, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_steps(out: Path, name: str = "steps.txt") -> dict[str, tuple[int, float]]:
    """steps.txt (gpu_session.sh speed), or times.txt (gpu_lanes.sh --timed): one `name exit-code
    seconds` line per step that ran."""
    steps: dict[str, tuple[int, float]] = {}
    try:
        lines = (out / name).read_text(encoding="utf-8").splitlines()
    except OSError:
        return steps
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            steps[parts[0]] = (int(parts[1]), float(parts[2]))
    return steps


def time_line(run_dir: Path) -> str:
    try:
        for line in (run_dir / "summary.txt").read_text(encoding="utf-8").splitlines():
            if line.startswith("time:"):
                return line[len("time:"):].strip()
    except OSError:
        pass
    return "no time: line (the run did not finish)"


def probe_detail(out: Path) -> tuple[float | None, str]:
    result = read_json(out / "probe.txt")
    if not isinstance(result, dict):
        return None, "no probe_speed result"
    sub = result.get("subprocess") or {}
    detail = (f"min {sub.get('min_s')} s, max {sub.get('max_s')} s; torch imported: {sub.get('torch_imported')}; "
              f"source {(result.get('in_process') or {}).get('source')}")
    return sub.get("median_s"), detail


def verify_detail(out: Path) -> str:
    doc = read_json(out / "verify" / "verify.json")
    if not isinstance(doc, dict):
        return "no verify.json"
    parts = []
    for row in doc.get("candidates") or []:
        engine = row.get("engine") or {}
        figures = ", ".join(f"{key.removesuffix('_s')} {engine[key]:.0f}" for key in
                            ("import_s", "llm_init_s", "torch_compile_s", "graph_capture_s", "init_engine_s")
                            if isinstance(engine.get(key), (int, float)))
        start = row.get("start_s")
        started = f"start {start:.0f} s" if isinstance(start, (int, float)) else str(row.get("status"))
        parts.append(f"{row.get('name') or row.get('backend')}: {started} ({figures})")
    overrides = (doc.get("options") or {}).get("engine_overrides")
    return "; ".join(parts) + (f"; engine_overrides {overrides}" if overrides else "")


def machine(out: Path) -> str:
    doc = read_json(out / "tune_warm" / "tune.json") or read_json(out / "tune_cold" / "tune.json") or {}
    env = doc.get("environment") or {}
    versions = ((env.get("workers") or {}).get("FLASH_ATTN") or {}).get("versions") or {}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        smi = []
    gpu = smi[0] if smi else "GPU unknown (no nvidia-smi)"
    return (f"{gpu} x{len(smi) or '?'}; vLLM {versions.get('vllm')}, torch {versions.get('torch')}, "
            f"flashinfer {versions.get('flashinfer-python')}, Python {versions.get('python')}")


def summary(out: Path) -> str:
    steps = read_steps(out)
    probe_median, probe_text = probe_detail(out)
    details = {"tune_cold": time_line(out / "tune_cold"), "tune_warm": time_line(out / "tune_warm"),
               "probe": probe_text, "verify": verify_detail(out)}
    lines = [f"machine: {machine(out)}", "",
             "| what | measured | target | exit | where the time went |", "|---|---|---|---|---|"]
    for name, label in LABELS.items():
        if name not in steps:
            lines.append(f"| {label} | not run | < {TARGETS[name]:g} s | - | an earlier step failed |")
            continue
        code, seconds = steps[name]
        measured = probe_median if name == "probe" else seconds
        shown = f"{measured:.2f} s" if name == "probe" and measured is not None else f"{seconds:.1f} s"
        if code in (124, 137):
            shown = f"> {seconds:.0f} s (timed out)"
        met = measured is not None and code == 0 and measured < TARGETS[name]
        lines.append(f"| {label} | {shown} | < {TARGETS[name]:g} s{' (met)' if met else ''} | {code} | "
                     f"{details[name].replace('|', '/')} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: speed_summary.py OUT", file=sys.stderr)
        return 2
    print(summary(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
