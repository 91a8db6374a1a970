"""Environment recorded with every sweep: peak bandwidth from the device (docs/measuring.md §5),
clocks / temperature / throttle reasons before and after, and drift warnings (§C1)."""

import json
from pathlib import Path

import pytest

from attnsel.bench.tune import env_info as E
from attnsel.probe.nvml import NvmlSession, ReplayFacade

FIXTURES = Path(__file__).parent / "fixtures" / "tune"


def _session(scenario=None):
    facade = ReplayFacade(scenario or json.loads((FIXTURES / "nvml_h200.json").read_text()))
    facade.init()
    return NvmlSession(facade)


def test_peak_bandwidth_comes_from_bus_width_and_memory_clock():
    env = E.gpu_environment(_session(), 0)
    # docs/gpu-facts.md §1: 6016 / 8 x 3201e6 x 2 = 4.81 TB/s
    assert env["peak_memory_bandwidth_bytes_per_s"] / 1e12 == pytest.approx(4.81, abs=0.01)
    assert env["peak_bandwidth_source"].startswith("nvml")
    assert env["cuda_driver_version"] == "13.0"


def test_peak_falls_back_to_the_gpu_table_when_nvml_lacks_the_bus_width():
    peak, source = E.peak_bandwidth("NVIDIA H100 80GB HBM3", 80 * 2**30, None, None)
    assert peak == pytest.approx(3352e9)  # FlashInfer blog table, docs/measuring.md §5
    assert "gpu table" in source


def test_snapshot_reads_clocks_temperature_and_throttle_reasons():
    snap = E.clock_snapshot(_session(), 0)
    assert (snap["sm_clock_mhz"], snap["mem_clock_mhz"], snap["temperature_c"]) == (1980, 3201, 31)
    assert snap["power_w"] == pytest.approx(78.0)
    assert snap["throttle_reasons"] == ["gpu_idle"]


def test_the_worker_gpu_is_found_by_uuid():
    assert E.nvml_index_for(_session(), "6b3f0c2e-1111-2222-3333-444455556666", env={}) == 0


def test_drift_warnings():
    before = {"sm_clock_mhz": 1980, "temperature_c": 40, "throttle_reasons": ["gpu_idle"]}
    assert E.drift_warnings(before, dict(before)) == []
    hot = {"sm_clock_mhz": 1500, "temperature_c": 83, "throttle_reasons": ["sw_thermal_slowdown"]}
    warnings = E.drift_warnings(before, hot)
    assert any("SM clock moved from 1980 to 1500" in w for w in warnings)
    assert any("temperature rose" in w for w in warnings)
    assert any("sw_thermal_slowdown" in w for w in warnings)
    assert E.drift_warnings(None, hot) == []


def test_an_idle_gpu_boosting_for_the_sweep_is_not_drift():
    # what every H200 sweep showed (2026-11-21): parked at 345 MHz idle, 1980 MHz once loaded
    before = {"sm_clock_mhz": 345, "temperature_c": 36, "throttle_reasons": ["gpu_idle"]}
    after = {"sm_clock_mhz": 1980, "temperature_c": 38, "throttle_reasons": []}
    assert E.drift_warnings(before, after) == []


def test_no_nvml_means_no_clocks_not_a_crash(monkeypatch, tmp_path):
    scenario = {"schema": "attnsel-nvml-scenario/1", "init": {"nvml_error": "NVML_ERROR_LIBRARY_NOT_FOUND"}, "calls": {}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    reader = E.NvmlReader({"ATTNSEL_NVML_SCENARIO": str(path)})
    assert reader.snapshot(reader.index_for(None)) is None
    assert "NVML" in reader.environment(None)["nvml_error"]
    reader.close()
