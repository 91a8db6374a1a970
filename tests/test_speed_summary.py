"""The speed table `bash bench/tools/gpu_session.sh speed OUT` prints (bench/tools/speed_summary.py), from
the files a run leaves: recorded tune and verify results (tests/fixtures/tune, tests/fixtures/verify)."""

import json
import shutil
from pathlib import Path

from attnsel.bench.tools.speed_summary import summary

FIXTURES = Path(__file__).parent / "fixtures"


def _run(tmp_path, steps):
    shutil.copytree(FIXTURES / "tune" / "h100_vllm024" / "cold", tmp_path / "tune_cold")
    (tmp_path / "verify").mkdir()
    shutil.copy(FIXTURES / "verify" / "h100_llama8b" / "verify.json", tmp_path / "verify" / "verify.json")
    (tmp_path / "probe.txt").write_text(json.dumps({"subprocess": {"median_s": 0.18, "min_s": 0.15, "max_s": 0.3,
                                                                   "torch_imported": False}}))
    (tmp_path / "steps.txt").write_text("".join(f"{name} {code} {seconds}\n" for name, code, seconds in steps))
    return summary(tmp_path).splitlines()


def _row(lines, start):
    return next(line for line in lines if line.startswith(f"| {start}"))


def test_each_step_shows_its_figure_against_the_target_and_where_the_time_went(tmp_path):
    lines = _run(tmp_path, [("tune_cold", 0, 181.9), ("tune_warm", 0, 38.5), ("probe", 0, 6.0), ("verify", 124, 230.4)])
    cold = _row(lines, "`tune --head-size")
    assert "| 181.9 s | < 120 s | 0 |" in cold and "FLASHINFER 57.9 (startup 42.5" in cold
    assert "| 38.5 s | < 40 s (met) |" in _row(lines, "the same, warm")
    assert "| 0.18 s | < 0.2 s (met) |" in _row(lines, "`probe")
    verify = _row(lines, "`verify`")
    assert "> 230 s (timed out)" in verify and "(met)" not in verify
    assert "import 26, llm_init 155, torch_compile 23, graph_capture 5" in verify


def test_steps_after_a_failure_are_marked_not_run(tmp_path):
    lines = _run(tmp_path, [("tune_cold", 1, 12.0)])
    assert "| 12.0 s | < 120 s | 1 |" in _row(lines, "`tune --head-size")
    assert all("not run" in _row(lines, start) for start in ("the same, warm", "`probe", "`verify`"))
