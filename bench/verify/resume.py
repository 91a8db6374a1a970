"""`attnsel verify --resume`: the verify.json already in the output folder, and which of its
engines a new run keeps (bench/verify/run.py)."""

from __future__ import annotations

import json
from pathlib import Path

from attnsel.bench.verify.status import RunStatus
from attnsel.errors import UserInputError

DOCUMENT_FILE = "verify.json"  # written by bench/verify/run.py


# What must match for a resumed run's engines to be compared with new ones
RESUME_OPTIONS = ("shapes", "repeats", "decode_steps", "max_model_len", "engine_overrides", "engine", "repeat_engine")


def previous_rows(output_dir: Path, resume: bool) -> dict | None:
    """The verify.json already in the folder: refused without --resume (it would be lost)."""
    path = Path(output_dir) / DOCUMENT_FILE
    if not path.is_file():
        return None
    if not resume:
        raise UserInputError(f"{path} already holds a verify result: pass --resume to keep the engines it measured, "
                             f"or remove it to start over")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserInputError(f"{path} cannot be resumed: {exc}; remove it to start over") from None


def kept_rows(previous: dict | None, document: dict) -> dict:
    """The measured rows of the run being resumed, by candidate; none if its options differ."""
    if not previous:
        return {}
    old, new = previous.get("options") or {}, document["options"]
    changed = [k for k in RESUME_OPTIONS if old.get(k) != new.get(k)]
    if changed:
        raise UserInputError(f"the verify result being resumed used other {', '.join(changed)}: run with the same "
                             f"options, or remove verify.json to start over")
    return {row_key(r): r for r in previous.get("candidates") or [] if r.get("status") == RunStatus.OK}


def row_key(row: dict) -> tuple:
    return (tuple(row.get("roles") or ()), row.get("backend"), row.get("block_size"))
