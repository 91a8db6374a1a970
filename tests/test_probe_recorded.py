"""Replays of real recordings (`python -m attnsel.bench.tools.record_nvml`, saved as
tests/fixtures/probe/recorded_*.json): the report must be self-consistent, and the H200 recordings
must show what docs/gpu-facts.md measured on those machines (the peak bandwidth computed from the
recorded clocks and bus width). A missing recording fails the file."""

import pytest
from recordings import recorded

from attnsel.probe.collect import collect_from_scenario
from attnsel.probe.nvml.replay import load_scenario

# 1 x H200 and 2 x H200 (2026-11-21); README's `attnsel probe` example is the second
RECORDED = [recorded("probe", name) for name in ("recorded_h200x1.json", "recorded_h200x2.json")]


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_machine_replays_consistently(path):
    report = collect_from_scenario(load_scenario(path), {})
    assert report.source == "nvml"
    assert report.errors == ()
    assert report.gpus and all(g.uuid and g.uuid.startswith(("GPU-", "MIG-")) for g in report.gpus)
    assert all(g.compute_capability and g.memory_total_bytes for g in report.gpus)
    pairs = report.nvlink.pairs
    assert len(pairs) == len(report.gpus) * (len(report.gpus) - 1) // 2
    # vLLM's rule: fully connected iff every pair's NVLink P2P status is OK (one GPU: True).
    assert report.nvlink.fully_connected == all(p.nvlink for p in pairs)


@pytest.mark.parametrize("path", [p for p in RECORDED if "h200" in p.name], ids=lambda p: p.name)
def test_recorded_h200_matches_gpu_facts(path):
    report = collect_from_scenario(load_scenario(path), {})
    for gpu in report.gpus:
        assert gpu.name == "NVIDIA H200" and gpu.capability_str == "9.0"
        assert gpu.memory_total_bytes == 143771 * 2**20
        assert gpu.peak_memory_bandwidth_bytes_per_s == pytest.approx(4.81e12, rel=2e-3)
    for pair in report.nvlink.pairs:
        assert pair.nvlink is True and pair.topology == "NV18" and pair.pcie_topology == "PHB"
