"""`attnsel report` reads what `tune` and `explain` write, whatever path form the user gives, and
turns bad input into one clear line (exit 2)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from attnsel.bench.sweep import results as R
from attnsel.cli.report_cmd import load_report
from attnsel.errors import UserInputError
from attnsel.reports.tune import load_inputs

FIXTURES = Path(__file__).parent / "fixtures" / "report"
TUNE_DIR = FIXTURES / "h200_llama8b_synthetic"
EXPLAIN = FIXTURES / "explain_llama8b_h200.json"


def _tune_document() -> dict:
    return json.loads((TUNE_DIR / "tune.json").read_text())


@pytest.mark.parametrize("path", [TUNE_DIR, TUNE_DIR / "tune.json", TUNE_DIR / "results.jsonl"])
def test_a_tune_output_is_found_from_its_folder_document_or_rows(path):
    data = load_inputs([path])
    assert data.tune is not None and data.tune.complete
    assert len(data.tune.rows) == len(_tune_document()["rows"])
    assert data.tune.recommendation.to_dict() == _tune_document()["recommendation"]


def test_an_explain_answer_is_found_by_content_not_by_name(tmp_path):
    renamed = tmp_path / "whatever.txt"
    shutil.copy(EXPLAIN, renamed)
    data = load_inputs([renamed, TUNE_DIR])
    assert data.tune is not None
    assert [d["selected"] for d in data.explains] == [json.loads(EXPLAIN.read_text())["selected"]]


def test_a_cut_short_sweep_without_tune_json_still_gets_advice(tmp_path):
    """tune writes results.jsonl row by row and tune.json only at the end (bench/sweep/results.py): a
    killed sweep leaves rows only, and bench makes the advice from them for the report."""
    shutil.copy(TUNE_DIR / R.RESULTS_FILE, tmp_path / R.RESULTS_FILE)
    with open(tmp_path / R.RESULTS_FILE, "a", encoding="utf-8") as fh:
        fh.write('{"key": "FLASHINFER|bs=16|decode b=1 ctx=40')  # torn last line of a killed writer
    read = load_inputs([tmp_path])
    assert read.tune is not None and not read.tune.complete
    assert read.tune.recommendation is None  # reports/ read and render; bench/ recommends
    data = load_report([tmp_path])  # what `attnsel report` renders
    # bench/tune/recommend.py's rule: a config's decode score is the geometric mean of its per-shape medians
    timed = [r for r in R.read_rows(TUNE_DIR / R.RESULTS_FILE) if r["status"] == R.STATUS_OK and r["kind"] == "decode"]
    shapes = {r["workload_label"] for r in timed}
    by_config: dict = {}
    for r in timed:
        by_config.setdefault((r["backend"], r["block_size"]), []).append(r["timing"]["median_ms"])
    scores = {c: math.prod(v) ** (1 / len(v)) for c, v in by_config.items() if len(v) == len(shapes)}
    best = min(scores, key=scores.get)
    decode = data.tune.recommendation.workloads["decode"]
    assert (decode.best.backend, decode.best.block_size) == best
    assert data.tune.recommendation.vllm_default is None  # unknown without the plan


@pytest.mark.parametrize(
    "content, words",
    [
        ("", "is empty"),
        ("{not json", "Invalid JSON"),
        ("[1, 2]", "not an object"),
        ('{"hello": 1}', "neither a tune result nor an explain answer"),
        ('{"schema": "attnsel-tune-plan/1", "configs": []}', "--dry-run"),
        ('{"schema": "attnsel-tune/1", "rows": [], "recommendation": {}}', "no result rows"),
    ],
)
def test_bad_input_is_one_line_that_says_what_to_pass(tmp_path, content, words):
    path = tmp_path / "input.json"
    path.write_text(content)
    with pytest.raises(UserInputError) as err:
        load_inputs([path])
    assert words in err.value.message
    assert "\n" not in err.value.message


def test_a_folder_without_results_and_a_missing_path_are_bad_input(tmp_path):
    with pytest.raises(UserInputError, match=r"neither tune.json nor results.jsonl"):
        load_inputs([tmp_path])
    with pytest.raises(UserInputError, match="does not exist"):
        load_inputs([tmp_path / "nope"])


def test_two_tune_results_in_one_report_are_refused():
    with pytest.raises(UserInputError, match="only one tune result"):
        load_inputs([TUNE_DIR, TUNE_DIR / "tune.json"])
