"""`attnsel verify` faster without touching what it measures (docs/verify.md "Speed"): the FlashInfer
sampler module pre-built beside the first engine, and each next engine's worker pre-spawned to import
while the previous engine starts, with no import running while an engine is measured. Real worker
processes with the fake engine (tests/fixtures/verify_engine/fake_engine.py) and a fake builder
(tests/fixtures/verify_engine/fake_prebuilder.py) at our boundaries."""

import json
import os

import pytest
from test_verify_starts import SHAPES, scenario

from attnsel.attention.versions import load_profile, release_profiles
from attnsel.bench.verify import plan as VP
from attnsel.bench.verify import prebuild as PB
from attnsel.bench.verify import run as V

FAKE_BUILDER = os.path.join(os.path.dirname(__file__), "fixtures", "verify_engine", "fake_prebuilder.py") + ":build"


def verify(run_dir, **kw):
    return V.run_verify(V.VerifyRequest(tune_dir=run_dir, shapes=SHAPES, decode_steps=32, **kw), run_dir)


def events(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def speed(fake_engine, tmp_path, monkeypatch):
    """use(engine extras, build scenario or None) -> the events file; the fake builder stands in for FlashInfer."""
    def use(extra=None, build=None):
        events_file = tmp_path / "events.jsonl"
        fake_engine(dict(scenario(default_starts=[]), events_file=str(events_file), **(extra or {})))
        if build is not None:
            path = tmp_path / "build.json"
            path.write_text(json.dumps(dict(build, events_file=str(events_file))))
            monkeypatch.setenv(PB.BUILDER_ENV, FAKE_BUILDER)
            monkeypatch.setenv("ATTNSEL_FAKE_PREBUILD", str(path))
        return events_file

    return use


@pytest.mark.parametrize("name", release_profiles())
def test_the_pre_build_asks_for_the_module_the_release_data_names(name):
    profile = load_profile(name)
    request = PB.prebuild_request(profile, (9, 0), {})
    data = (profile.data.get("sampler") or {}).get("jit_modules")
    if data:
        assert request["modules"] == data and request["cuda_arch"] == "9.0"
    else:  # a release whose sampler was not read: nothing is built
        assert "skipped" in request and not profile.sampler_jit_modules


def test_the_pre_build_follows_the_users_switches():
    profile = load_profile("vllm_0_33")
    assert PB.prebuild_request(profile, (9, 0), {PB.PREBUILD_ENV: "0"}) is None
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in PB.prebuild_request(profile, (9, 0), {"VLLM_USE_FLASHINFER_SAMPLER": "0"})["skipped"]
    # the arch the user gave FlashInfer is the one the engine builds for too
    assert PB.prebuild_request(profile, (9, 0), {"FLASHINFER_CUDA_ARCH_LIST": "10.0"})["cuda_arch"] == "10.0"


def test_the_pre_build_runs_beside_the_first_engine_at_low_priority_and_its_record_is_kept(speed, tune_run_dir):
    events_file = speed({"start_wait_s": 0.3}, build={"wait_s": 2.0})
    doc = verify(tune_run_dir)
    record = doc["prebuild"]
    assert record["modules"] == ["sampling"] and record["built"] == 1 and not record["error"]
    assert record["cuda_arch"] == "9.0" and "pre-built" in record["note"]
    [build] = [e for e in events(events_file) if e["event"] == "prebuild"]
    assert build["arch"] == "9.0" and build["nice"] >= PB.NICE
    first, pick = doc["candidates"][0], doc["candidates"][1]
    # vLLM's default (FLASH_ATTN) loads none of the build's modules: it measures with the build paused;
    # tune's pick (FLASHINFER) loads them: it measures once the build has ended
    assert first["hold"]["prebuild"] == "paused" and "prebuild_s" not in first["hold"]
    assert pick["hold"]["prebuild_s"] >= 0 and record["paused_s"] > 0
    seen = events(events_file)
    for pid in {e["pid"] for e in seen if e["event"] == "generate"}:  # no build work while an engine measured
        calls = [e["t"] for e in seen if e["event"] == "generate" and e["pid"] == pid]
        assert not min(calls) < build["t"] < max(calls)
    pick_pid = [e["pid"] for e in seen if e["event"] == "start_begin"][1]
    assert build["t"] < min(e["t"] for e in seen if e["event"] == "generate" and e["pid"] == pick_pid)
    assert all(r["status"] == "ok" for r in doc["candidates"])


def test_a_flashinfer_engine_to_start_gets_its_attention_modules_pre_built_too_on_no_gpu(speed, tune_run_dir):
    # tune's pick here is FLASHINFER/64: that engine would JIT-build its attention modules in its own
    # start (a fresh machine), so the builder gets the model's attention shape as well
    events_file = speed(build={"wait_s": 0.1})
    doc = verify(tune_run_dir)
    [build] = [e for e in events(events_file) if e["event"] == "prebuild"]
    [attention] = build["attention"]
    assert (attention["dtype"], attention["head_size"], attention["kv_cache_dtype"]) == ("bfloat16", 128, "auto")
    assert attention["capability"] == [9, 0] and doc["prebuild"]["attention"] == build["attention"]
    assert build["visible"] == ""  # the builder opens no CUDA context beside the first engine
    assert "sampler and attention modules" in doc["prebuild"]["note"]


def test_without_a_flashinfer_engine_only_the_sampler_is_pre_built(speed, tune_run_dir):
    # the engine's start outlasts the build (a real engine waits on the module's lock for it)
    events_file = speed({"start_wait_s": 2.0}, build={"wait_s": 0.1})
    V.run_verify(V.VerifyRequest(tune_dir=tune_run_dir, shapes=SHAPES, decode_steps=32,
                                 candidates=VP.parse_candidates("default")), tune_run_dir)
    [build] = [e for e in events(events_file) if e["event"] == "prebuild"]
    assert build["attention"] is None and build["modules"]


def test_attention_modules_are_pre_built_even_when_vllm_samples_without_flashinfer():
    profile = load_profile("vllm_0_33")
    shape = {"dtype": "bfloat16", "head_size": 128, "kv_cache_dtype": "auto"}
    request = PB.prebuild_request(profile, (9, 0), {"VLLM_USE_FLASHINFER_SAMPLER": "0"}, shape)
    assert request["modules"] == [] and request["attention"] == [dict(shape, capability=[9, 0])]


def test_a_failing_pre_build_is_recorded_and_verify_still_completes(speed, tune_run_dir):
    speed(build={"fail": "Ninja build failed: nvcc not found"})
    doc = verify(tune_run_dir)
    assert "nvcc not found" in doc["prebuild"]["error"] and "failed" in doc["prebuild"]["note"]
    assert all(r["status"] == "ok" for r in doc["candidates"]) and doc["verdict"]["verdict"]
    assert json.loads((tune_run_dir / "verify.json").read_text())["prebuild"] == doc["prebuild"]


def test_the_next_worker_imports_while_the_engine_starts_and_before_it_measures(speed, tune_run_dir, monkeypatch):
    monkeypatch.setenv(PB.PREBUILD_ENV, "0")
    events_file = speed({"start_wait_s": 1.0, "import_s": 1.5})
    doc = verify(tune_run_dir)
    rows = doc["candidates"]
    assert "prebuild" not in doc and all(r["status"] == "ok" for r in rows)
    seen = events(events_file)
    starts = [e for e in seen if e["event"] == "start_begin"]
    assert len(starts) == len(rows) == 3
    for k in range(len(rows) - 1):
        engine, nxt = starts[k]["pid"], starts[k + 1]["pid"]
        engine_start_end = next(e["t"] for e in seen if e["pid"] == engine and e["event"] == "start_end")
        engine_first_call = min(e["t"] for e in seen if e["pid"] == engine and e["event"] == "generate")
        next_import = [e["t"] for e in seen if e["pid"] == nxt and e["event"] in ("preload_start", "preload_end")]
        assert next_import[0] < engine_start_end  # spawned while engine k started
        assert next_import[1] < engine_first_call  # imported before engine k's first call
        assert rows[k]["hold"]["next_worker"] == "imported"
        assert rows[k + 1]["prespawn"]["worker"] == "pre-spawned"
        assert rows[k + 1]["engine"]["import_hidden_s"] == pytest.approx(1.5, abs=0.5)
    assert "hold" not in rows[-1]  # the last engine has no next worker to wait for
    # no import ran while an engine measured: each worker's import ended before any later call
    for pid in {e["pid"] for e in seen if e["event"] == "preload_end"}:
        end = next(e["t"] for e in seen if e["pid"] == pid and e["event"] == "preload_end")
        others = [e["t"] for e in seen if e["event"] == "generate" and e["pid"] != pid]
        begin = next(e["t"] for e in seen if e["pid"] == pid and e["event"] == "preload_start")
        assert not [t for t in others if begin <= t <= end]


def test_a_worker_that_imported_long_before_a_slow_engine_measures_is_used_not_called_late(
        speed, tune_run_dir, monkeypatch):
    # the engine's start outlasts the import wait: the "imported" line sits in the pipe by then
    from attnsel.bench.verify import beside

    monkeypatch.setenv(PB.PREBUILD_ENV, "0")
    monkeypatch.setattr(beside, "IMPORT_WAIT_S", 0.5)
    speed({"start_wait_s": 1.5, "import_s": 0.1})
    rows = verify(tune_run_dir)["candidates"]
    assert [r["hold"]["next_worker"] for r in rows[:-1]] == ["imported", "imported"]
    assert all(r["prespawn"]["worker"] == "pre-spawned" for r in rows[1:])


def test_a_pre_spawned_worker_that_dies_is_replaced_by_a_fresh_start(speed, tune_run_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(PB.PREBUILD_ENV, "0")
    speed({"on_preload": "die-once", "die_once_file": str(tmp_path / "died")})
    doc = verify(tune_run_dir)
    rows = doc["candidates"]
    assert all(r["status"] == "ok" for r in rows)
    assert rows[0]["hold"]["next_worker"] == "died" and rows[1]["prespawn"]["worker"] == "died"
    assert "started afresh" in rows[1]["prespawn"]["note"] and "import_hidden_s" not in rows[1]["engine"]
    assert rows[2]["prespawn"]["worker"] == "pre-spawned"


def test_switched_off_verify_writes_what_it_always_wrote(speed, tune_run_dir, monkeypatch):
    monkeypatch.setenv(PB.PREBUILD_ENV, "0")
    monkeypatch.setenv("ATTNSEL_VERIFY_PRESPAWN", "0")
    events_file = speed(build={"wait_s": 0.0})
    doc = verify(tune_run_dir)
    assert "prebuild" not in doc
    for row in doc["candidates"]:
        assert not {"prespawn", "hold"} & set(row) and "import_hidden_s" not in row["engine"]
    seen = events(events_file)
    assert not [e for e in seen if e["event"] in ("prebuild", "preload_start")]


def test_the_cli_says_what_each_engine_waited_for_and_what_was_pre_built(speed, tune_run_dir):
    from typer.testing import CliRunner

    from attnsel.cli.app import app

    speed({"import_s": 0.5}, build={"wait_s": 0.5})
    result = CliRunner().invoke(app, ["verify", str(tune_run_dir), "--shapes", "1x2048", "--decode-steps", "32"],
                                env=dict(os.environ))
    assert result.exit_code in (0, 1), result.output
    assert "measuring waited" in result.output and "the next engine's import" in result.output
    assert "vLLM imported while the previous engine started" in result.output
    assert "FlashInfer sampler and attention modules pre-built" in result.output


def test_with_repeat_engine_every_later_start_gets_the_worker_pre_spawned_for_it(speed, tune_run_dir, monkeypatch):
    monkeypatch.setenv(PB.PREBUILD_ENV, "0")
    speed()
    doc = verify(tune_run_dir, repeat_engine=2)
    starts = [r for row in doc["candidates"] for r in (row, *row["restarts"])]
    assert len(starts) == 6 and all(r["status"] == "ok" for r in starts)
    # the runs were started in the order planned: each later one found its own worker waiting
    order = doc["candidates"] + [row["restarts"][0] for row in doc["candidates"]]
    assert "prespawn" not in order[0]
    assert [r["prespawn"]["worker"] for r in order[1:]] == ["pre-spawned"] * 5


def test_ctrl_c_kills_the_waiting_worker_and_the_pre_build(speed, tune_run_dir, gone):
    events_file = speed({"import_s": 4.0, "start_wait_s": 2.0}, build={"wait_s": 60.0})

    def interrupt_while_held():  # Ctrl-C while the first engine waits for the next worker, the build paused
        seen = {e["event"] for e in events(events_file)}
        if {"preload_start", "prebuild_start", "start_end"} <= seen:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        V.run_verify(V.VerifyRequest(tune_dir=tune_run_dir, shapes=SHAPES, decode_steps=32), tune_run_dir,
                     V.VerifyProgress(on_tick=interrupt_while_held))
    seen = events(events_file)
    started = {e["pid"] for e in seen if e["event"] in ("preload_start", "start_begin", "prebuild_start")}
    assert len(started) == 3 and all(gone(pid) for pid in started), seen  # engine 1, worker 2, the builder
    assert not [e for e in seen if e["event"] in ("prebuild", "generate")]  # none of them went on


def test_a_build_slower_than_the_hold_budget_is_stopped_and_recorded(speed, tune_run_dir, monkeypatch):
    monkeypatch.setattr(PB, "HOLD_S", 1.0)
    monkeypatch.setenv("ATTNSEL_VERIFY_PRESPAWN", "0")
    speed(build={"wait_s": 60.0})
    doc = verify(tune_run_dir)
    holds = {r["short"]: r.get("hold") or {} for r in doc["candidates"]}
    # only the FLASHINFER engine (tune's pick) loads the build's modules and waits, at most the budget;
    # the others measure with the build paused
    assert [name for name, h in holds.items() if "prebuild_s" in h] == ["FLASHINFER/64 pick"]
    assert holds["FLASHINFER/64 pick"]["prebuild_s"] < 3.0
    assert all(h.get("prebuild") == "paused" for name, h in holds.items() if name != "FLASHINFER/64 pick")
    assert "still building" in doc["prebuild"]["error"] and all(r["status"] == "ok" for r in doc["candidates"])
