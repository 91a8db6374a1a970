"""One JSON document from a developer tool: to a file when `--output` names one, else to standard output."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit(doc: Any, output: str | None) -> None:
    text = json.dumps(doc, indent=1) + "\n"
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
