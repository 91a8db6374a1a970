"""A saved sweep read back for `attnsel report` (bench/tune/saved.py): tune.json's recommendation is
rendered as tune made it, read with today's rules (a stand-in margin advises no flags); a sweep cut
short (rows only) gets one made by bench from its rows."""

import json
from pathlib import Path

import pytest

from attnsel.bench.tune import advised_flags, with_recommendation

FIXTURES = Path(__file__).parent / "fixtures"
SAVED = FIXTURES / "report" / "h200_llama8b_synthetic" / "tune.json"


def test_a_saved_result_keeps_its_recommendation_and_a_cut_short_one_gets_one_from_its_rows():
    saved = json.loads((FIXTURES / "verify" / "h100_llama8b" / "tune.json").read_text())
    assert with_recommendation(saved) is saved  # vLLM's own kernels: nothing to take back
    saved = json.loads(SAVED.read_text())
    rows_only = {"rows": saved["rows"], "plan": {"vllm_default": {"backend": "FLASH_ATTN", "block_size": 16}}}
    made = with_recommendation(rows_only)["recommendation"]
    assert (made["vllm_default"]["backend"], made["vllm_default"]["block_size"]) == ("FLASH_ATTN", 16)
    best, recorded = made["overall"]["best"], saved["recommendation"]["overall"]["best"]
    assert (best["backend"], best["block_size"]) == (recorded["backend"], recorded["block_size"])
    assert with_recommendation({"rows": saved["rows"]})["recommendation"]["vllm_default"] is None


# (saved run, scope, the flags the file advised). The H200 runs timed FA4 and FlashInfer's own
# wrapper as stand-ins for vLLM's kernels and advised flags from them; today's rules advise none.
STAND_IN_RUNS = [
    ("tune/h200_llama8b_default", "overall", "--attention-backend FLASHINFER --block-size 64"),
    ("tune/h200_llama8b_default", "decode", "--attention-backend TRITON_ATTN --block-size 256"),
    ("tune/h200_llama8b_default", "prefill", "--attention-backend FLASH_ATTN --block-size 128"),
    ("report/h200_llama8b_synthetic", "overall", "--attention-backend FLASH_ATTN --block-size 64"),
    ("report/h200_llama8b_synthetic", "decode", "--attention-backend FLASHINFER --block-size 256"),
]


def _scope(recommendation: dict, scope: str) -> dict:
    return recommendation["overall"] if scope == "overall" else recommendation["workloads"][scope]


@pytest.mark.parametrize("run,scope,said", STAND_IN_RUNS)
def test_a_saved_stand_in_margin_never_advises_flags_today(run, scope, said):
    saved = json.loads((FIXTURES / run / "tune.json").read_text())
    assert advised_flags(_scope(saved["recommendation"], scope)) == said
    today = _scope(with_recommendation(saved)["recommendation"], scope)
    assert today["verdict"] == "stand-in" and advised_flags(today) is None
    assert "stood in for vLLM's own kernel: keep vLLM's default" in today["advice"]
