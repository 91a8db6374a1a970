"""Worker isolation (issue "attnsel tune", Isolation): a backend that raises, runs out of memory,
hangs or aborts costs one row, never the sweep. Real child processes, fake adapters."""

import json
from pathlib import Path

import pytest

from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.sweep import SweepOptions, probe_device
from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.groups import run_backend_group
from attnsel.errors import EnvironmentProblem

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
FAKE = f"{FIXTURES / 'fake_toolkit.py'}:FakeToolkit"
BROKEN = f"{FIXTURES / 'fake_toolkit.py'}:BrokenToolkit"
SHAPE = {"head_size": 128, "num_q_heads": 32, "num_kv_heads": 8, "dtype": "bfloat16", "kv_cache_dtype": "auto"}


DECODE = WorkloadSpec("decode", 4, 1024)


def _items(block_sizes, workload=DECODE):
    return [
        {"key": f"FAKE|bs={bs}", "block_size": bs, "kernel_block_size": bs, "workload": workload.to_dict(), "check": True}
        for bs in block_sizes
    ]


def _run(tmp_path, monkeypatch, scenario, block_sizes, **opts):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASHINFER": scenario}))
    options = SweepOptions(toolkit=opts.pop("toolkit", FAKE), item_timeout_s=opts.pop("item_timeout_s", 3.0),
                           startup_timeout_s=20.0, **opts)
    seen = []
    outcome = run_backend_group("FLASHINFER", _items(block_sizes), SHAPE, options, tmp_path / "worker.log", on_row=seen.append)
    return outcome, {row["block_size"]: row for row in seen}


def test_hang_raise_abort_and_wrong_each_cost_one_row_and_the_rest_still_runs(tmp_path, monkeypatch):
    scenario = {"16": "ok:0.2", "32": "wrong", "64": "hang", "128": "abort", "256": "raise", "512": "ok:0.3"}
    outcome, rows = _run(tmp_path, monkeypatch, scenario, [16, 32, 64, 128, 256, 512])

    assert {bs: r["status"] for bs, r in rows.items()} == {
        16: R.STATUS_OK, 32: R.STATUS_WRONG, 64: R.STATUS_TIMEOUT, 128: R.STATUS_CRASHED,
        256: R.STATUS_ERROR, 512: R.STATUS_OK,
    }
    assert "SIGABRT" in rows[128]["error"]
    assert "illegal memory access" in rows[256]["error"]
    assert "killed" in rows[64]["error"]
    assert rows[512]["timing"]["median_ms"] == pytest.approx(0.3, rel=0.01)
    assert outcome.restarts == 2  # one fresh worker after the hang, one after the abort


def test_out_of_memory_is_its_own_status(tmp_path, monkeypatch):
    _, rows = _run(tmp_path, monkeypatch, {"16": "oom", "32": "ok:0.1"}, [16, 32])
    assert rows[16]["status"] == R.STATUS_OOM
    assert "out of memory" in rows[16]["error"]
    assert rows[32]["status"] == R.STATUS_OK


def test_missing_library_marks_rows_unavailable_with_the_import_error(tmp_path, monkeypatch):
    _, rows = _run(tmp_path, monkeypatch, {"*": "unavailable"}, [16, 32])
    assert {r["status"] for r in rows.values()} == {R.STATUS_UNAVAILABLE}
    assert "fakelib" in rows[16]["error"]


def test_a_worker_that_cannot_start_fails_every_row_with_the_reason(tmp_path, monkeypatch):
    _, rows = _run(tmp_path, monkeypatch, {}, [16, 32], toolkit=BROKEN)
    assert {r["status"] for r in rows.values()} == {R.STATUS_ERROR}
    assert "CUDA is not available" in rows[32]["error"]


def test_repeated_crashes_stop_after_max_restarts(tmp_path, monkeypatch):
    _outcome, rows = _run(tmp_path, monkeypatch, {"*": "abort"}, [16, 32, 64, 128], max_restarts=1)
    statuses = [rows[bs]["status"] for bs in (16, 32, 64, 128)]
    assert statuses == [R.STATUS_CRASHED] * 4
    assert "SIGABRT" in rows[32]["error"]
    assert rows[64]["error"].startswith("not run")
    assert len(rows) == 4


def test_probe_reports_device_info_or_an_environment_problem(tmp_path):
    info = probe_device(FAKE, timeout_s=20, log_path=tmp_path / "p.log")
    assert info["name"] == "Fake GPU"
    with pytest.raises(EnvironmentProblem, match="CUDA is not available"):
        probe_device(BROKEN, timeout_s=20, log_path=tmp_path / "p.log")


def _multi_shape_items(block_sizes, shapes):
    return [
        {"key": f"FAKE|bs={bs}|{w.label()}", "block_size": bs, "kernel_block_size": bs, "workload": w.to_dict(),
         "check": False}
        for bs in block_sizes for w in shapes
    ]


def test_a_config_that_hangs_is_not_retried_on_its_other_shapes(tmp_path, monkeypatch):
    shapes = [WorkloadSpec("decode", b, 1024) for b in (1, 16, 64)]
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASHINFER": {"16": "hang", "32": "ok:0.1"}}))
    options = SweepOptions(toolkit=FAKE, item_timeout_s=2.0, startup_timeout_s=20.0)
    rows = []
    run_backend_group("FLASHINFER", _multi_shape_items([16, 32], shapes), SHAPE, options, tmp_path / "w.log",
                      on_row=rows.append)
    hung = [r for r in rows if r["block_size"] == 16]
    assert [r["status"] for r in hung] == [R.STATUS_TIMEOUT] * 3
    assert sum("not run" in r["error"] for r in hung) == 2  # one real 2 s timeout, not three
    assert [r["status"] for r in rows if r["block_size"] == 32] == [R.STATUS_OK] * 3


def test_a_config_that_crashes_twice_is_given_up(tmp_path, monkeypatch):
    shapes = [WorkloadSpec("decode", b, 1024) for b in (1, 4, 16, 64)]
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASHINFER": {"16": "abort", "32": "ok:0.1"}}))
    rows = []
    outcome = run_backend_group("FLASHINFER", _multi_shape_items([16, 32], shapes), SHAPE,
                                SweepOptions(toolkit=FAKE, item_timeout_s=10.0, startup_timeout_s=20.0),
                                tmp_path / "w.log", on_row=rows.append)
    crashed = [r for r in rows if r["block_size"] == 16]
    assert [("SIGABRT" in r["error"]) for r in crashed] == [True, True, False, False]
    assert outcome.restarts == 2
    assert [r["status"] for r in rows if r["block_size"] == 32] == [R.STATUS_OK] * 4


def test_a_kv_cache_dtype_tune_cannot_build_is_reported_as_not_timed_instead_of_timing_bf16(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASHINFER": {"*": "ok:0.1"}}))
    rows = []
    run_backend_group("FLASHINFER", _items([16]), {**SHAPE, "kv_cache_dtype": "fp8_inc"},
                      SweepOptions(toolkit=FAKE, startup_timeout_s=20.0), tmp_path / "w.log", on_row=rows.append)
    assert rows[0]["status"] == R.STATUS_UNSUPPORTED and "fp8_inc is not timed" in rows[0]["error"]


def test_an_fp8_kv_cache_row_is_timed_and_checked_with_the_stated_fp8_tolerance(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASHINFER": {"*": "ok:0.1"}}))
    rows = []
    run_backend_group("FLASHINFER", _items([16]), {**SHAPE, "kv_cache_dtype": "fp8"},
                      SweepOptions(toolkit=FAKE, startup_timeout_s=20.0), tmp_path / "w.log", on_row=rows.append)
    assert rows[0]["status"] == R.STATUS_OK and rows[0]["kv_cache_dtype"] == "fp8"
    assert rows[0]["tolerance"] == 0.15
    assert any("fp8 KV cache (float8_e4m3fn, per-tensor scales)" in n for n in rows[0]["notes"])
