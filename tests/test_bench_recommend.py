"""Recommendation, noise gate and disqualification on recorded result rows
(issue "attnsel tune": fastest valid backend/block size, margin over vLLM's default, above noise?,
a wrong kernel is disqualified and reported, never recommended)."""

import json
import math
from pathlib import Path

import pytest

from attnsel.bench.sweep import results as R
from attnsel.bench.tune import recommend as REC
from attnsel.errors import UserInputError

FIXTURES = Path(__file__).parent / "fixtures" / "tune"


def row(backend, bs, label, median=None, status="ok", spread=0.01, n=100, kind=None):
    kind = kind or label.split()[0]
    r = {"key": R.row_key(backend, bs, label, "bfloat16", "auto", "events-cold"), "backend": backend,
         "block_size": bs, "kernel_block_size": min(bs, 64), "workload_label": label, "kind": kind, "status": status}
    if median is not None and status == "ok":
        r["timing"] = {"n": n, "median_ms": median, "p20_ms": median * (1 - spread), "p80_ms": median * (1 + spread),
                       "min_ms": median * 0.95, "max_ms": median * 1.1, "mean_ms": median}
    if status == "wrong":
        r["error"] = "relative error 0.5 exceeds tolerance 0.02 vs the fp32 reference"
    return r


def recorded():
    data = json.loads((FIXTURES / "recorded_h200_decode.json").read_text())
    rows = [row(d["backend"], d["block_size"], d["label"], d["median_ms"]) for d in data["rows"]]
    return rows, tuple(data["vllm_default"])


def test_recorded_h200_decode_recommends_flashinfer_over_vllms_fa_default():
    rows, default = recorded()
    rec = REC.recommend(rows, workload_labels={"decode": ["decode b=64 ctx=4096"]}, vllm_default=default)
    decode = rec.per_workload["decode"]
    # docs/gpu-facts.md §1: FlashInfer page 64 0.259 ms vs FA page 16 (vLLM's Hopper default, docs/vllm-rules.md §5a/§5f) 0.338 ms
    assert (decode.best.backend, decode.best.block_size) == ("FLASHINFER", 64)
    assert decode.speedup_vs_default == pytest.approx(0.338 / 0.259)
    assert decode.above_noise
    assert decode.flags == "--attention-backend FLASHINFER --block-size 64"
    assert rec.overall.best.config == ("FLASHINFER", 64)
    assert "faster than vLLM's default" in decode.advice()


def test_a_margin_inside_the_noise_is_reported_as_noisy_not_as_a_winner():
    label = "decode b=1 ctx=4096"
    rows = [row("FLASH_ATTN", 16, label, 0.100, spread=0.05), row("FLASHINFER", 16, label, 0.097, spread=0.05)]
    decision = REC.recommend(rows, workload_labels={"decode": [label]}, vllm_default=("FLASH_ATTN", 16)).per_workload["decode"]
    assert decision.best.backend == "FLASHINFER"  # fastest measured is still named
    assert decision.verdict == "noisy" and not decision.above_noise
    assert "within noise" in decision.advice()


def test_fewer_than_ten_samples_is_never_above_noise():
    label = "decode b=1 ctx=4096"
    rows = [row("FLASH_ATTN", 16, label, 0.2, n=5), row("FLASHINFER", 16, label, 0.1, n=5)]
    decision = REC.recommend(rows, workload_labels={"decode": [label]}, vllm_default=("FLASH_ATTN", 16)).per_workload["decode"]
    assert decision.verdict == "noisy"


def test_a_wrong_kernel_is_disqualified_even_when_it_is_the_fastest():
    a, b = "decode b=1 ctx=4096", "decode b=64 ctx=4096"
    rows = [
        row("FLASH_ATTN", 16, a, 0.10), row("FLASH_ATTN", 16, b, 0.30),
        row("TRITON_ATTN", 16, a, status="wrong"), row("TRITON_ATTN", 16, b, 0.01),  # fast but wrong elsewhere
    ]
    rec = REC.recommend(rows, workload_labels={"decode": [a, b]}, vllm_default=("FLASH_ATTN", 16))
    assert rec.per_workload["decode"].best.config == ("FLASH_ATTN", 16)
    assert [d["backend"] for d in rec.disqualified] == ["TRITON_ATTN"]
    assert "relative error" in rec.disqualified[0]["reason"]
    assert all(s.backend != "TRITON_ATTN" for s in rec.per_workload["decode"].ranking)


def test_a_config_that_crashed_on_one_shape_is_incomplete_not_recommended():
    a, b = "decode b=1 ctx=4096", "decode b=256 ctx=16384"
    rows = [row("FLASH_ATTN", 16, a, 0.10), row("FLASH_ATTN", 16, b, 1.0),
            row("FLASHINFER", 16, a, 0.05), row("FLASHINFER", 16, b, status="oom")]
    decision = REC.recommend(rows, workload_labels={"decode": [a, b]}, vllm_default=("FLASH_ATTN", 16)).per_workload["decode"]
    assert decision.best.config == ("FLASH_ATTN", 16)
    assert decision.verdict == "default is fastest"
    assert decision.incomplete == [{"backend": "FLASHINFER", "block_size": 16, "missing": 1, "statuses": ["oom"]}]


def test_workload_score_is_the_geometric_mean_over_shapes():
    a, b = "decode b=1 ctx=4096", "decode b=64 ctx=4096"
    rows = [row("FLASH_ATTN", 16, a, 0.1), row("FLASH_ATTN", 16, b, 1.0),
            row("FLASHINFER", 16, a, 0.2), row("FLASHINFER", 16, b, 0.4)]
    decision = REC.recommend(rows, workload_labels={"decode": [a, b]}, vllm_default=("FLASH_ATTN", 16)).per_workload["decode"]
    # geomean FA = sqrt(0.1 * 1.0) = 0.316, FI = sqrt(0.2 * 0.4) = 0.283: FI wins despite losing shape a
    assert decision.best.backend == "FLASHINFER"
    assert decision.speedup_vs_default == pytest.approx(math.sqrt(0.1) / math.sqrt(0.08))


def _two_workloads():
    d, p = "decode b=64 ctx=4096", "prefill b=1 q=2048 ctx=2048"
    return [row("FLASH_ATTN", 16, d, 0.30), row("FLASH_ATTN", 16, p, 1.0),
            row("FLASHINFER", 16, d, 0.20), row("FLASHINFER", 16, p, 2.0)], {"decode": [d], "prefill": [p]}


def test_overall_winner_follows_the_weights():
    rows, labels = _two_workloads()
    default = ("FLASH_ATTN", 16)
    decode_heavy = REC.recommend(rows, workload_labels=labels, vllm_default=default,
                                 weights=REC.parse_weights("decode=0.7,prefill=0.2,mixed=0.1"))
    # weights renormalise over the kinds that ran: 0.7/0.9 and 0.2/0.9
    expected = math.exp((0.7 * math.log(0.30 / 0.20) + 0.2 * math.log(1.0 / 2.0)) / 0.9)
    assert decode_heavy.overall.best.backend == "FLASHINFER"
    assert decode_heavy.overall.speedup_vs_default == pytest.approx(expected)
    prefill_heavy = REC.recommend(rows, workload_labels=labels, vllm_default=default,
                                  weights=REC.parse_weights("decode=0.1,prefill=0.9"))
    assert prefill_heavy.overall.best.backend == "FLASH_ATTN"
    assert prefill_heavy.overall.verdict == "default is fastest"


def test_default_not_measured_gives_no_margin():
    label = "decode b=1 ctx=4096"
    rows = [row("FLASH_ATTN", 16, label, status="unavailable"), row("FLASHINFER", 16, label, 0.1)]
    decision = REC.recommend(rows, workload_labels={"decode": [label]}, vllm_default=("FLASH_ATTN", 16)).per_workload["decode"]
    assert decision.verdict == "default not measured"
    assert decision.speedup_vs_default is None
    assert decision.best.backend == "FLASHINFER"


def test_bad_weights_are_one_clear_error():
    for text in ("decode=abc", "gpu=1", "decode=-1", "decode=0"):
        with pytest.raises(UserInputError):
            REC.parse_weights(text)


def test_configs_within_noise_of_the_best_are_marked_as_ties():
    rows, default = recorded()
    decision = REC.recommend(rows, workload_labels={"decode": ["decode b=64 ctx=4096"]}, vllm_default=default).per_workload["decode"]
    marks = {(s.backend, s.block_size): s.vs_best for s in decision.ranking}
    # docs/gpu-facts.md §1: FlashInfer page 16 vs 64 differ by 0.8% -- "page size changes nothing measurable"
    assert marks[("FLASHINFER", 64)] == "best"
    assert marks[("FLASHINFER", 16)] == "tie"
    assert marks[("FLASH_ATTN", 64)] == "slower"


def test_a_gain_above_noise_but_below_min_gain_keeps_vllms_default():
    # 3% above a 1% noise band: real, but not worth a flag change by default (5%); --min-gain 2 shows it
    label = "decode b=64 ctx=4096"
    rows = [row("FLASH_ATTN", 16, label, 0.103, spread=0.002), row("FLASH_ATTN", 128, label, 0.100, spread=0.002)]
    default = REC.recommend(rows, workload_labels={"decode": [label]}, vllm_default=("FLASH_ATTN", 16))
    decision = default.per_workload["decode"]
    assert decision.verdict == "small" and not decision.above_noise
    assert "keeping the default is as good" in decision.advice() and "--min-gain" in decision.advice()
    lowered = REC.recommend(rows, workload_labels={"decode": [label]}, vllm_default=("FLASH_ATTN", 16), min_gain=0.02)
    assert lowered.per_workload["decode"].verdict == "faster"
    assert lowered.overall.flags == "--attention-backend FLASH_ATTN --block-size 128"


def test_rows_timed_by_a_stand_in_never_turn_into_flags():
    label = "decode b=1 ctx=4096"
    rows = [dict(row("FLASH_ATTN", 16, label, 0.100), adapter="vllm"),
            dict(row("TRITON_ATTN", 64, label, 0.050), adapter="attnsel-triton")]
    decision = REC.recommend(rows, workload_labels={"decode": [label]}, vllm_default=("FLASH_ATTN", 16)).per_workload["decode"]
    assert decision.best.backend == "TRITON_ATTN" and decision.verdict == "stand-in"
    assert decision.stand_in == "TRITON_ATTN by attnsel-triton"
    assert "keep vLLM's default" in decision.advice()


def test_each_verdict_says_whether_it_advises_flags_and_is_written_as_its_word():
    import json

    from attnsel.bench.tune import Verdict

    for verdict in Verdict:
        # never both; "default not measured" and "no valid config" give no margin to advise on
        assert not (verdict.advises_flags and verdict.keeps_default)
        assert json.dumps({"verdict": verdict}) == json.dumps({"verdict": verdict.value})
        assert f"{verdict}" == verdict.value and Verdict.read(verdict.value) is verdict
    assert [v for v in Verdict if v.advises_flags] == [Verdict.FASTER]
    assert not Verdict.DEFAULT_NOT_MEASURED.keeps_default and not Verdict.NO_VALID_CONFIG.keeps_default
    assert Verdict.read("a word from a newer attnsel") is None
