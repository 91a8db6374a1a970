"""Read what `attnsel report` renders: a tune output (folder, tune.json or results.jsonl, as
bench/tune.py and bench/results.py write them) and `attnsel explain --json` answers. The kind of
each input is found from its content, not its name. Bad input -> UserInputError, one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from attnsel.bench import recommend as REC
from attnsel.bench import results as R
from attnsel.errors import UserInputError

TUNE_SCHEMA = "attnsel-tune/1"  # bench/tune.py DOCUMENT_SCHEMA
PLAN_SCHEMA = "attnsel-tune-plan/1"
VERIFY_SCHEMA = "attnsel-verify/1"  # bench/verify.py SCHEMA
TUNE_DOCUMENT = "tune.json"
VERIFY_DOCUMENT = "verify.json"  # bench/verify.py DOCUMENT_FILE
WHAT_TO_PASS = ("pass the folder `attnsel tune --output` wrote (or its tune.json / results.jsonl), an `attnsel verify` "
                "verify.json, or an `attnsel explain --json` file")


@dataclass
class TuneData:
    source: str
    document: dict  # tune.json; for a bare results.jsonl only "rows" and a recomputed "recommendation"
    complete: bool  # False: tune.json missing (the sweep was cut short), advice recomputed from the rows

    @property
    def rows(self) -> list[dict]:
        return self.document.get("rows") or []

    @property
    def recommendation(self) -> Optional[dict]:
        return self.document.get("recommendation")

    @property
    def plan(self) -> dict:
        return self.document.get("plan") or {}

    @property
    def environment(self) -> dict:
        return self.document.get("environment") or {}

    @property
    def note(self) -> Optional[str]:
        return self.document.get("_note")


@dataclass
class ReportData:
    tune: Optional[TuneData] = None
    explains: list[dict] = field(default_factory=list)  # explain --json documents
    sources: list[str] = field(default_factory=list)
    verify: Optional[dict] = None  # verify.json (attnsel verify / tune --verify)


def load_inputs(paths: Sequence[str | Path]) -> ReportData:
    """One tune result (its folder's verify.json comes with it), one verify result and/or any
    number of explain answers, in any order."""
    if not paths:
        raise UserInputError(f"nothing to report: {WHAT_TO_PASS}")
    data = ReportData()
    for raw in paths:
        kind, value = load_one(raw)
        if kind == "verify":
            _set_verify(data, value, raw)
        elif kind == "tune":
            if data.tune is not None:
                raise UserInputError(f"{raw}: only one tune result per report (already have {data.tune.source})")
            data.tune = value
            if Path(raw).expanduser().is_dir():
                _add_verify(data, Path(raw).expanduser() / VERIFY_DOCUMENT)
        else:
            data.explains.append(value)
        data.sources.append(str(raw))
    return data


def _add_verify(data: ReportData, path: Path) -> None:
    """A run folder's verify.json, rendered with its tune result."""
    if path.is_file():
        kind, doc = _classify(path, _parse_json(path, _read_text(path)))
        if kind == "verify":
            _set_verify(data, doc, path)


def _set_verify(data: ReportData, doc: dict, source) -> None:
    if data.verify is not None:
        raise UserInputError(f"{source}: only one verify result per report")
    data.verify = doc


def load_one(raw: str | Path) -> tuple[str, Any]:
    path = Path(raw).expanduser()
    if path.is_dir():
        if not (path / TUNE_DOCUMENT).is_file() and not (path / R.RESULTS_FILE).is_file() and (path / VERIFY_DOCUMENT).is_file():
            return _classify(path / VERIFY_DOCUMENT, _parse_json(path / VERIFY_DOCUMENT, _read_text(path / VERIFY_DOCUMENT)))
        return "tune", _load_tune_dir(path)
    if not path.exists():
        raise UserInputError(f"{path} does not exist: {WHAT_TO_PASS}")
    text = _read_text(path)
    if not text.strip():
        raise UserInputError(f"{path} is empty: {WHAT_TO_PASS}")
    if path.suffix == ".jsonl" or _looks_like_jsonl(text):
        sibling = path.parent / TUNE_DOCUMENT
        if sibling.is_file():
            return "tune", _tune_from_document(sibling, _parse_json(sibling, _read_text(sibling)))
        return "tune", _tune_from_rows(path)
    return _classify(path, _parse_json(path, text))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserInputError(f"{path} is not UTF-8 text: {WHAT_TO_PASS}") from None
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _looks_like_jsonl(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) > 1 and all(line.lstrip().startswith("{") and line.rstrip().endswith("}") for line in lines[:-1])


def _parse_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserInputError(f"{path} is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}): {WHAT_TO_PASS}") from None


def _classify(path: Path, doc: Any) -> tuple[str, Any]:
    if not isinstance(doc, dict):
        raise UserInputError(f"{path} holds a JSON {type(doc).__name__}, not an object: {WHAT_TO_PASS}")
    schema = doc.get("schema")
    if schema == TUNE_SCHEMA or ("rows" in doc and "recommendation" in doc):
        return "tune", _tune_from_document(path, doc)
    if schema == VERIFY_SCHEMA:
        if not isinstance(doc.get("candidates"), list) or not isinstance(doc.get("options"), dict):
            raise UserInputError(f"{path}: a verify result needs \"candidates\" and \"options\"; the file looks damaged")
        return "verify", doc
    if schema == PLAN_SCHEMA:
        raise UserInputError(f"{path} is a `tune --dry-run` plan (no timings): run `attnsel tune` without --dry-run, then report its folder")
    if "backends" in doc and "selected" in doc and "inputs" in doc:
        return "explain", doc
    if isinstance(doc.get("rows"), list) and doc["rows"] and "family" in doc["rows"][0]:
        raise UserInputError(f"{path} is an `explain --gpu all` matrix: report takes one `explain --json` answer (one GPU)")
    raise UserInputError(f"{path} is neither a tune result nor an explain answer: {WHAT_TO_PASS}")


def _load_tune_dir(path: Path) -> TuneData:
    document = path / TUNE_DOCUMENT
    if document.is_file():
        return _tune_from_document(document, _parse_json(document, _read_text(document)))
    results = path / R.RESULTS_FILE
    if results.is_file():
        return _tune_from_rows(results)
    raise UserInputError(f"{path} holds neither {TUNE_DOCUMENT} nor {R.RESULTS_FILE}: {WHAT_TO_PASS}")


def _tune_from_document(path: Path, doc: dict) -> TuneData:
    rows = doc.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "backend" in r for r in rows):
        raise UserInputError(f"{path}: \"rows\" must be a list of result rows (bench/results.py); the file looks damaged")
    if not rows:
        raise UserInputError(f"{path} has no result rows: the sweep timed nothing; rerun `attnsel tune`")
    if not isinstance(doc.get("recommendation"), dict):
        doc = dict(doc, recommendation=_recommend(rows, doc.get("plan") or {}))
    return TuneData(str(path), doc, complete=True)


def _tune_from_rows(path: Path) -> TuneData:
    rows = list(R.latest_by_key(R.read_rows(path)).values())
    if not rows:
        raise UserInputError(f"{path} has no readable result rows: {WHAT_TO_PASS}")
    doc = {"rows": rows, "recommendation": _recommend(rows, {})}
    return TuneData(str(path), doc, complete=False)


def _recommend(rows: list[dict], plan: dict) -> dict:
    """bench/recommend.py over the rows (when tune.json is missing): labels from the rows themselves."""
    labels: dict[str, list[str]] = {}
    for row in rows:
        if row.get("status") != R.STATUS_SKIPPED_BY_VLLM and row.get("kind") and row.get("workload_label"):
            kind_labels = labels.setdefault(row["kind"], [])
            if row["workload_label"] not in kind_labels:
                kind_labels.append(row["workload_label"])
    default = (plan.get("vllm_default") or {})
    vllm_default = (default["backend"], int(default["block_size"])) if default.get("backend") and default.get("block_size") else None
    return REC.recommend(rows, workload_labels=labels, vllm_default=vllm_default).to_dict()
