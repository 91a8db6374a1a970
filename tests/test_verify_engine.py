"""`attnsel verify` end to end on CPU: real engine worker processes, each loading a fake engine at
our boundary (tests/fixtures/verify_engine/fake_engine.py) that starts, times, raises, hangs or dies
as a scenario says, and a recorded H200's NVML."""

import json
import time
from pathlib import Path

import pytest

from attnsel.bench.verify import run as V
from attnsel.errors import UserInputError

# FLASH_ATTN/16 is vLLM's default in the tune result, FLASHINFER/64 tune's pick, FLASH_ATTN/128 the runner-up
FAST_PICK = {
    "default": ["FLASH_ATTN", 16],
    "backends": {"FLASH_ATTN": {"step_ms": 18.1, "prefill_tok_s": 45000, "jitter": 0.001},
                 "FLASHINFER": {"step_ms": 15.0, "prefill_tok_s": 50000, "jitter": 0.001}},
}
SHAPES = [(1, 2048), (16, 1024)]


def scenario_with(**changes):
    scenario = json.loads(json.dumps(FAST_PICK))
    for name, spec in changes.items():
        scenario["backends"].setdefault(name.replace("__", "/"), {}).update(spec)
    return scenario


def verify(run_dir, **kw):
    kw.setdefault("shapes", SHAPES)
    kw.setdefault("decode_steps", 32)
    return V.run_verify(V.VerifyRequest(tune_dir=run_dir, **kw), run_dir)


def rows_by_role(doc):
    return {"+".join(r["roles"]): r for r in doc["candidates"]}


def test_each_candidate_gets_its_own_engine_and_what_it_ran_is_read_back(fake_engine, tune_run_dir):
    fake_engine(FAST_PICK)
    doc = verify(tune_run_dir)
    rows = rows_by_role(doc)
    assert list(rows) == ["vllm-default", "tune-pick", "runner-up"]
    assert all(r["status"] == "ok" and r["exit"] == "exited with code 0" for r in rows.values())
    default, pick = rows["vllm-default"], rows["tune-pick"]
    assert default["engine"]["backend_used"] == "FLASH_ATTN" and default["engine"]["block_size_used"] == 16
    assert pick["engine"]["backend_used"] == "FLASHINFER" and pick["engine"]["block_size_used"] == 64
    # vLLM's log lines were kept per engine and read: compile, graphs, KV cache
    assert (tune_run_dir / default["log"]).is_file()
    assert default["engine"]["torch_compile_s"] == 30.71 and default["engine"]["graph_capture_s"] == 7.0
    assert default["engine"]["cudagraph_captures"] == ["mixed prefill-decode: PIECEWISE", "decode: FULL"]
    assert default["engine"]["kv_cache_tokens"] == 832000
    # decode per step from (T(N2) - T(N1)) / (N2 - N1) after a warm-up that paid the first-use compile
    first = default["shapes"][0]
    assert [c["phase"] for c in first["calls"]] == ["warmup"] + ["measure"] * 4
    assert (first["n1"], first["n2"]) == (9, 41)
    assert first["figures"]["decode_step_ms"]["median"] == pytest.approx(18.1, rel=0.02)
    assert doc["verdict"]["verdict"] == "holds"
    assert doc["verdict"]["flags"] == "--attention-backend FLASHINFER --block-size 64"
    assert json.loads((tune_run_dir / "verify.json").read_text())["verdict"] == doc["verdict"]


def test_an_engine_that_fails_to_start_costs_its_row_only(fake_engine, tune_run_dir):
    fake_engine(scenario_with(FLASH_ATTN__128={"on_start": "raise"}))
    doc = verify(tune_run_dir)
    rows = rows_by_role(doc)
    runner_up = rows["runner-up"]
    assert runner_up["status"] == "error"
    # vLLM's front end only says the core failed; the log gives the root cause
    assert "Engine core initialization failed" in runner_up["error"]
    assert "ValueError: Selected backend is not valid" in runner_up["error"]
    assert all(s["status"] == "not run" for s in runner_up["shapes"])
    assert rows["vllm-default"]["status"] == rows["tune-pick"]["status"] == "ok"
    assert doc["verdict"]["verdict"] == "holds"


def test_an_engine_out_of_memory_at_start_is_reported_as_such(fake_engine, tune_run_dir):
    fake_engine(scenario_with(FLASHINFER={"on_start": "oom"}))
    doc = verify(tune_run_dir)
    pick = rows_by_role(doc)["tune-pick"]
    assert pick["status"] == "oom" and "CUDA out of memory" in pick["error"]
    assert doc["verdict"]["verdict"] == "not measured"
    assert "this candidate: oom" in doc["verdict"]["text"]


def test_a_hanging_engine_is_killed_with_everything_it_started(fake_engine, tune_run_dir, tmp_path, gone):
    scenario = scenario_with(FLASHINFER={"on_start": "spawn-and-hang"})
    pid_file = tmp_path / "child.pid"
    scenario["pid_file"] = str(pid_file)
    fake_engine(scenario)
    started = time.monotonic()
    doc = verify(tune_run_dir, start_timeout_s=3.0)
    assert time.monotonic() - started < 30
    pick = rows_by_role(doc)["tune-pick"]
    assert pick["status"] == "timeout" and "within 3 s" in pick["error"]
    child = int(pid_file.read_text())
    # the engine's own child process (like vLLM's engine core) went down with the process group
    assert gone(child)
    assert rows_by_role(doc)["runner-up"]["status"] == "ok"  # the next engine still ran


def test_an_engine_that_dies_mid_shape_keeps_what_it_measured(fake_engine, tune_run_dir):
    fake_engine(scenario_with(FLASHINFER={"on_generate": "die", "fail_batch": 16}))
    doc = verify(tune_run_dir, shapes=[(1, 2048), (16, 1024), (4, 1024)])
    pick = rows_by_role(doc)["tune-pick"]
    assert [s["status"] for s in pick["shapes"]] == ["ok", "crashed", "not run"]
    assert "killed by signal SIGKILL" in pick["shapes"][1]["error"]
    assert "shape 2 ended with crashed" in pick["shapes"][2]["error"]
    compared = {c["shape"]: c for c in doc["comparisons"] if "pick" in c["short"]}
    assert "end_to_end" in compared["decode b=1 ctx=2048"] and "missing" in compared["decode b=16 ctx=1024"]
    assert [s["shape"] for s in doc["verdict"]["shapes"] if s["end_to_end"]] == ["decode b=1 ctx=2048"]


def test_a_dead_worker_is_noticed_even_when_its_forked_child_holds_the_pipe(fake_engine, tune_run_dir, tmp_path, gone):
    scenario = scenario_with(FLASHINFER={"on_generate": "fork-and-die", "fail_batch": 16})
    pid_file = tmp_path / "child.pid"
    scenario["pid_file"] = str(pid_file)
    fake_engine(scenario)
    started = time.monotonic()
    doc = verify(tune_run_dir, call_timeout_s=120.0)
    assert time.monotonic() - started < 60  # not the call timeout: the parent saw its worker exit
    pick = rows_by_role(doc)["tune-pick"]
    assert [s["status"] for s in pick["shapes"]] == ["ok", "crashed"]
    child = int(pid_file.read_text())
    assert gone(child)


def test_one_shape_out_of_memory_does_not_stop_the_next(fake_engine, tune_run_dir):
    fake_engine(scenario_with(FLASHINFER={"on_generate": "oom", "fail_batch": 16}))
    doc = verify(tune_run_dir, shapes=[(16, 1024), (1, 2048)])
    pick = rows_by_role(doc)["tune-pick"]
    assert [s["status"] for s in pick["shapes"]] == ["oom", "ok"]
    assert "CUDA out of memory" in pick["shapes"][0]["error"]


def test_memory_another_process_holds_is_reported_and_the_engines_take_less(fake_engine, tune_run_dir, tmp_path):
    nvml = json.loads(Path(fake_engine(FAST_PICK)["ATTNSEL_NVML_SCENARIO"]).read_text())
    total = nvml["calls"]["nvmlDeviceGetMemoryInfo"]["0"]["total"]
    busy = 40 * 1024 ** 3
    nvml["calls"]["nvmlDeviceGetMemoryInfo"]["0"] = {"total": total, "free": total - busy, "used": busy}
    nvml["calls"]["nvmlDeviceGetComputeRunningProcesses"] = {"0": [{"pid": 4242, "usedGpuMemory": busy}]}
    path = tmp_path / "busy_nvml.json"
    path.write_text(json.dumps(nvml))
    fake_engine(FAST_PICK, nvml=str(path))
    doc = verify(tune_run_dir)
    assert "40.0 GiB of the GPU's 140.4 GiB are already in use" in doc["warnings"][0]
    assert doc["gpu"]["processes"] == [{"pid": 4242, "used_bytes": busy}]
    # the release answered for (the newest: no vLLM here) sizes its extensible KV cache from the free memory
    # it measures: nothing to lower, no utilization passed (0.33's lowering: test_verify_logic.py)
    assert doc["options"]["gpu_memory_utilization"] is None
    assert {r["engine"].get("gpu_memory_utilization") for r in doc["candidates"]} == {None}


def test_a_pair_vllm_refuses_is_never_started(fake_engine, tune_run_dir):
    fake_engine(FAST_PICK)
    doc = verify(tune_run_dir, candidates=[("FLASH_ATTN", 8)])  # not a multiple of 16 in every rule profile
    refused = rows_by_role(doc)["named"]
    assert refused["status"] == "refused" and "block_size not supported" in refused["error"]
    assert "log" not in refused and not list((tune_run_dir / "verify").glob("engine-FLASH_ATTN-8*"))
    assert doc["verdict"]["verdict"] == "not measured"


def test_resume_keeps_the_measured_engines_and_runs_the_rest(fake_engine, tune_run_dir):
    fake_engine(scenario_with(FLASHINFER={"on_start": "oom"}))
    first = verify(tune_run_dir)
    assert [r["status"] for r in first["candidates"]] == ["ok", "oom", "ok"]
    with pytest.raises(UserInputError, match="pass --resume"):
        verify(tune_run_dir)  # a second run would lose the first one
    fake_engine(FAST_PICK)  # memory freed: the pick starts now
    second = verify(tune_run_dir, resume=True)
    assert [r["status"] for r in second["candidates"]] == ["ok", "ok", "ok"]
    assert [bool(r.get("resumed")) for r in second["candidates"]] == [True, False, True]
    assert second["candidates"][0]["shapes"] == first["candidates"][0]["shapes"]
    assert second["verdict"]["verdict"] == "holds"
    with pytest.raises(UserInputError, match="other shapes"):
        verify(tune_run_dir, resume=True, shapes=[(1, 1024)])


def test_an_mla_backend_the_inspection_does_not_name_is_read_from_vllm_s_log_when_the_engine_starts(fake_engine, tune_run_dir):
    # vLLM's MLAAttention prints no backend in the model inspection (0.24-0.33): the progress line
    # showed `?` (issue 21 item 2); the backend vLLM logged when it chose it is read at the start
    fake_engine(scenario_with(FLASHINFER={"mla": True}))
    seen = []
    doc = V.run_verify(V.VerifyRequest(tune_dir=tune_run_dir, shapes=SHAPES, decode_steps=32), tune_run_dir,
                       V.VerifyProgress(on_message=seen.append))
    started = [m["facts"] for m in seen if m["type"] == "started"]
    assert [f.get("logged_backend") for f in started] == [None, "FLASHINFER", None]
    pick = rows_by_role(doc)["tune-pick"]["engine"]
    assert pick["inspection_unnamed_layers"] == ["MLAAttention"]
    assert pick["backend_used"] == "FLASHINFER" and pick["backend_source"] == "log"
