"""Recordings of real GPU runs and vLLM releases (tests/fixtures/) that replay tests run attnsel's
code over. A replay test fails, never skips, when its recording is missing: `recorded(...)` raises
at collection, so the file is an error in the test run rather than a row of skips. (What the
recordings themselves show about those runs is checked by `python -m attnsel.bench.tools.evidence`.)"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def recorded(*parts: str) -> Path:
    """The recording at tests/fixtures/<parts>; FileNotFoundError when it is not there."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"recording missing: {path} (a replay test needs it; it does not skip)")
    return path


def recorded_glob(folder: str, pattern: str) -> list[Path]:
    """Every recording matching tests/fixtures/<folder>/<pattern>; FileNotFoundError when none does."""
    paths = sorted((FIXTURES / folder).glob(pattern))
    if not paths:
        raise FileNotFoundError(f"no recording matches {FIXTURES / folder / pattern} (replay tests need them)")
    return paths
