"""A pasted serve line and the installed vLLM's own parser (attention/versions/serve_parser.py): where vLLM
is installed and its parser builds (a machine with a GPU vLLM recognises), its verdict stands; elsewhere the
release's flag table decides (tests/test_serve_flags.py). vLLM 0.34.0's parser through that path, recorded by
bench/tools/serve_parser_answers.py (its CPU platform standing in for a GPU):
tests/fixtures/serve_flags/vllm_0_34_parser_answers.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnsel.attention.versions import serve_parser

ANSWERS = Path(__file__).parent / "fixtures" / "serve_flags" / "vllm_0_34_parser_answers.json"


def test_without_a_parser_to_ask_the_answer_is_none_and_the_table_decides(monkeypatch):
    def no_vllm() -> None:
        raise ImportError("No module named 'vllm'")

    monkeypatch.setattr(serve_parser, "_serve_parser", no_vllm)
    assert serve_parser.installed_parser_answer(["vllm", "serve", "m", "--max-model-lenn", "1"]) is None


@pytest.mark.skipif(not ANSWERS.exists(), reason="no recording of vLLM's own parser answers")
def test_the_recorded_parser_answers_are_what_the_table_says_where_the_table_can_tell():
    """vLLM 0.34.0's own parser refused what the flag table refuses (unknown flags), and more (a value of the
    wrong type), and took the abbreviations, aliases and dotted forms the table takes."""
    from attnsel.attention.rules.serve_line import read_serve_line, unrecognized_flags
    from attnsel.attention.versions import get_profile

    recorded = json.loads(ANSWERS.read_text())
    declared = get_profile(recorded["vllm_version"]).serve_flags
    for case in recorded["answers"]:
        line = read_serve_line(case["tokens"], frozenset(), declared)
        table_refuses = bool(unrecognized_flags(line.flags, declared))
        if table_refuses:
            assert case["error"] and "unrecognized arguments" in case["error"], case
        elif case["error"] is not None:
            assert "unrecognized arguments" not in case["error"], case
    assert sum(case["error"] is None for case in recorded["answers"]) >= 5  # what both take is the most of it
