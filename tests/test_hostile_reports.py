"""Bad-input corpus, part 4: `attnsel report` never destroys its inputs and refuses damaged
results with one line (exit 2) whether the recommendation is in the file or made again from the
rows (a results.jsonl of a sweep cut short, a tune.json without one)."""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest
from hostile import FIXTURES, assert_promise, invoke

RUN = FIXTURES / "report" / "h200_llama8b_synthetic"
TUNE_DOC = json.loads((RUN / "tune.json").read_text())
TIMED = next(i for i, row in enumerate(TUNE_DOC["rows"]) if row.get("timing"))


def _timed(**changes):
    return lambda doc: doc["rows"][TIMED].update(changes)


def _timing(**changes):
    return lambda doc: doc["rows"][TIMED]["timing"].update(changes)


# (id, how to damage the tune result, fragment of the one stderr line)
DAMAGED_RESULTS = [
    ("median-zero", _timing(median_ms=0), "timing.median_ms must be a finite number above 0"),
    ("median-negative", _timing(median_ms=-1.5), "timing.median_ms must be a finite number above 0"),
    ("median-null", _timing(median_ms=None), "timing.median_ms is missing"),
    ("p20-negative", _timing(p20_ms=-1.0), "timing.p20_ms must be a finite number above 0"),
    ("timing-null-on-an-ok-row", _timed(timing=None), "timing is missing"),
    ("timing-absent-on-an-ok-row", lambda doc: doc["rows"][TIMED].pop("timing"), "timing is missing"),
    ("status-unknown", _timed(status="weird"), "status must be one of ok, skipped"),
    ("status-number", _timed(status=3), "status must be one of ok, skipped"),
]


def _write_damaged(tmp_path, case_id, damage, keep_recommendation: bool):
    doc = copy.deepcopy(TUNE_DOC)
    damage(doc)
    if not keep_recommendation:
        doc.pop("recommendation", None)
    folder = tmp_path / case_id
    folder.mkdir()
    (folder / "tune.json").write_text(json.dumps(doc))
    (folder / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in doc["rows"]))
    return folder


@pytest.mark.parametrize("case_id,damage,fragment", DAMAGED_RESULTS, ids=[c[0] for c in DAMAGED_RESULTS])
def test_damaged_results_are_one_line_exit_2(tmp_path, case_id, damage, fragment):
    with_rec = _write_damaged(tmp_path, f"{case_id}-kept", damage, keep_recommendation=True)
    without = _write_damaged(tmp_path, f"{case_id}-made-again", damage, keep_recommendation=False)
    for target in (with_rec / "tune.json", without / "tune.json", without / "results.jsonl"):
        if target.name == "results.jsonl":
            (target.parent / "tune.json").unlink(missing_ok=True)  # the sweep cut short: rows only
        for fmt in ("md", "json"):
            result, elapsed = invoke(["report", str(target), "--format", fmt])
            assert_promise(result, elapsed, 2, fragment)


def test_a_tune_json_that_is_a_list_is_refused(tmp_path):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(TUNE_DOC["rows"]))
    result, elapsed = invoke(["report", str(path)])
    assert_promise(result, elapsed, 2, "holds a JSON list, not an object")


def _overwrite_cases(run):
    os.link(run / "tune.json", run.parent / "hard-link.json")
    os.symlink(run / "tune.json", run.parent / "symlink.json")
    return [  # (input, -o)
        (run / "tune.json", run / "tune.json"),
        (run / "results.jsonl", run / "results.jsonl"),
        (run / "results.jsonl", run / "tune.json"),  # a results.jsonl is read with its folder's tune.json
        (run, run / "tune.json"),
        (run, run / "results.jsonl"),
        (run / "tune.json", run.parent / "hard-link.json"),
        (run / "tune.json", run.parent / "symlink.json"),
        (run.parent / "symlink.json", run / "tune.json"),
    ]


def test_report_refuses_to_write_over_any_of_its_inputs(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for source, output in _overwrite_cases(run):
        result, elapsed = invoke(["report", str(source), "-o", str(output)])
        assert_promise(result, elapsed, 2, "which report reads: writing it would destroy the input")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    result, elapsed = invoke(["report", str(run), "-o", str(run / "report.md"), "-q"])  # beside the inputs: fine
    assert_promise(result, elapsed, 0)
    assert (run / "report.md").read_text().startswith("#")


def test_an_output_under_a_file_names_the_file_that_is_not_a_folder(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for output in (a_file / "r.md", a_file / "deeper" / "r.md"):
        result, elapsed = invoke(["report", str(RUN), "-o", str(output)])
        assert_promise(result, elapsed, 2, f"{a_file} is not a folder")
