"""How fast is `attnsel probe`? Target (issue 25): under 0.2 s on a GPU machine, under 0.5 s on one with
torch but no NVML; no torch import where there is no driver (docs/probe.md, "Speed").

    python -m attnsel.bench.tools.probe_speed --runs 7
prints one JSON object: the subprocess wall time of `python -m attnsel probe --json` (median of N),
the same for `python -c pass` (what the interpreter's own start costs on this machine: the floor), the
in-process `collect_probe()` time (first call and median of N), and whether torch was imported.
`writes_bytecode` false (PYTHONDONTWRITEBYTECODE set): modules without a .pyc compile anew on every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any


def time_subprocess(runs: int) -> dict:
    walls = []
    rc = None
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "attnsel", "probe", "--json"], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        rc = out.returncode
    importtime = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "attnsel", "probe", "--json"], capture_output=True, text=True
    )
    torch_lines = [line for line in importtime.stderr.splitlines() if line.rstrip().endswith(("| torch", "|   torch"))
                   or line.split("|")[-1].strip() == "torch"]
    return {
        "runs": runs,
        "median_s": round(statistics.median(walls), 4),
        "min_s": round(min(walls), 4),
        "max_s": round(max(walls), 4),
        "exit_code": rc,
        "torch_imported": bool(torch_lines),
    }


def python_start(runs: int) -> float:
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True)
        walls.append(time.perf_counter() - start)
    return round(statistics.median(walls), 4)


def time_in_process(runs: int) -> dict:
    from attnsel.probe import collect_probe

    start = time.perf_counter()
    report = collect_probe()
    first = time.perf_counter() - start
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        collect_probe()
        walls.append(time.perf_counter() - start)
    return {
        "first_s": round(first, 4),
        "median_s": round(statistics.median(walls), 4),
        "source": report.source,
        "gpus": len(report.gpus),
        "torch_in_sys_modules": "torch" in sys.modules,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="time attnsel probe")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "scenario": os.environ.get("ATTNSEL_NVML_SCENARIO"),
        "writes_bytecode": not sys.flags.dont_write_bytecode,
        "python_c_pass_median_s": python_start(args.runs),
        "subprocess": time_subprocess(args.runs),
        "in_process": time_in_process(args.runs),
        "target_s": 0.2,
    }
    result["under_target"] = result["subprocess"]["median_s"] < result["target_s"]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
