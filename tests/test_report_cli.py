"""`attnsel report` on the command line: format from --format or the -o suffix, --json prints only
JSON, bad input exits 2 with one line on stderr and nothing on stdout."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

FIXTURES = Path(__file__).parent / "fixtures" / "report"
TUNE_DIR = FIXTURES / "h200_llama8b_synthetic"


def _run(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def test_default_is_markdown_on_stdout():
    result = _run("report", str(TUNE_DIR))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# attnsel tune report")
    assert result.stderr == ""


def test_json_flag_prints_one_json_document_and_nothing_else():
    result = _run("report", str(TUNE_DIR), "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["tune"]["summary"]["gpu"] == "NVIDIA H200"


@pytest.mark.parametrize("suffix, check", [
    (".html", lambda text: text.startswith("<!DOCTYPE html>")),
    (".csv", lambda text: next(csv.reader(io.StringIO(text)))[:2] == ["backend", "block_size"]),
    (".md", lambda text: text.startswith("# attnsel")),
    (".json", lambda text: "tune" in json.loads(text)),
])
def test_output_format_follows_the_file_suffix(tmp_path, suffix, check):
    out = tmp_path / f"report{suffix}"
    result = _run("report", str(TUNE_DIR), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # the report went to the file; the note went to stderr
    assert f"wrote {out}" in result.stderr
    assert check(out.read_text(encoding="utf-8"))


def test_an_output_folder_that_does_not_exist_is_refused_not_made(tmp_path):
    out = tmp_path / "nested" / "deeper" / "report.md"
    result = _run("report", str(TUNE_DIR), "-o", str(out))
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert not (tmp_path / "nested").exists()


def test_format_flag_wins_over_the_suffix_and_quiet_silences_the_note(tmp_path):
    out = tmp_path / "report.txt"
    result = _run("--quiet", "report", str(TUNE_DIR), "--format", "csv", "-o", str(out))
    assert result.exit_code == 0
    assert result.stderr == ""
    assert out.read_text().startswith("backend,block_size")


@pytest.mark.parametrize("args, words", [
    (["--format", "pdf"], "unknown --format 'pdf'"),
    (["/no/such/results"], "does not exist"),
])
def test_user_errors_exit_2_with_one_line(args, words):
    if args[0].startswith("/"):
        result = _run("report", *args)
    else:
        result = _run("report", str(TUNE_DIR), *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0]


def test_no_color_output_has_no_escape_codes():
    result = _run("report", str(TUNE_DIR), env={"NO_COLOR": "1"})
    assert "\x1b[" not in result.stdout
