"""Keep what issue 25's before/after sitting needs, small enough to commit:
`python -m attnsel.bench.tools.speed_fixture RESULTS DEST.json`, RESULTS being what
`PLAN=speed bash bench/tools/gpu_evidence_plan.sh RESULTS` left (docs/tune-performance.md
"Speed benchmark").

Kept per side (before / after): the steps' exit codes and seconds, each tune run's summary (phases,
lanes, recommendation and, for the warm runs, every row as backend, block size, workload, GPU,
median / p20 / p80 ms: bench/tools/gpus_fixture.py's form), each verify.json whole (engines' start
parts, shapes, verdict; the A/A run's too), probe_speed's JSON; the `--gpus` runs (1, 2 and 4
GPUs, cold and warm, and the 1-GPU A/B beside them) in the same summary form; bench/tools/cupti_ab.py's
JSON where the sitting ran it. tests/test_speed_recorded.py replays it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnsel.bench.tools.gpus_fixture import run_summary, write_fixture
from attnsel.bench.tools.speed_summary import read_json, read_steps

SIDES = ("before", "after")


def _json(path: Path) -> dict | None:
    value = read_json(path)
    return value if isinstance(value, dict) else None


def _tune(folder: Path, with_rows: bool) -> dict | None:
    return run_summary(folder, with_rows) if (folder / "tune.json").is_file() else None


def _times(lane: Path) -> dict:
    """gpu_lanes.sh --timed steps, as JSON lists."""
    return {name: list(step) for name, step in read_steps(lane, "times.txt").items()}


def side(results: Path, name: str) -> dict:
    tune_out = results / "phase1" / f"{name}_tune" / "speed"
    verify_lane = results / "phase1" / f"{name}_verify"
    verify_out = verify_lane / "speed"
    # the A/A verify ran after the verify in its lane (speed2), or in a lane of its own (speed, 4 GPUs)
    aa_lane = results / "phase1" / f"{name}_aa"
    aa_lane = aa_lane if aa_lane.is_dir() else verify_lane
    steps = {k: list(v) for k, v in (read_steps(tune_out) | read_steps(verify_out)).items()}
    return {"steps": steps,
            "tune_cold": _tune(tune_out / "tune_cold", False),
            "tune_warm": _tune(tune_out / "tune_warm", True),
            "verify": _json(verify_out / "verify" / "verify.json"),
            "aa": _json(aa_lane / "aa" / "verify.json"),
            "aa_step": _times(aa_lane).get("aa"),
            "probe_busy": _json(tune_out / "probe.txt"),
            "probe": _json(results / "probe" / f"probe_{name}" / "probe.json")}


def gpus(results: Path) -> dict:
    def lane(folder: Path, cold: str = "cold", warm: str = "warm") -> tuple[Path, Path, Path]:
        return folder, folder / cold, folder / warm

    lanes = {"1": lane(results / "phase2" / "gpus1"), "2": lane(results / "phase2" / "gpus2"),
             "4": lane(results / "phase3" / "gpus4"),
             # the 1-GPU run beside "1" with ATTNSEL_TUNE_PRECOMPILE=0 (the Triton pre-compile's A/B)
             "1_noprecompile": lane(results / "phase2" / "noprecompile"),
             # ... or with ATTNSEL_CUPTI_FINALIZE=1 (CUPTI set up for every row, as before: its A/B)
             "1_cupti_finalize": lane(results / "phase2" / "cupti_finalize")}
    if (results / "phase2" / "gpus2").is_dir() and not (results / "phase2" / "gpus1").is_dir():
        # PLAN=speed2 (a 2-GPU machine): the 1-GPU figures are the after side's tune lane
        lanes["1"] = lane(results / "phase1" / "after_tune" / "speed", "tune_cold", "tune_warm")
    return {n: {"steps": _times(folder), "cold": _tune(cold, False), "warm": _tune(warm, True)}
            for n, (folder, cold, warm) in lanes.items() if folder.is_dir()}


def bytecode(results: Path) -> dict:
    """PLAN=bytecode: tune with the carried packages compiled | not, `--gpus all` warm, probe threads | serial."""
    phase1, probe = results / "phase1", results / "probe" / "probe"
    lanes = {lane: {"steps": _times(phase1 / lane), "cold": _tune(phase1 / lane / "cold", False),
                    "warm": _tune(phase1 / lane / "warm", True)} for lane in ("pyc", "nopyc")}
    return {**lanes, "gpus_all_warm": _tune(results / "phase2" / "pyc" / "warm", True),
            "probe": {name: _json(probe / f"{name}.json") for name in ("threads", "serial", "nvml_times")}}


def keep(results: Path) -> dict:
    machine = results / "machine.txt"
    if (results / "phase1" / "pyc").is_dir():
        return {"_note": "from PLAN=bytecode bash bench/tools/gpu_evidence_plan.sh, kept by bench/tools/speed_fixture.py",
                "machine": machine.read_text(encoding="utf-8").strip() if machine.is_file() else None,
                **bytecode(results)}
    return {"_note": "from PLAN=speed bash bench/tools/gpu_evidence_plan.sh, kept by bench/tools/speed_fixture.py",
            "machine": machine.read_text(encoding="utf-8").strip() if machine.is_file() else None,
            **{name: side(results, name) for name in SIDES}, "gpus": gpus(results),
            "cupti_ab": {str(path.parent.relative_to(results)): _json(path)
                         for path in sorted(results.glob("phase*/*/cupti_ab.json"))}}


def main(argv=None) -> int:
    """RESULTS DEST.json [NAME=TUNE_DIR ...]: further tune runs of the sitting (e.g. a re-run after a
    fix, side by side: before_cold=/tmp/fix/fix_before/cold) kept under "runs" in the same form."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or any("=" not in a for a in args[2:]):
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    results, dest = Path(args[0]), Path(args[1])
    doc = keep(results)
    runs = dict(a.split("=", 1) for a in args[2:])
    if runs:
        doc["runs"] = {name: _tune(Path(folder), "warm" in name) for name, folder in runs.items()}
    write_fixture(dest, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
