"""`--weights`: how much each workload kind counts in tune's overall score (docs/tune.md, "How tune
recommends"). Serving is decode-dominated, hence the default."""

from __future__ import annotations

import math

from attnsel.bench.plan.workloads import WorkloadKind
from attnsel.errors import UserInputError

DEFAULT_WEIGHTS: dict[str, float] = {WorkloadKind.DECODE: 0.7, WorkloadKind.PREFILL: 0.2, WorkloadKind.MIXED: 0.1}


def parse_weights(text: str | None) -> dict[str, float]:
    """`decode=0.7,prefill=0.2,mixed=0.1` -> dict; kinds left out weigh 0.

    >>> parse_weights("decode=3,prefill=1") == {"decode": 3.0, "prefill": 1.0, "mixed": 0.0}
    True
    """
    if not text:
        return dict(DEFAULT_WEIGHTS)
    weights = dict.fromkeys(DEFAULT_WEIGHTS, 0.0)
    seen: set[str] = set()
    for part in text.split(","):
        if not part.strip():
            continue
        given, sep, value = part.partition("=")
        name = given.strip().lower()
        if sep and name in seen:
            raise UserInputError(f"--weights gives {name} twice: {text!r}")
        seen.add(name)
        if not sep or name not in weights:
            raise UserInputError(f"--weights must look like decode=0.7,prefill=0.2,mixed=0.1, got {text!r}")
        kind = WorkloadKind(name)
        try:
            weights[kind] = float(value)
        except ValueError:
            raise UserInputError(f"--weights: {value!r} is not a number") from None
        if weights[kind] < 0 or not math.isfinite(weights[kind]):
            raise UserInputError(f"--weights must be finite numbers >= 0, got {name}={value.strip()}")
    if sum(weights.values()) <= 0:
        raise UserInputError("--weights must give at least one workload a positive weight")
    return weights
