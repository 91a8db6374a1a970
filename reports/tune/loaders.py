"""Read what `attnsel report` renders: a tune output (folder, tune.json or results.jsonl, as
bench/tune/document.py and bench/sweep/results.py write them) and `attnsel explain --json` answers. The kind of
each input is found from its content, not its name. Bad input -> UserInputError, one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnsel import files
from attnsel.bench.sweep import results as R
from attnsel.bench.tune import (
    Environment,
    PlanRecord,
    RecommendationRecord,
    ResultRow,
    TuneDocument,
)
from attnsel.errors import UserInputError
from attnsel.reports.tune.input_checks import (
    check_explain_document,
    check_rows,
    check_tune_document,
    check_verify_document,
)

TUNE_SCHEMA = "attnsel-tune/1"  # bench/tune/document.py DOCUMENT_SCHEMA
PLAN_SCHEMA = "attnsel-tune-plan/1"
VERIFY_SCHEMA = "attnsel-verify/1"  # bench/verify/run.py SCHEMA
TUNE_DOCUMENT = "tune.json"
VERIFY_DOCUMENT = "verify.json"  # bench/verify/run.py DOCUMENT_FILE
INPUT_LIMIT = 512 * 2**20  # a full tune sweep writes a few MiB; far larger is no result of ours
WHAT_TO_PASS = ("pass the folder `attnsel tune --output` wrote (or its tune.json / results.jsonl), an `attnsel verify` "
                "verify.json, or an `attnsel explain --json` file")


@dataclass
class TuneData:
    source: str
    # tune.json; for a bare results.jsonl only "rows". A missing recommendation is made by bench
    # (bench/tune/saved.py with_recommendation, called by `attnsel report`): reports only render.
    document: dict
    complete: bool  # False: tune.json missing (the sweep was cut short)
    _read: tuple[dict, TuneDocument] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def record(self) -> TuneDocument:
        """The document as typed records (bench/tune/records.py), read once per document."""
        if self._read is None or self._read[0] is not self.document:
            self._read = (self.document, TuneDocument.from_dict(self.document))
        return self._read[1]

    @property
    def rows(self) -> list[ResultRow]:
        return self.record.rows or []

    @property
    def recommendation(self) -> RecommendationRecord | None:
        return self.record.recommendation

    @property
    def plan(self) -> PlanRecord:
        return self.record.plan or PlanRecord()

    @property
    def environment(self) -> Environment:
        return self.record.environment or Environment()

    @property
    def note(self) -> str | None:
        return self.record.note


@dataclass
class ReportData:
    tune: TuneData | None = None
    explains: list[dict] = field(default_factory=list)  # explain --json documents
    sources: list[str] = field(default_factory=list)
    verify: dict | None = None  # verify.json (attnsel verify / tune --verify)


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


def refuse_to_overwrite(output: Path, paths: Sequence[str | Path]) -> None:
    """`report RUN/tune.json -o RUN/tune.json` would replace the run with its report: refuse an -o
    that is any file report reads (an input, the files of an input folder, a hard link or a
    symlink to one of them)."""
    for raw in paths:
        path = Path(raw).expanduser()
        read = [path]
        if path.is_dir():
            read = [path / name for name in (TUNE_DOCUMENT, R.RESULTS_FILE, VERIFY_DOCUMENT)]
        elif path.suffix == ".jsonl":  # a results.jsonl brings its folder's tune.json
            read.append(path.parent / TUNE_DOCUMENT)
        for source in read:
            if files.same_file(output, source):
                raise UserInputError(f"-o {str(output)[:200]} is {str(source)[:200]}, which report reads: "
                                     "writing it would destroy the input; choose another -o path")


def _add_verify(data: ReportData, path: Path) -> None:
    """A run folder's verify.json, rendered with its tune result."""
    if path.is_file():
        kind, doc = _classify(path, _parse_json(path, _read_text(path)))
        if kind == "verify":
            _set_verify(data, doc, path)


def _set_verify(data: ReportData, doc: dict, source: object) -> None:
    if data.verify is not None:
        raise UserInputError(f"{source}: only one verify result per report")
    data.verify = doc


def load_one(raw: str | Path) -> tuple[str, Any]:
    path = Path(raw).expanduser()
    info = files.path_info(str(raw), "report input")
    if info.kind == "dir":
        if not (path / TUNE_DOCUMENT).is_file() and not (path / R.RESULTS_FILE).is_file() and (path / VERIFY_DOCUMENT).is_file():
            return _classify(path / VERIFY_DOCUMENT, _parse_json(path / VERIFY_DOCUMENT, _read_text(path / VERIFY_DOCUMENT)))
        return "tune", _load_tune_dir(path)
    if info.kind == "missing":
        raise UserInputError(f"{path} does not exist: {WHAT_TO_PASS}")
    text = _read_text(path)
    if not text.strip():
        raise UserInputError(f"{path} is empty: {WHAT_TO_PASS}")
    if path.suffix == ".jsonl" or _looks_like_jsonl(text):
        sibling = path.parent / TUNE_DOCUMENT
        if info.kind == "file" and files.path_info(str(sibling)).kind == "file":
            return "tune", _tune_from_document(sibling, _parse_json(sibling, _read_text(sibling)))
        return "tune", _tune_from_rows(path, text)
    return _classify(path, _parse_json(path, text))


def _read_text(path: Path) -> str:
    # bounded: a pipe or FIFO is read with a time limit, a device is refused (files.py)
    return files.read_input(str(path), what="a tune result or an explain answer", limit=INPUT_LIMIT,
                            flag="report input")


def _looks_like_jsonl(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) > 1 and all(line.lstrip().startswith("{") and line.rstrip().endswith("}") for line in lines[:-1])


def _parse_json(path: Path, text: str) -> Any:
    return files.parse_json(text, str(path), "a tune result or an explain answer")


def _finite_only(path: Path, doc: Any, what: str) -> Any:
    """RFC 8259 has no NaN or Infinity (Python's json reads and writes them): a field the checks
    above do not type that holds one is refused too, by its path."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise UserInputError(f"{path}: {where or 'the document'} holds {value!r}, which is no JSON number "
                                 f"(RFC 8259): it must be a finite number; {what} looks damaged")
        if isinstance(value, dict):
            stack += [(f"{where}.{k}" if where else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    return doc


def _classify(path: Path, doc: Any) -> tuple[str, Any]:
    if not isinstance(doc, dict):
        raise UserInputError(f"{path} holds a JSON {type(doc).__name__}, not an object: {WHAT_TO_PASS}")
    schema = doc.get("schema")
    if schema == TUNE_SCHEMA or ("rows" in doc and "recommendation" in doc):
        return "tune", _tune_from_document(path, doc)
    if schema == VERIFY_SCHEMA:
        check_verify_document(doc, str(path))
        return "verify", _finite_only(path, doc, "the verify result")
    if schema == PLAN_SCHEMA:
        raise UserInputError(f"{path} is a `tune --dry-run` plan (no timings): run `attnsel tune` without --dry-run, then report its folder")
    if "backends" in doc and "selected" in doc and "inputs" in doc:
        check_explain_document(doc, str(path))
        return "explain", _finite_only(path, doc, "the explain answer")
    if isinstance(doc.get("rows"), list) and doc["rows"] and "family" in doc["rows"][0]:
        raise UserInputError(f"{path} is an `explain --gpu all` matrix: report takes one `explain --json` answer (one GPU)")
    raise UserInputError(f"{path} is neither a tune result nor an explain answer: {WHAT_TO_PASS}")


def _load_tune_dir(path: Path) -> TuneData:
    document = path / TUNE_DOCUMENT
    if document.is_file():
        return _tune_from_document(document, _parse_json(document, _read_text(document)))
    results = path / R.RESULTS_FILE
    if results.is_file():
        return _tune_from_rows(results, _read_text(results))
    raise UserInputError(f"{path} holds neither {TUNE_DOCUMENT} nor {R.RESULTS_FILE}: {WHAT_TO_PASS}")


def _tune_from_document(path: Path, doc: dict) -> TuneData:
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise UserInputError(f"{path}: \"rows\" must be a list of result rows (bench/sweep/results.py); the file looks damaged")
    check_tune_document(doc, str(path))  # each row's fields, named (rows[3].block_size ...)
    if not rows:
        raise UserInputError(f"{path} has no result rows: the sweep timed nothing; rerun `attnsel tune`")
    _check_advice_was_measured(path, _finite_only(path, doc, "the tune result"))
    return TuneData(str(path), doc, complete=True)


def _check_advice_was_measured(path: Path, doc: dict) -> None:
    """A recommendation that names a fastest pair comes from timed rows: one without any is damage."""
    recommendation = doc["recommendation"] if isinstance(doc.get("recommendation"), dict) else {}
    workloads = recommendation["workloads"] if isinstance(recommendation.get("workloads"), dict) else {}
    advised = [d["best"] for d in (recommendation.get("overall"), *workloads.values())
               if isinstance(d, dict) and d.get("best")]
    if advised and not any(isinstance(row, dict) and row.get("status") == R.STATUS_OK for row in doc["rows"]):
        best = advised[0] if isinstance(advised[0], dict) else {}
        raise UserInputError(f"{path}: the recommendation names {best.get('backend')} --block-size {best.get('block_size')} "
                             "but no row was timed: the tune result looks damaged (hand-edited, or from another tool?)")


def _tune_from_rows(path: Path, text: str) -> TuneData:
    read = list(R.rows_from_lines(text.splitlines()))
    check_rows(read, str(path))
    _finite_only(path, read, "the results file")
    rows = list(R.latest_by_key(read).values())
    if not rows:
        raise UserInputError(f"{path} has no readable result rows: {WHAT_TO_PASS}")
    return TuneData(str(path), {"rows": rows}, complete=False)

