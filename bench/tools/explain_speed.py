"""Time `attnsel explain ... --gpu H100` as a subprocess (what a user waits for) and print JSON.

    python -m attnsel.bench.tools.explain_speed [--runs N] [-- extra explain args]

Reports the median and spread of N wall-clock runs, plus the in-process time of the rules engine
alone (`explain()` on the same inputs), so interpreter/Typer start-up and our own work can be told
apart. No GPU needed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

DEFAULT_ARGS = ["--head-size", "128", "--dtype", "bf16", "--gpu", "H100", "--json"]


def time_cli(args: list[str], runs: int) -> list[float]:
    command = [sys.executable, "-m", "attnsel", "explain", *args]
    subprocess.run(command, capture_output=True, check=False)  # warm the file cache
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        samples.append(time.perf_counter() - start)
        if result.returncode not in (0, 1):
            raise SystemExit(f"explain failed ({result.returncode}): {result.stderr.strip()}")
    return samples


def time_engine(runs: int, profile_name: str | None = None) -> float:
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.selector import explain
    from attnsel.attention.versions import get_profile

    profile = get_profile(profile_name)
    inputs = SelectorInputs(128, "bfloat16")
    ctx = SelectionContext(capability=(9, 0))
    start = time.perf_counter()
    for _ in range(runs):
        explain(profile, inputs, ctx)
    return (time.perf_counter() - start) / runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("explain_args", nargs="*", help="arguments for `attnsel explain` (after --)")
    ns = parser.parse_args(argv)
    args = ns.explain_args or DEFAULT_ARGS
    samples = time_cli(args, ns.runs)
    python_start = time_cli_python(ns.runs)
    print(json.dumps({
        "command": "attnsel explain " + " ".join(args),
        "runs": ns.runs,
        "median_s": round(statistics.median(samples), 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "python_startup_median_s": round(statistics.median(python_start), 4),
        "engine_only_ms": round(time_engine(200) * 1e3, 3),
        "engine_only_ms_by_profile": {
            name: round(time_engine(200, name) * 1e3, 3) for name in _profiles_to_time()
        },
        "target_s": 0.3,
        "within_target": statistics.median(samples) < 0.3,
    }, indent=2))


def _profiles_to_time() -> list[str]:
    """The oldest and the newest version profile (their rules differ most)."""
    from attnsel.attention.versions import available_profiles, release_profiles

    releases = release_profiles()
    return list(dict.fromkeys([*[n for n in available_profiles() if n not in releases][:1], releases[0], releases[-1]]))


def time_cli_python(runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
    return samples


if __name__ == "__main__":
    main()
