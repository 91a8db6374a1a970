"""Shared by the bad-input corpus and fuzz tests: run a command as a user would and check the
promise every bad input gets (README "Exit codes"): a documented exit code, exactly one line on
stderr when it is not 0, never a traceback, and no waiting beyond a time limit."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from attnsel.cli.app import app
from attnsel.errors import DOCUMENTED_EXIT_CODES

FIXTURES = Path(__file__).parent / "fixtures"
CATALOG = Path(__file__).parent.parent / "attention" / "models"
SCENARIO = str(FIXTURES / "probe" / "l40s_x2_pcie.json")
TIME_LIMIT_S = 10.0  # generous for a loaded 2-core CI runner; every case takes well under 1 s here
TRACEBACK_MARKERS = ("Traceback (most recent call last)", 'File "/', "Error:\n")


@dataclass
class Case:
    """One hostile input: the command line, its environment and stdin, what must come back."""

    id: str
    args: list[str]
    exit_code: int
    fragment: str | None = None  # a piece of the stderr line (the class of the problem)
    env: dict = field(default_factory=dict)
    stdin: str | None = None


def llama(**changes) -> dict:
    config = json.loads((CATALOG / "llama-3.1-8b.json").read_text())
    config.pop("_attnsel_source", None)
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def invoke(args: list[str], env: dict | None = None, stdin: str | None = None):
    started = time.monotonic()
    result = CliRunner().invoke(app, args, env={"ATTNSEL_NVML_SCENARIO": SCENARIO, **(env or {})}, input=stdin)
    return result, time.monotonic() - started


def assert_promise(result, elapsed: float, exit_code: int | None = None, fragment: str | None = None) -> None:
    """The four things every bad input is owed."""
    stderr, stdout = result.stderr or "", result.stdout or ""
    assert elapsed < TIME_LIMIT_S, f"took {elapsed:.1f} s"
    assert result.exit_code in DOCUMENTED_EXIT_CODES, (result.exit_code, stderr)
    for marker in TRACEBACK_MARKERS[:2]:
        assert marker not in stderr and marker not in stdout, stderr[-1500:]
    if exit_code is not None:
        assert result.exit_code == exit_code, (result.exit_code, stderr, stdout[-500:])
    if result.exit_code != 0:
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1, f"stderr must be one line, got {len(lines)}: {stderr[:800]}"
        assert lines[0].startswith("error: "), lines[0]
        if fragment is not None:
            assert fragment in lines[0], lines[0]


CLASSES = ("OK", "traceback", "hang", "wrong code", "silent acceptance", "unclear")


def classify(result, elapsed: float, exit_code: int, fragment: str | None = None) -> str:
    """How a user sees one run (the classes of issue 33's survey): OK (the documented code, and a
    refusal is one `error:` line naming the problem), traceback, hang (past the time limit), wrong
    code, silent acceptance (exit 0 where a refusal was due), unclear (the right code, a muddled line)."""
    stderr, stdout = result.stderr or "", result.stdout or ""
    if any(marker in stderr or marker in stdout for marker in TRACEBACK_MARKERS[:2]):
        return "traceback"
    if elapsed >= TIME_LIMIT_S:
        return "hang"
    if result.exit_code != exit_code:
        return "silent acceptance" if result.exit_code == 0 else "wrong code"
    if exit_code != 0:
        lines = [line for line in stderr.splitlines() if line.strip()]
        if len(lines) != 1 or not lines[0].startswith("error: ") or (fragment is not None and fragment not in lines[0]):
            return "unclear"
    return "OK"


def print_totals(cases, materialize, run_case, argv: list[str], by_family: bool = False) -> None:
    """A corpus's totals by class (`python tests/test_hostile_X.py [-v]`), for this checkout or another
    one's attnsel (PYTHONPATH): each case not OK by name (every case with -v), then the counts."""
    import tempfile
    from collections import Counter

    with tempfile.TemporaryDirectory() as tmp:
        materialize(Path(tmp))
        by_case = {case.id: run_case(case, Path(tmp)) for case in cases}
    for case_id, verdict in by_case.items():
        if verdict != "OK" or "-v" in argv:
            print(f"{verdict:18} {case_id}")
    print(dict(Counter(by_case.values())), f"of {len(by_case)}")
    if by_family:
        print(dict(sorted(Counter((cid.split(":")[0], v) for cid, v in by_case.items()).items())))
