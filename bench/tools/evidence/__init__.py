"""Evidence apart from tests: what README.md, docs/tune-performance.md and the issues say GPU runs showed,
checked against the recordings of those runs committed under tests/fixtures/ (issue 23, item 7).

    python -m attnsel.bench.tools.evidence [--fixtures DIR]

A test runs attnsel's code and fails on a regression; a claim here only re-reads what a GPU run
recorded (row counts, timers, speeds, the advice it gave) and checks that the recording still
shows what the docs say. Exit 0 when every claim holds; 1 with one line per broken claim. A
missing or unreadable recording breaks its claims: it never skips them. `.ci/run` runs this
after the tests. A new recording that backs a statement gets its claim in the module of its area
(tune.py, verify.py, parity.py, probe.py, speed.py): `@claim` names the statement and the recordings."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnsel.bench.tools.evidence import (  # noqa: F401  (each registers its claims)
    parity,
    probe,
    speed,
    tune,
    verify,
    vllm033,
    vllm034,
)
from attnsel.bench.tools.evidence.claims import (
    CLAIMS,
    FIXTURES,
    Broken,
    Claim,
    Recordings,
)


def check(claim_: Claim, rec: Recordings) -> str | None:
    """None when the claim holds; else why not, on one line."""
    missing = [name for name in claim_.recordings if not (rec.root / name).is_file()]
    if missing:
        return f"recording missing: {', '.join(missing)}"
    try:
        claim_.check(rec)
    except Broken as exc:
        return str(exc)
    except Exception as exc:  # an unreadable or reshaped recording breaks its claim too
        return f"cannot read the recording ({type(exc).__name__}: {exc})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnsel.bench.tools.evidence", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, help="the recordings folder (default: tests/fixtures)")
    args = parser.parse_args(argv)
    rec = Recordings(args.fixtures)
    held = 0
    for claim_ in CLAIMS:
        why = check(claim_, rec)
        if why is None:
            held += 1
        else:
            read = "" if why.startswith("recording missing") else f"; recording: {', '.join(claim_.recordings)}"
            print(" ".join(f"broken: {claim_.name}: {why} (claim: {claim_.backs}{read})".split()))
    print(f"evidence: {len(CLAIMS)} claims checked, {held} held")
    return 0 if held == len(CLAIMS) else 1

