"""A saved sweep read back for `attnsel report` (bench/tune/saved.py): tune.json's recommendation is
rendered as tune made it; a sweep cut short (rows only) gets one made by bench from its rows."""

import json
from pathlib import Path

from attnsel.bench.tune import with_recommendation

SAVED = Path(__file__).parent / "fixtures" / "report" / "h200_llama8b_synthetic" / "tune.json"


def test_a_saved_result_keeps_its_recommendation_and_a_cut_short_one_gets_one_from_its_rows():
    saved = json.loads(SAVED.read_text())
    assert with_recommendation(saved) is saved
    rows_only = {"rows": saved["rows"], "plan": {"vllm_default": {"backend": "FLASH_ATTN", "block_size": 16}}}
    made = with_recommendation(rows_only)["recommendation"]
    assert (made["vllm_default"]["backend"], made["vllm_default"]["block_size"]) == ("FLASH_ATTN", 16)
    best, recorded = made["overall"]["best"], saved["recommendation"]["overall"]["best"]
    assert (best["backend"], best["block_size"]) == (recorded["backend"], recorded["block_size"])
    assert with_recommendation({"rows": saved["rows"]})["recommendation"]["vllm_default"] is None
