"""The NVML facade and its funnel (docs/architecture.md, "The NVML funnel"; docs/gpu-facts.md §2: the
nvidia-ml-py ArgumentError bug), and that a recording replays to the same report."""

import ctypes
import json
import os
from pathlib import Path

import pytest

from attnsel.bench.tools.record_nvml import RecordingFacade
from attnsel.errors import UserInputError
from attnsel.probe.collect import collect_from_scenario, collect_probe
from attnsel.probe.nvml import NvmlCallError, NvmlInitError, NvmlSession
from attnsel.probe.nvml.pynvml_facade import _plain
from attnsel.probe.nvml.replay import ReplayFacade, ReplayTorch, load_scenario

FIXTURES = Path(__file__).parent / "fixtures" / "probe"

SMALL = {
    "schema": "attnsel-nvml-scenario/1",
    "init": None,
    "calls": {
        "nvmlDeviceGetName": {"0": "NVIDIA H200", "1": {"nvml_error": "NVML_ERROR_GPU_IS_LOST"}},
        "nvmlDeviceGetP2PStatus": {"0,1,0": {"exception": "ArgumentError", "message": "argument 3: wrong type"}},
    },
}


def started(scenario=SMALL):
    facade = ReplayFacade(scenario)
    facade.init()
    return facade


def test_replay_answers_values_errors_and_exceptions():
    facade = started()
    assert facade.call("nvmlDeviceGetName", 0) == "NVIDIA H200"
    with pytest.raises(NvmlCallError) as lost:
        facade.call("nvmlDeviceGetName", 1)
    assert lost.value.name == "NVML_ERROR_GPU_IS_LOST" and lost.value.message == "GPU is lost"
    with pytest.raises(ctypes.ArgumentError):
        facade.call("nvmlDeviceGetP2PStatus", 0, 1, 0)
    with pytest.raises(NvmlCallError) as missing:
        facade.call("nvmlDeviceGetUUID", 0)
    assert missing.value.name == "NVML_ERROR_FUNCTION_NOT_FOUND"
    with pytest.raises(NvmlCallError) as unknown_key:
        facade.call("nvmlDeviceGetName", 5)
    assert unknown_key.value.name == "NVML_ERROR_NOT_SUPPORTED"


def test_replay_refuses_calls_before_init_and_reports_init_errors():
    with pytest.raises(NvmlCallError):
        ReplayFacade(SMALL).call("nvmlDeviceGetName", 0)
    broken = dict(SMALL, init={"nvml_error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH"})
    with pytest.raises(NvmlInitError) as err:
        ReplayFacade(broken).init()
    assert "reboot" in err.value.hint


def test_funnel_turns_any_exception_into_unknown_for_that_query_only():
    session = NvmlSession(started())
    assert session.get("nvmlDeviceGetName", 1) is None
    assert session.get("nvmlDeviceGetP2PStatus", 0, 1, 0) is None  # ctypes.ArgumentError, not NVMLError
    assert session.get("nvmlDeviceGetName", 0) == "NVIDIA H200"  # later queries still answer
    assert [f.error for f in session.failures] == ["NVML_ERROR_GPU_IS_LOST", "ArgumentError"]
    assert session.get("nvmlDeviceGetName", 1, quiet=True) is None
    assert len(session.failures) == 2


def test_plain_turns_nvml_structs_into_json_values():
    import pynvml

    memory = pynvml.c_nvmlMemory_t()
    memory.total, memory.free, memory.used = 10, 4, 6
    assert _plain(memory) == {"total": 10, "free": 4, "used": 6}
    assert _plain((9, 0)) == [9, 0]
    assert _plain(b"NVIDIA H200") == "NVIDIA H200"


def test_load_scenario_rejects_other_files(tmp_path):
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(UserInputError):
        load_scenario(other)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserInputError):
        load_scenario(bad)


@pytest.mark.parametrize("name", ["h100_sxm_x8_nvlink.json", "a100_x2_mig.json", "a100_x4_gpu2_lost.json",
                                  "v100_x2_old_driver.json", "mixed_3090x2_1080tix3.json"])
def test_a_recording_replays_to_the_same_report(name):
    original = load_scenario(FIXTURES / name)
    recorder = RecordingFacade(ReplayFacade(original))
    first = collect_probe({}, nvml=recorder, torch=ReplayTorch({}))
    recorded = {"schema": "attnsel-nvml-scenario/1", "init": recorder.init_answer, "calls": recorder.calls}
    again = collect_from_scenario(recorded, {})
    assert again.to_dict() == first.to_dict()


@pytest.mark.gpu
def test_real_nvml_on_a_gpu_machine():
    report = collect_probe(dict(os.environ))
    assert report.source == "nvml"
    assert report.gpus and all(g.compute_capability for g in report.gpus)
    assert report.driver_version
    for pair in report.nvlink.pairs:  # the integer caps index never raises ArgumentError
        assert "ArgumentError" not in (pair.error or "")
