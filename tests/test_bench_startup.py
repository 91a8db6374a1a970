"""Where a sweep's fixed cost goes, and the pre-spawned worker that hides part of it (docs/tune-performance.md):
every row carries its wall time and breakdown, every worker its startup figures,
and backend N+1's worker imports its libraries while backend N runs, without weakening isolation.
Real child processes, fake adapters (tests/fixtures/tune/fake_toolkit.py)."""

import json
from pathlib import Path

import pytest

from attnsel.bench.plan import WorkloadSpec, make_shape
from attnsel.bench.plan import build as P
from attnsel.bench.sweep import SweepOptions, run_sweep
from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.groups import run_backend_group
from attnsel.bench.tune import env_info
from attnsel.bench.tune.phases import phase_breakdown
from attnsel.bench.tune.run import device_for_plan

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
FAKE = f"{FIXTURES / 'fake_toolkit.py'}:FakeToolkit"
SHAPE = {"head_size": 128, "num_q_heads": 32, "num_kv_heads": 8, "dtype": "bfloat16", "kv_cache_dtype": "auto"}
DECODE = WorkloadSpec("decode", 4, 1024)


def _items(block_sizes, check=True):
    return [{"key": f"FAKE|bs={bs}", "block_size": bs, "kernel_block_size": bs, "workload": DECODE.to_dict(),
             "check": check} for bs in block_sizes]


def _options(**kw):
    kw.setdefault("import_slots", 4)  # a 16-core machine's: every worker of the sweep may import at once
    return SweepOptions(toolkit=FAKE, item_timeout_s=kw.pop("item_timeout_s", 10.0), startup_timeout_s=20.0, **kw)


def _plan(backends):
    shape = make_shape(128, 32, 8, "bf16")
    plan = P.build_plan(shape, (9, 0), backends=backends, block_sizes=[16, 32], kinds=["decode"], grid="quick")
    return P.Plan(**{**plan.__dict__, "workloads": (DECODE,)})


def test_each_row_records_its_wall_time_and_what_it_was_spent_on(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASHINFER": {"*": "ok:0.1", "sleep": 0.2}}))
    rows = []
    run_backend_group("FLASHINFER", _items([16, 32]), SHAPE, _options(), tmp_path / "w.log", on_row=rows.append)
    assert [r["status"] for r in rows] == [R.STATUS_OK] * 2
    for row in rows:
        parts = row["wall_breakdown_s"]
        assert {"batch_s", "prepare_s", "first_call_s", "check_s", "timing_s", "release_s"} <= set(parts)
        assert parts["timing_s"] >= 0.2  # the fake timer sleeps 0.2 s per row
        assert sum(parts.values()) <= row["row_wall_s"] + 1e-3  # the parts never exceed the whole


def test_a_worker_reports_its_startup_split_into_imports_and_cuda_init(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASHINFER": {"*": "ok:0.1", "import": "sleep:0.3"}}))
    outcome = run_backend_group("FLASHINFER", _items([16]), SHAPE, _options(), tmp_path / "w.log",
                                on_row=lambda row: None)
    [worker] = outcome.workers
    assert worker["library_import_s"] >= 0.3
    assert worker["torch_import_s"] is not None and worker["cuda_init_s"] is not None
    parts = worker["interpreter_s"] + worker["torch_import_s"] + worker["library_import_s"] + worker["cuda_init_s"]
    assert parts <= worker["startup_s"] + 0.05  # spawn -> ready covers every measured step
    assert worker["prespawned"] is False and worker["exposed_s"] == pytest.approx(worker["startup_s"], abs=0.05)


def test_the_next_backends_worker_imports_while_the_first_backend_runs(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.3", "sleep": 0.4}, "FLASHINFER": {"*": "ok:0.2", "import": "sleep:0.6"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    first, second = outcomes["FLASH_ATTN"], outcomes["FLASHINFER"]
    [early] = second.workers
    assert early["prespawned"]
    # it finished importing before the first backend was done, and got "go" only after that
    assert early["imported_at"] < first.ended_at
    assert early["go_at"] >= first.ended_at - 0.01
    # so the sweep waited for less than its 0.6 s library import
    assert early["overlapped_s"] >= 0.6 and early["exposed_s"] < early["library_import_s"]


def test_on_a_machine_with_few_cores_the_next_worker_imports_once_the_first_is_done(tmp_path, monkeypatch):
    # One import slot (a 2-3 core machine): the first backend's worker imports alone, the next one
    # starts after it (with its first row) and still imports while the first backend runs.
    scenario = {"FLASH_ATTN": {"*": "ok:0.3", "sleep": 0.5, "import": "sleep:0.5"},
                "FLASHINFER": {"*": "ok:0.2", "import": "sleep:0.5"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(import_slots=1, prebuild=False), tmp_path,
                        outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    [first], [second] = outcomes["FLASH_ATTN"].workers, outcomes["FLASHINFER"].workers
    assert second["prespawned"] and second["spawned_at"] >= first["imported_at"]
    assert second["spawned_at"] < outcomes["FLASH_ATTN"].ended_at


def test_without_prespawn_each_backend_starts_its_worker_when_its_turn_comes(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({"FLASH_ATTN": {"sleep": 0.1}}))
    outcomes = {}
    run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(prespawn=False), tmp_path, outcomes=outcomes)
    [worker] = outcomes["FLASHINFER"].workers
    assert not worker["prespawned"] and worker["spawned_at"] >= outcomes["FLASH_ATTN"].ended_at - 0.01


def test_a_prespawned_worker_that_crashes_while_importing_is_replaced_by_a_fresh_one(tmp_path, monkeypatch):
    marker = tmp_path / "crashed-once"
    scenario = {"FLASH_ATTN": {"sleep": 0.1}, "FLASHINFER": {"*": "ok:0.2", "import": f"abort_once:{marker}"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert marker.exists()  # the pre-spawned worker did abort
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    second = outcomes["FLASHINFER"]
    assert second.prespawn_failures == 1 and second.restarts == 0
    assert [w["prespawned"] for w in second.workers] == [True, False]
    assert "SIGABRT" in second.workers[0]["error"]


def test_a_backend_whose_import_always_crashes_fails_its_rows_and_the_sweep_goes_on(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"import": "abort"}, "FLASHINFER": {"*": "ok:0.2"}, "TRITON_ATTN": {"*": "ok:0.3"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN"]), _options(), tmp_path, outcomes=outcomes)
    by_backend = {}
    for r in rows:
        by_backend.setdefault(r["backend"], []).append(r)
    assert {r["status"] for r in by_backend["FLASH_ATTN"]} == {R.STATUS_ERROR}
    assert all("SIGABRT" in r["error"] for r in by_backend["FLASH_ATTN"])
    assert len(outcomes["FLASH_ATTN"].workers) == 2  # pre-spawned one, then one fresh try
    assert {r["status"] for r in by_backend["FLASHINFER"] + by_backend["TRITON_ATTN"]} == {R.STATUS_OK}
    assert outcomes["FLASHINFER"].workers[0]["prespawned"]  # pre-spawned while FLASH_ATTN was failing


def test_a_prespawned_worker_that_hangs_while_importing_times_out_its_rows(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.1"}, "FLASHINFER": {"import": "hang"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    options = SweepOptions(toolkit=FAKE, item_timeout_s=5.0, startup_timeout_s=1.5)
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), options, tmp_path)
    hung = [r for r in rows if r["backend"] == "FLASHINFER"]
    assert hung and {r["status"] for r in hung} == {R.STATUS_TIMEOUT}
    assert "did not start" in hung[0]["error"]


def test_phases_add_up_to_the_total(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.3", "sleep": 0.2}, "FLASHINFER": {"*": "ok:0.2", "import": "sleep:0.2"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    import time

    started = time.time()
    run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    phases = phase_breakdown(outcomes, probe_s=0.0, total_s=time.time() - started, probe_source="nvml")
    walls = sum(b["wall_s"] for b in phases["backends"].values())
    assert walls + phases["other_s"] == pytest.approx(phases["total_s"], abs=0.01)
    for b in phases["backends"].values():
        named = b["startup_s"] + b["batch_s"] + b["setup_s"] + b["check_s"] + b["timing_s"]
        assert named + b["other_s"] == pytest.approx(b["wall_s"], abs=0.01)
        assert b["other_s"] >= -0.01 and b["row_wall_s"] <= b["wall_s"]
    assert phases["backends"]["FLASH_ATTN"]["timing_s"] >= 2 * 0.2  # two block sizes, 0.2 s each


# --- the device for the plan: NVML when it can tell, a torch probe worker otherwise


def _scenario_file(tmp_path, change):
    data = json.loads((FIXTURES / "nvml_h200.json").read_text())
    change(data)
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(data))
    return path


def test_the_plan_device_comes_from_nvml_without_a_probe_process(monkeypatch):
    monkeypatch.setenv("ATTNSEL_NVML_SCENARIO", str(FIXTURES / "nvml_h200.json"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    device = device_for_plan(SweepOptions(toolkit=f"{FIXTURES / 'fake_toolkit.py'}:BrokenToolkit"))
    # a probe worker would have failed (BrokenToolkit): NVML answered alone
    assert (device["name"], device["capability"], device["source"]) == ("NVIDIA H200", [9, 0], "nvml")


def test_without_nvml_the_torch_probe_worker_answers(tmp_path, monkeypatch):
    path = _scenario_file(tmp_path, lambda d: d.update(init={"nvml_error": "NVML_ERROR_LIBRARY_NOT_FOUND"}))
    monkeypatch.setenv("ATTNSEL_NVML_SCENARIO", str(path))
    device = device_for_plan(_options())
    assert (device["name"], device["source"]) == ("Fake GPU", "worker")


def _two_gpus(names):
    def change(d):
        calls = d["calls"]
        calls["nvmlDeviceGetCount"] = {"": 2}
        calls["nvmlDeviceGetName"] = {"0": names[0], "1": names[1]}
        calls["nvmlDeviceGetCudaComputeCapability"] = {"0": [9, 0], "1": [8, 0] if names[0] != names[1] else [9, 0]}
        calls["nvmlDeviceGetUUID"] = {"0": "GPU-aaaa", "1": "GPU-bbbb"}
    return change


def test_nvml_is_not_trusted_when_cuda_could_order_different_gpus_differently(tmp_path, monkeypatch):
    path = _scenario_file(tmp_path, _two_gpus(["NVIDIA H200", "NVIDIA A100-SXM4-80GB"]))
    monkeypatch.setenv("ATTNSEL_NVML_SCENARIO", str(path))
    reader = env_info.NvmlReader()
    try:
        assert env_info.device_from_nvml(reader, {}) is None  # CUDA's FASTEST_FIRST may put either first
        assert env_info.device_from_nvml(reader, {"CUDA_VISIBLE_DEVICES": "1"})["name"] == "NVIDIA A100-SXM4-80GB"
        assert env_info.device_from_nvml(reader, {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"})["capability"] == [9, 0]
        assert env_info.device_from_nvml(reader, {"CUDA_VISIBLE_DEVICES": "MIG-1234"}) is None
        assert env_info.device_from_nvml(reader, {"CUDA_VISIBLE_DEVICES": ""}) is None
    finally:
        reader.close()


def test_worker_facts_complete_the_nvml_device_and_a_mismatch_is_warned():
    device = {"name": "NVIDIA H200", "capability": [9, 0], "source": "nvml", "uuid": None}
    assert env_info.merge_worker_info(device, {"name": "NVIDIA H200", "capability": [9, 0],
                                               "l2_cache_bytes": 60 * 2**20, "uuid": "GPU-x"}) == []
    assert device["l2_cache_bytes"] == 60 * 2**20 and device["uuid"] == "GPU-x"
    warnings = env_info.merge_worker_info(dict(device), {"name": "NVIDIA A100", "capability": [8, 0]})
    assert len(warnings) == 1 and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in warnings[0]


def test_the_backend_with_the_cheapest_import_runs_first_so_the_others_imports_hide_behind_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({}))
    outcomes = {}
    run_sweep(_plan(["FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "FLEX_ATTENTION"]), _options(), tmp_path,
              outcomes=outcomes)
    by_start = sorted(outcomes, key=lambda b: outcomes[b].started_at)
    # FLEX_ATTENTION imports only torch (7.6 s on an H100); `import vllm` (18.9 s) hides behind it
    assert by_start == ["FLEX_ATTENTION", "TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"]


# --- FA4's persistent compile cache (flash_attn/cute/cache_utils.py reads its flag at import)


def test_fa4_compile_cache_is_turned_on_unless_the_user_chose_otherwise():
    from attnsel.attention.kernels.flash_attn_adapter import enable_fa4_compile_cache

    env = {"XDG_CACHE_HOME": "/x/cache"}
    enable_fa4_compile_cache(env)
    assert env["FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"] == "1"
    assert env["FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"] == "/x/cache/flash_attention_cute_dsl_cache"
    off = {"FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0"}
    enable_fa4_compile_cache(off)
    assert off == {"FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0"}
    mine = {"FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": "/mine"}
    enable_fa4_compile_cache(mine)
    assert mine["FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"] == "/mine"


def test_preloading_runs_each_adapters_before_import_hook_before_importing_its_module():
    from attnsel.bench.worker.prebuild import import_backend_libraries

    seen = []

    class Adapter:
        module = "colorsys"  # a small stdlib module, dropped from sys.modules below

        def before_import(self):
            import sys

            seen.append("colorsys" in sys.modules)

    import sys

    sys.modules.pop("colorsys", None)
    import_backend_libraries([Adapter()], "FAKE")

    assert seen == [False] and "colorsys" in sys.modules


def test_a_library_import_that_creates_a_cuda_context_during_another_backends_timing_is_reported(tmp_path, monkeypatch):
    from attnsel.bench.tune.document import prespawn_warnings

    scenario = {"FLASH_ATTN": {"sleep": 0.1}, "FLASHINFER": {"import": "init_cuda"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert outcomes["FLASHINFER"].workers[0]["cuda_initialized_by_import"] is True
    assert outcomes["FLASH_ATTN"].workers[0]["cuda_initialized_by_import"] is False
    [warning] = prespawn_warnings(outcomes)
    assert "FLASHINFER" in warning and "while an earlier backend was being timed" in warning
    assert "ATTNSEL_TUNE_PRESPAWN=0" in warning


# --- JIT pre-build: a pre-spawned worker compiles its backend's JIT modules (FlashInfer: nvcc,
# 103 s of a cold H200 sweep) before "go", while the previous backend is timed (docs/tune-performance.md)


def _prebuild_events(log):
    return [json.loads(line) for line in Path(log).read_text().splitlines()] if Path(log).exists() else []


def _notes(rows, backend):
    """The JIT pre-build notes of `backend`'s rows (the fake adapter adds "fake adapter" to all)."""
    return [n for r in rows if r["backend"] == backend for n in r.get("notes") or [] if "JIT" in n]


def test_the_prespawned_worker_compiles_its_jit_modules_while_the_previous_backend_is_timed(tmp_path, monkeypatch):
    log = tmp_path / "prebuild.jsonl"
    scenario = {"FLASH_ATTN": {"*": "ok:0.3", "sleep": 1.0},
                "FLASHINFER": {"*": "ok:0.2", "prebuild": "sleep:0.5", "prebuild_log": str(log)}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    first, [worker] = outcomes["FLASH_ATTN"], outcomes["FLASHINFER"].workers
    start, end = _prebuild_events(log)
    # the build ran inside the first backend's turn, and was over before that backend was
    assert first.started_at <= start["at"] and end["at"] < first.ended_at <= worker["go_at"] + 0.01
    # it was asked for exactly what this worker's items need (two block sizes of one decode shape),
    # on the plan's GPU
    assert (start["kinds"], start["dtype"], start["head_size"], start["capability"]) == (
        ["decode", "decode"], "bfloat16", 128, [9, 0])
    record = worker["prebuild"]
    assert record["error"] is None and record["built"] == 2 and record["before_go_s"] >= 0.5
    assert record["waited_after_go_s"] < 0.3
    notes = _notes(rows, "FLASHINFER")
    assert len(notes) == 2 and all(n.startswith("JIT modules pre-built while FLASH_ATTN was timed") and "(2 modules)" in n
                                   for n in notes)
    assert not _notes(rows, "FLASH_ATTN")  # the first backend was not pre-spawned: nothing to say


def test_the_prebuild_does_not_wait_for_the_backends_other_imports(tmp_path, monkeypatch):
    # Cold, FlashInfer's build is the sweep's critical path; it needs flashinfer, not vLLM's 12.5 s import.
    log = tmp_path / "prebuild.jsonl"
    scenario = {"FLASH_ATTN": {"*": "ok:0.3", "sleep": 1.5},
                "FLASHINFER": {"*": "ok:0.2", "import": "sleep:1.0", "prebuild": "sleep:0.3", "prebuild_log": str(log)}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    [worker] = outcomes["FLASHINFER"].workers
    _start, end = _prebuild_events(log)
    assert end["at"] < worker["imported_at"]  # built while the library import was still running
    assert worker["library_import_s"] >= 1.0 and worker["prebuild"]["built"] == 2


def test_go_waits_for_a_prebuild_that_is_still_running(tmp_path, monkeypatch):
    log = tmp_path / "prebuild.jsonl"
    scenario = {"FLASH_ATTN": {"*": "ok:0.3"},
                "FLASHINFER": {"*": "ok:0.2", "prebuild": "sleep:2.0", "prebuild_log": str(log)}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    [worker] = outcomes["FLASHINFER"].workers
    _, end = _prebuild_events(log)
    assert end["at"] <= worker["ready_at"]  # no CUDA, no row, before the build was over
    record = worker["prebuild"]
    assert record["finished"] and record["waited_after_go_s"] >= 0.5
    assert record["before_go_s"] + record["waited_after_go_s"] == pytest.approx(record["seconds"], abs=0.1)
    assert all("waited" in n for n in _notes(rows, "FLASHINFER"))
    assert {r["status"] for r in rows} == {R.STATUS_OK}


def test_a_failing_prebuild_only_leaves_a_note(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.3"}, "FLASHINFER": {"*": "ok:0.2", "prebuild": "raise"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    [worker] = outcomes["FLASHINFER"].workers  # the same pre-spawned worker timed the rows
    assert worker["prespawned"] and "nvcc" in worker["prebuild"]["error"]
    notes = _notes(rows, "FLASHINFER")
    assert notes and all(n.startswith("JIT pre-build failed") and "as usual" in n for n in notes)


def test_a_hanging_prebuild_is_waited_for_only_up_to_its_bound(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.3"}, "FLASHINFER": {"*": "ok:0.2", "prebuild": "hang"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    options = SweepOptions(toolkit=FAKE, item_timeout_s=10.0, startup_timeout_s=3.0)
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), options, tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}  # answered "ready" within the startup timeout
    [worker] = outcomes["FLASHINFER"].workers
    assert worker["prebuild"]["finished"] is False and worker["exposed_s"] < 3.0
    assert all("still running" in n for n in _notes(rows, "FLASHINFER"))


@pytest.mark.parametrize("switch", ["ATTNSEL_TUNE_PRESPAWN", "ATTNSEL_TUNE_PREBUILD"])
def test_nothing_is_prebuilt_when_prespawning_or_prebuilding_is_off(tmp_path, monkeypatch, switch):
    log = tmp_path / "prebuild.jsonl"
    scenario = {"FLASH_ATTN": {"*": "ok:0.3"},
                "FLASHINFER": {"*": "ok:0.2", "prebuild": "sleep:0.1", "prebuild_log": str(log)}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    monkeypatch.setenv(switch, "0")
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    assert not log.exists() and outcomes["FLASHINFER"].workers[0]["prebuild"] is None
    assert not _notes(rows, "FLASHINFER")


def test_a_fresh_worker_replacing_a_crashed_prespawned_one_does_not_prebuild(tmp_path, monkeypatch):
    marker, log = tmp_path / "crashed-once", tmp_path / "prebuild.jsonl"
    scenario = {"FLASH_ATTN": {"sleep": 0.1},
                "FLASHINFER": {"*": "ok:0.2", "import": f"abort_once:{marker}", "prebuild": "sleep:0.1",
                               "prebuild_log": str(log)}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    assert [w["prespawned"] for w in outcomes["FLASHINFER"].workers] == [True, False]
    # the pre-spawned one may have started its build (it starts before the library import) and died
    # importing; the fresh one never builds: it compiles at plan()
    assert [e["event"] for e in _prebuild_events(log)] in ([], ["start"])
    assert outcomes["FLASHINFER"].workers[1]["prebuild"] is None


def test_the_third_backends_worker_starts_with_the_sweep_so_its_build_spans_two_backends(tmp_path, monkeypatch):
    log = tmp_path / "prebuild.jsonl"
    scenario = {"TRITON_ATTN": {"*": "ok:0.3", "sleep": 0.5}, "FLASH_ATTN": {"*": "ok:0.3", "sleep": 1.0},
                "FLASHINFER": {"*": "ok:0.2", "prebuild": "sleep:2.0", "prebuild_log": str(log)}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"]), _options(), tmp_path, outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    triton, flash = outcomes["TRITON_ATTN"], outcomes["FLASH_ATTN"]
    start, end = _prebuild_events(log)
    assert start["at"] < triton.ended_at and triton.ended_at < end["at"] < flash.ended_at  # over both turns
    [worker] = outcomes["FLASHINFER"].workers
    assert worker["prebuild"]["previous_backend"] == "TRITON_ATTN and FLASH_ATTN"
    assert all(n.startswith("JIT modules pre-built while TRITON_ATTN and FLASH_ATTN were timed")
               for n in _notes(rows, "FLASHINFER"))


def test_flashinfer_runs_last_and_its_build_starts_with_the_sweep(tmp_path, monkeypatch):
    # With vLLM's own kernels FA3 has no JIT and the earlier backends are quick; FlashInfer's ~100 s
    # of nvcc (cold) must overlap all of them, not only the backend before it.
    log = tmp_path / "prebuild.jsonl"
    scenario = {"TRITON_ATTN": {"*": "ok:0.3", "sleep": 0.3}, "FLASH_ATTN": {"*": "ok:0.3", "sleep": 0.3},
                "FLEX_ATTENTION": {"*": "ok:0.3", "sleep": 0.3},
                "FLASHINFER": {"*": "ok:0.2", "prebuild": "sleep:1.5", "prebuild_log": str(log)}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    outcomes = {}
    rows, _ = run_sweep(_plan(["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"]), _options(), tmp_path,
                        outcomes=outcomes)
    assert {r["status"] for r in rows} == {R.STATUS_OK}
    by_start = sorted(outcomes, key=lambda b: outcomes[b].started_at)
    assert by_start[-1] == "FLASHINFER"
    start, _end = _prebuild_events(log)
    assert start["at"] < outcomes["FLEX_ATTENTION"].ended_at  # building from the first backend's turn on
    [worker] = outcomes["FLASHINFER"].workers
    assert worker["prebuild"]["previous_backend"] == "FLEX_ATTENTION and TRITON_ATTN and FLASH_ATTN"
