"""The statuses of a preflight check and the check itself, shared by every check (deployment, GPUs,
memory, the Ray fleet)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnsel.words import Word

if TYPE_CHECKING:
    from attnsel.attention.preflight.document import CheckFields


class CheckStatus(Word):
    """A check's status, as `preflight --json` writes it ("status") and the text labels it (upper case)."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
STATUSES = (PASS, WARN, FAIL)  # in rising severity: the worst of several checks is the one with the highest index


def failing_statuses(strict: bool) -> tuple[CheckStatus, ...]:
    """The statuses that fail a preflight run (exit 1): FAIL; with --strict, WARN too."""
    return (WARN, FAIL) if strict else (FAIL,)


@dataclass(frozen=True)
class Check:
    name: str  # short id: gpu-count, same-model, interconnect, model-config, dtype, attention
    status: CheckStatus
    message: str
    hint: str | None = None  # what to do next, one line
    vllm_message: str | None = None  # vLLM's own text (error or log line), verbatim

    def to_dict(self) -> CheckFields:
        # the status is its word in the JSON: a str-valued enum (attnsel/words.py)
        return {"name": self.name, "status": self.status, "message": self.message, "hint": self.hint,
                "vllm_message": self.vllm_message}
