"""tune.json and verify.json as typed records: read back and written again, a saved result is the
same file byte for byte (fields of newer versions kept in place), its verdicts are enum members,
and `attnsel report` refuses a field of the wrong type wherever a record describes one."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from attnsel.bench.tune import TuneDocument, Verdict
from attnsel.bench.verify import EngineVerdict, VerifyDocument
from attnsel.errors import UserInputError
from attnsel.reports.tune.input_checks import check_tune_document, check_verify_document

FIXTURES = Path(__file__).parent / "fixtures"
TUNE_FILES = sorted(FIXTURES.glob("**/tune.json"))
VERIFY_FILES = sorted(FIXTURES.glob("verify/**/verify.json"))


def _as_written(document: dict) -> str:
    return json.dumps(document, indent=2, default=str) + "\n"  # as bench/tune/document.py writes tune.json


@pytest.mark.parametrize("path", TUNE_FILES, ids=[str(p.relative_to(FIXTURES)) for p in TUNE_FILES])
def test_a_saved_tune_result_reads_back_and_writes_the_same_bytes(path):
    saved = json.loads(path.read_text())
    assert _as_written(TuneDocument.from_dict(saved).to_dict()) == _as_written(saved)


@pytest.mark.parametrize("path", VERIFY_FILES, ids=[str(p.relative_to(FIXTURES)) for p in VERIFY_FILES])
def test_a_saved_verify_result_reads_back_and_writes_the_same_bytes(path):
    saved = json.loads(path.read_text())
    record = VerifyDocument.from_dict(saved)
    assert _as_written(record.to_dict()) == _as_written(saved)
    assert isinstance(record.verdict.verdict, EngineVerdict)


def test_verdicts_read_as_members_and_unknown_fields_keep_their_place():
    saved = json.loads((FIXTURES / "tune" / "h100_vllm024" / "standin" / "tune.json").read_text())
    overall = saved["recommendation"]["overall"]
    newer = {"from_a_newer_attnsel": [1, 2], **overall, "verdict": "a newer word"}
    saved["recommendation"]["overall"] = newer
    record = TuneDocument.from_dict(saved)
    assert record.recommendation.workloads["decode"].verdict is Verdict.STAND_IN
    assert record.recommendation.overall.verdict == "a newer word"  # kept as written, not refused
    assert list(record.to_dict()["recommendation"]["overall"]) == list(newer)
    assert "stand_in" not in TuneDocument.from_dict({"rows": []}).to_dict()  # absent stays absent


@pytest.mark.parametrize("damage, where", [
    (lambda d: d["recommendation"]["overall"]["ranking"][0].update(block_size="x"),
     "recommendation.overall.ranking[0].block_size must be a positive whole number"),
    (lambda d: d["recommendation"]["overall"].update(advised_flags=["--block-size", "64"]),
     "recommendation.overall.advised_flags must be a string"),
    (lambda d: d["recommendation"]["workloads"]["decode"].update(verdict=7),
     "recommendation.workloads.decode.verdict must be a string"),
])
def test_report_refuses_a_damaged_field_the_records_describe(damage, where):
    saved = json.loads((FIXTURES / "report" / "h200_llama8b_synthetic" / "tune.json").read_text())
    check_tune_document(saved, "tune.json")
    damaged = copy.deepcopy(saved)
    damage(damaged)
    with pytest.raises(UserInputError, match=where.replace("[", r"\[").replace("]", r"\]")):
        check_tune_document(damaged, "tune.json")


def test_report_refuses_a_verify_result_without_its_options():
    saved = json.loads(VERIFY_FILES[0].read_text())
    check_verify_document(saved, "verify.json")
    saved.pop("options")
    with pytest.raises(UserInputError, match="options is missing"):
        check_verify_document(saved, "verify.json")
