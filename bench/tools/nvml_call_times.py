"""Where `attnsel probe`'s time goes on a GPU machine: nvmlInit, each NVML function the probe calls
(count and total ms), for plain nvmlInit and for nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH), each in a
fresh process, whether the two modes answer every call alike, and the slowest imports of
`attnsel probe --json` (python -X importtime).

    python3 -m attnsel.bench.tools.nvml_call_times --runs 3 --output nvml_times.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from attnsel.bench.tools.jsonout import emit

NO_ATTACH = 2  # nvml.h: NVML_INIT_FLAG_NO_ATTACH, "Don't attach GPUs"
MODES = {"init": None, "no_attach": NO_ATTACH}


def one_run(mode: str) -> dict:
    """In this process: collect_probe over a facade that times each call (all GPUs visible)."""
    import pynvml

    from attnsel.bench.tools.record_nvml import NoTorch, RecordingFacade
    from attnsel.probe import collect_probe
    from attnsel.probe.nvml import PynvmlFacade

    flags = MODES[mode]
    if flags is not None:
        pynvml.nvmlInit = lambda: pynvml.nvmlInitWithFlags(flags)  # type: ignore[assignment]
    spent: dict[str, list[float]] = {}

    class Timed(RecordingFacade):
        def call(self, function: str, *args: Any) -> Any:
            started = time.perf_counter()
            try:
                return super().call(function, *args)
            finally:
                spent.setdefault(function, []).append((time.perf_counter() - started) * 1e3)

    facade = Timed(PynvmlFacade())
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    started = time.perf_counter()
    report = collect_probe(env, nvml=facade, measure_p2p=False, torch=NoTorch())
    total_ms = (time.perf_counter() - started) * 1e3
    return {"mode": mode, "gpus": len(report.gpus), "collect_ms": round(total_ms, 2),
            "init_ms": round(facade.init_ms or 0.0, 2),
            "calls": {f: {"count": len(v), "ms": round(sum(v), 2)} for f, v in sorted(spent.items())},
            "answers": facade.calls}


def import_times(top: int = 15) -> list[tuple[str, int]]:
    """The slowest imports (cumulative us) of `attnsel probe --json`."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "attnsel", "probe", "--json"],
                          capture_output=True, text=True, timeout=60)
    rows: list[tuple[str, int]] = []  # (module, microseconds): JSON lists, as before
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[1].isdigit():
            rows.append((parts[2], int(parts[1])))
    return sorted(rows, key=lambda r: -r[1])[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one", choices=sorted(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    if args.one:
        json.dump(one_run(args.one), sys.stdout)
        return 0
    runs: list[dict] = []
    for _ in range(args.runs):
        for mode in MODES:
            done = subprocess.run([sys.executable, "-m", "attnsel.bench.tools.nvml_call_times", "--one", mode],
                                  capture_output=True, text=True, timeout=120)
            runs.append(json.loads(done.stdout) if done.returncode == 0 else {"mode": mode, "error": done.stderr[-800:]})
    answers: dict[str, dict[str, dict]] = {r["mode"]: r.pop("answers") for r in runs if "answers" in r}
    differ = sorted(f"{fn}({key})" for fn, keys in answers.get("init", {}).items() for key, value in keys.items()
                    if answers.get("no_attach", {}).get(fn, {}).get(key) != value)
    out = {"runs": runs, "answers_differ_no_attach": differ, "imports_us": import_times()}
    emit(out, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
