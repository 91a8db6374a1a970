"""Keep what issue 12's `--gpus` evidence needs from bench/tools/multi_gpu_evidence.sh's runs, small
enough to commit: `python -m attnsel.bench.tools.gpus_fixture OUT DEST.json`.

Per run (cold_1gpu, warm_1gpu, warm_2gpu, cold_2gpu): the phases (where the wall time went), the
lanes and calibration, the environment's GPU, the recommendation's verdicts and fastest pairs, and
for the warm runs every row as (backend, block size, workload, GPU, median / p20 / p80 ms), so that
tests/test_tune_gpus_recorded.py can compare rows timed on the second GPU with the same rows timed
on the first.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RUNS = ("cold_1gpu", "warm_1gpu", "warm_2gpu", "cold_2gpu")
ROW_RUNS = ("warm_1gpu", "warm_2gpu")


def decision(scope: dict) -> dict:
    best = scope.get("best") or {}
    return {"verdict": scope.get("verdict"), "advised_flags": scope.get("advised_flags"),
            "best": [best.get("backend"), best.get("block_size")],
            "equally_good": [[c["backend"], c["block_size"]] for c in scope.get("equally_good") or []]}


def compact_row(row: dict) -> list:
    t = row.get("timing") or {}
    return [row["backend"], row["block_size"], row["workload_label"], row.get("gpu"), row["status"],
            t.get("median_ms"), t.get("p20_ms"), t.get("p80_ms")]


def run_summary(folder: Path, with_rows: bool) -> dict:
    doc = json.loads((folder / "tune.json").read_text(encoding="utf-8"))
    rec = doc.get("recommendation") or {}
    out = {"created": doc.get("created"), "gpu": (doc.get("environment") or {}).get("gpu"),
           "options": {k: doc["options"].get(k) for k in ("repeat_ms", "warmup_ms", "max_samples", "gpus")},
           "phases": doc.get("phases"), "gpus": doc.get("gpus"),
           "overall": decision(rec.get("overall") or {}),
           "workloads": {k: decision(v) for k, v in (rec.get("workloads") or {}).items()}}
    if with_rows:
        out["rows"] = [compact_row(r) for r in doc.get("rows") or []]
    return out


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    out, dest = Path(args[0]), Path(args[1])
    topo = out / "topo.txt"  # nvidia-smi topo -m, its ANSI underlines removed below
    runs = {name: run_summary(out / name, name in ROW_RUNS) for name in RUNS if (out / name / "tune.json").is_file()}
    doc = {"_note": "from bench/tools/multi_gpu_evidence.sh, kept by bench/tools/gpus_fixture.py",
           "gpus_txt": (out / "gpus.txt").read_text().strip() if (out / "gpus.txt").is_file() else None,
           "topology": re.sub(r"\x1b\[[0-9;]*m", "", topo.read_text()).strip() if topo.is_file() else None,
           "runs": runs}
    write_fixture(dest, doc, f"runs: {', '.join(runs)}")
    return 0


def write_fixture(dest: Path, doc: dict, what: str = "") -> None:
    """The kept JSON at `dest` (folders made), and one line saying where and how large."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"{dest} ({dest.stat().st_size // 1024} KiB{', ' + what if what else ''})")


if __name__ == "__main__":
    sys.exit(main())
