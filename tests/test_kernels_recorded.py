"""Replays what bench/tools/kernel_check.py measured on an H200 (2026-11-21, flashinfer 0.7.2.post1,
FA4 4.0.0b36, Triton 3.6, torch 2.11): the issue's bars must hold in that evidence, computed
with the same summary the script prints."""

import json
from pathlib import Path

from attnsel.bench.tools.kernel_check import bar_summary

RECORDED = Path(__file__).parent / "fixtures" / "kernels" / "h200_kernel_check.jsonl"


def _rows():
    return [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]


def test_every_timed_kernel_passed_the_fp32_reference_check():
    timed = [r for r in _rows() if r.get("status") in ("ok", "wrong")]
    assert len(timed) >= 20
    assert all(r["correct"] and r["rel_err"] < 1e-2 for r in timed)


def test_attnsel_triton_decode_reaches_080_of_flashinfer_and_the_best_backend_75_percent_of_peak():
    bar = bar_summary(_rows())
    assert bar is not None
    assert bar["ratio"] >= 0.8
    assert bar["best_pct_peak"] >= 75.0


def test_bandwidth_figures_are_bytes_over_time_and_below_the_device_peak():
    start = _rows()[0]
    for r in _rows():
        if r.get("status") == "ok":
            assert 0 < r["tb_per_s"] < start["peak_tb_s"]  # above peak would mean hot L2 or a bytes bug
            assert abs(r["pct_peak"] - 100 * r["tb_per_s"] / start["peak_tb_s"]) < 0.2
