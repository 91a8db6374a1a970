"""The vocabulary of a claim: what it backs, the recordings it reads, how it breaks."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnsel.bench.sweep import results as R

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures"
TUNE_PERF = Path(__file__).parents[3] / "docs" / "tune-performance.md"


class Broken(Exception):
    """A recording that does not show what its claim says."""


def expect(condition: object, message: str) -> None:
    # not `assert`: `python -O` would drop every check
    if not condition:
        raise Broken(message)


class Recordings:
    """Reads recordings under one fixtures folder (paths relative to it)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def json(self, name: str):
        return json.loads((self.root / name).read_text())

    def jsonl(self, name: str) -> list:
        return [json.loads(line) for line in (self.root / name).read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class Claim:
    name: str
    backs: str  # the README / docs statement or the issue this claim stands behind
    recordings: tuple[str, ...]  # relative to the fixtures folder
    check: Callable[[Recordings], None]


CLAIMS: list[Claim] = []


def claim(backs: str, *recordings: str):
    def register(check: Callable[[Recordings], None]):
        CLAIMS.append(Claim(check.__name__, backs, recordings, check))
        return check
    return register


def ok_rows(rows: list) -> list:
    return [r for r in rows if r.get("status") == R.STATUS_OK]
