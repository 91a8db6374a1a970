"""Copy an `attnsel verify` run into a small test fixture: `python -m attnsel.bench.tools.verify_fixture RUN DEST`.

DEST gets verify.json as written, the engines' logs (evidence: vLLM's own lines), and the tune.json
it checked cut down to what the verify comparisons read (plan, recommendation, environment, the
decode rows at the verified shapes); tests/test_verify_replay.py replays DEST through the report
and re-derives its numbers and verdict. Put DEST under tests/fixtures/verify/<run name>/.

`--rederive DEST` re-derives a fixture's comparisons and verdict from its recorded engine calls
with today's verdict rules (after a rule change; the measurements are not touched), and notes it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

KEPT_TUNE_KEYS = ("schema", "attnsel_version", "created", "plan", "options", "environment", "recommendation", "warnings")


def compared_pairs(verify: dict) -> set[tuple[str, int]]:
    """Every (backend, block size) an engine was asked for, predicted or really ran."""
    pairs = set()
    for row in verify.get("candidates") or []:
        engine = row.get("engine") or {}
        for backend, size in ((row.get("backend"), row.get("block_size")), tuple(row.get("predicted") or (None, None)),
                              (engine.get("backend_used"), engine.get("block_size_used"))):
            if backend and size:
                pairs.add((str(backend), int(size)))
    return pairs


def trimmed_tune(tune: dict, verify: dict) -> dict:
    shapes = {tuple(s) for s in (verify.get("options") or {}).get("shapes") or []}
    pairs = compared_pairs(verify)
    decode = [r for r in tune.get("rows") or [] if r.get("kind") == "decode" and (r["backend"], int(r["block_size"])) in pairs]
    rows = [r for r in decode if (int(r["workload"]["batch"]), int(r["workload"]["context_len"])) in shapes]
    rows = rows or decode  # tune did not time these shapes: the compared pairs' rows, so the report renders
    out = {k: tune[k] for k in KEPT_TUNE_KEYS if k in tune}
    out["rows"] = rows
    out["_note"] = (f"cut down by bench/tools/verify_fixture.py: {len(rows)} of {len(tune.get('rows') or [])} rows kept "
                    f"(the compared pairs' decode rows at the verified shapes, else at every shape); plan and recommendation "
                    f"as tune wrote them")
    return out


def copy_run(run: Path, dest: Path) -> list[Path]:
    verify = json.loads((run / "verify.json").read_text(encoding="utf-8"))
    dest.mkdir(parents=True, exist_ok=True)
    written = [dest / "verify.json"]
    shutil.copy(run / "verify.json", written[0])
    # verify --output puts verify.json beside the engines' logs, away from the tune run it checked
    source = run if (run / "tune.json").is_file() else Path(str((verify.get("tune") or {}).get("source") or run))
    if (source / "tune.json").is_file():
        tune = json.loads((source / "tune.json").read_text(encoding="utf-8"))
        written.append(dest / "tune.json")
        written[-1].write_text(json.dumps(trimmed_tune(tune, verify), indent=1) + "\n", encoding="utf-8")
    for row in verify.get("candidates") or []:
        if row.get("log") and (run / row["log"]).is_file():
            target = dest / row["log"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(run / row["log"], target)
            written.append(target)
    return written


def rederive(folder: Path) -> dict:
    """verify.json's tune summary, comparisons and verdict again from its recorded figures."""
    from attnsel.bench.tune import advised_flags
    from attnsel.bench.verify import build_comparisons, summarize
    from attnsel.bench.verify import plan as VP

    doc = json.loads((folder / "verify.json").read_text(encoding="utf-8"))
    tune = json.loads((folder / "tune.json").read_text(encoding="utf-8")) if (folder / "tune.json").is_file() else None
    if tune and doc.get("tune"):  # the two fields verify's tune summary gained for the verdict rules
        scope = VP.tune_scope(tune.get("recommendation"))
        doc["tune"].update(advised_flags=advised_flags(scope) if scope else None,
                           min_gain_pct=scope.min_gain_pct if scope else None)
    doc["comparisons"] = build_comparisons(doc, tune)
    # the verdict the run itself printed, kept through later re-derivations
    recorded = doc.setdefault("_recorded_verdict", (doc.get("verdict") or {}).get("verdict"))
    doc["verdict"] = summarize(doc)
    doc["_rederived"] = (f"comparisons and verdict re-derived from the recorded calls by bench/tools/verify_fixture.py "
                         f"--rederive (verdict when recorded: {recorded})")
    (folder / "verify.json").write_text(json.dumps(doc, indent=2, default=str), encoding="utf-8")
    return doc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the folder verify wrote (holds verify.json)")
    parser.add_argument("dest", type=Path, nargs="?", help="the fixture folder, e.g. tests/fixtures/verify/h100_llama8b")
    parser.add_argument("--rederive", action="store_true", help="re-derive RUN's comparisons and verdict in place")
    args = parser.parse_args(argv)
    if args.rederive and (args.run / "verify.json").is_file():
        print(f"{args.run}: {rederive(args.run)['verdict']['text']}")
        return 0
    if args.dest is None:
        parser.error("DEST is required unless --rederive")
    if not (args.run / "verify.json").is_file():
        print(f"error: {args.run}/verify.json does not exist", file=sys.stderr)
        return 2
    for path in copy_run(args.run, args.dest):
        print(f"{path} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
