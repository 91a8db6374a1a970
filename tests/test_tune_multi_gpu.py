"""`attnsel tune --gpus`: one lane of workers per GPU, rows comparable across GPUs or not mixed.

Real worker processes with fake adapters (tests/fixtures/tune/fake_toolkit.py): each worker sees
only its lane's GPU through CUDA_VISIBLE_DEVICES, and a scenario can make one GPU slower, the way
a throttled or shared card would be."""

import json
from pathlib import Path

import pytest

from attnsel.bench.plan import build as P
from attnsel.bench.plan import make_shape
from attnsel.bench.sweep import SweepOptions, run_sweep
from attnsel.bench.sweep import multi_gpu as M
from attnsel.bench.sweep import results as R
from attnsel.bench.tune import recommend as REC
from attnsel.errors import UserInputError

FAKE = f"{Path(__file__).parent / 'fixtures' / 'tune' / 'fake_toolkit.py'}:FakeToolkit"
BACKENDS = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
SCENARIO = {"FLASH_ATTN": {"*": "ok:0.30"}, "FLASHINFER": {"*": "ok:0.20"}, "TRITON_ATTN": {"*": "ok:0.25"},
            "FLEX_ATTENTION": {"*": "ok:0.9"}}


def _plan():
    shape = make_shape(128, 32, 8, "bf16")
    plan = P.build_plan(shape, (9, 0), backends=BACKENDS, block_sizes=[16, 32], kinds=["decode"], grid="quick",
                        block_sizes_given=True)
    return plan


def _sweep(tmp_path, monkeypatch, scenario, gpus):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    options = SweepOptions(toolkit=FAKE, item_timeout_s=20, startup_timeout_s=30, gpus=gpus)
    facts: dict = {}
    rows, _ = run_sweep(_plan(), options, tmp_path, facts=facts)
    return [r for r in rows if r["status"] != R.STATUS_SKIPPED_BY_VLLM], facts


def _decision(rows):
    labels = {"decode": sorted({r["workload_label"] for r in rows})}
    return REC.recommend(rows, workload_labels=labels, vllm_default=("FLASH_ATTN", 16)).per_workload["decode"]


def test_two_gpus_split_the_grid_and_recommend_what_one_gpu_does(tmp_path, monkeypatch):
    one, _ = _sweep(tmp_path / "one", monkeypatch, SCENARIO, None)
    two, facts = _sweep(tmp_path / "two", monkeypatch, SCENARIO, ["0", "1"])
    assert sorted(r["key"] for r in two) == sorted(r["key"] for r in one)  # every row once
    assert {r["status"] for r in two} == {R.STATUS_OK}
    assert {r["gpu"] for r in two} == {"0", "1"}  # each row says which GPU timed it
    by_config = {}
    for r in two:
        by_config.setdefault((r["backend"], r["block_size"]), set()).add(r["gpu"])
    assert all(len(g) == 1 for g in by_config.values())  # a (backend, block size)'s rows share one lane
    assert facts["calibration"]["agree"] and sorted(facts["lanes"]) == ["0", "1"]
    assert _decision(two).best.config == _decision(one).best.config == ("FLASHINFER", 16)
    assert (tmp_path / "two" / "worker-FLASHINFER-gpu0.log").exists() or \
        (tmp_path / "two" / "worker-FLASHINFER-gpu1.log").exists()


def test_gpus_that_time_the_same_row_differently_are_not_mixed(tmp_path, monkeypatch):
    scenario = dict(SCENARIO, gpu_scale={"1": 1.5})  # GPU 1 is 50% slower: a throttled card
    rows, facts = _sweep(tmp_path, monkeypatch, scenario, ["0", "1"])
    calibration = facts["calibration"]
    assert not calibration["agree"]
    assert "GPU 1 vs GPU 0" in calibration["comparisons"][0] and "slower" in calibration["comparisons"][0]
    assert {r["gpu"] for r in rows} == {"0"} and {r["status"] for r in rows} == {R.STATUS_OK}


def _sweep_outcomes(tmp_path, monkeypatch, scenario, gpus):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    options = SweepOptions(toolkit=FAKE, item_timeout_s=20, startup_timeout_s=30, gpus=gpus)
    facts, outcomes = {}, {}
    rows, _ = run_sweep(_plan(), options, tmp_path, facts=facts, outcomes=outcomes)
    return rows, facts, outcomes


def test_each_lane_s_first_worker_imports_while_the_gpus_are_calibrated(tmp_path, monkeypatch):
    # on 2 x H200 each lane's first worker start (~16 s) came after the calibration (docs/tune-performance.md)
    rows, facts, outcomes = _sweep_outcomes(tmp_path, monkeypatch, SCENARIO, ["0", "1"])
    assert facts["calibration"]["agree"] and {r["gpu"] for r in rows if r["status"] == R.STATUS_OK} == {"0", "1"}
    for gpu, backends in facts["lanes"].items():
        first = outcomes[backends[0]].workers[0]
        assert first["prespawned"] and first["spawned_at"] < first["go_at"], (gpu, first)


def test_gpus_that_disagree_run_on_the_first_gpu_with_no_worker_left_behind(tmp_path, monkeypatch):
    from attnsel.bench.sweep import worker_process

    scenario = dict(SCENARIO, gpu_scale={"1": 1.5})
    rows, facts, _outcomes = _sweep_outcomes(tmp_path, monkeypatch, scenario, ["0", "1"])
    assert not facts["calibration"]["agree"] and list(facts["lanes"]) == ["0"]
    assert {r["gpu"] for r in rows if r["status"] == R.STATUS_OK} == {"0"}
    alive = [w for w in list(worker_process._LIVE_WORKERS) if w.proc.poll() is None]
    assert not alive, alive


def test_gpus_flag_parsing_and_one_model_rule():
    assert M.parse_gpus("0,1", 4) == ["0", "1"]
    for bad in ("0,0", "x", "5", ""):
        with pytest.raises(UserInputError):
            M.parse_gpus(bad, 4)
    mixed = [{"ordinal": "0", "name": "NVIDIA H100 80GB HBM3", "capability": [9, 0]},
             {"ordinal": "1", "name": "NVIDIA A100-SXM4-80GB", "capability": [8, 0]}]
    assert "one GPU model" in M.same_model_reason(mixed)
    assert M.same_model_reason(mixed[:1]) is None


def test_cli_refuses_gpus_of_different_models(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from attnsel.cli.app import app

    scenario = Path(__file__).parent / "fixtures" / "probe" / "mixed_3090x2_1080tix3.json"
    result = CliRunner().invoke(app, ["tune", "--head-size", "128", "--gpus", "all", "--output", str(tmp_path / "o")],
                                env={"ATTNSEL_NVML_SCENARIO": str(scenario), "ATTNSEL_TUNE_TOOLKIT": FAKE})
    assert result.exit_code == 2, result.output
    assert "one GPU model" in result.output
