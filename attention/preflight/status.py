"""The statuses of a preflight check and the check itself, shared by every check (deployment, GPUs,
memory, the Ray fleet)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

PASS, WARN, FAIL = "pass", "warn", "fail"
STATUSES = (PASS, WARN, FAIL)  # in rising severity: the worst of several checks is the one with the highest index


def failing_statuses(strict: bool) -> tuple[str, ...]:
    """The statuses that fail a preflight run (exit 1): FAIL; with --strict, WARN too."""
    return (WARN, FAIL) if strict else (FAIL,)


@dataclass(frozen=True)
class Check:
    name: str  # short id: gpu-count, same-model, interconnect, model-config, dtype, attention
    status: str  # pass | warn | fail
    message: str
    hint: str | None = None  # what to do next, one line
    vllm_message: str | None = None  # vLLM's own text (error or log line), verbatim

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
