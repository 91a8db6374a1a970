"""collect_probe over NVML scenarios replayed through our own facade (tests/fixtures/probe/*.json).

Expectations come from the reference docs: vLLM's is_fully_connected and log_warnings (seed
cuda.py, docs/vllm-rules.md §5g), the custom all-reduce rule (docs/probe.md, "Custom all-reduce"), the GPU facts
(docs/gpu-facts.md) and the issues named at each test."""

import json
import sys
import time
from pathlib import Path

import pytest

from attnsel.probe import capability_facts, collect
from attnsel.probe.collect import collect_from_scenario, collect_probe
from attnsel.probe.mixed_gpus import VLLM_MIXED_GPU_WARNING
from attnsel.probe.nvml import P2P_CAPS_INDEX, torch_cuda
from attnsel.probe.nvml.replay import ReplayFacade, ReplayTorch, load_scenario

FIXTURES = Path(__file__).parent / "fixtures" / "probe"
MIB = 1 << 20


def scenario(name):
    return load_scenario(FIXTURES / name)


def probe(name, **env):
    return collect_from_scenario(scenario(name), env)


# --- homogeneous NVLink box ---------------------------------------------------------------------


def test_hgx_h100_reports_all_eight_gpus_fully_connected():
    report = probe("h100_sxm_x8_nvlink.json")
    assert report.source == "nvml"
    assert [g.index for g in report.gpus] == list(range(8))
    assert [g.physical_index for g in report.gpus] == list(range(8))
    assert {g.capability_str for g in report.gpus} == {"9.0"}
    assert len(report.nvlink.pairs) == 28
    assert {p.topology for p in report.nvlink.pairs} == {"NV18"}
    assert report.nvlink.fully_connected is True
    assert report.nvlink.custom_allreduce_on is True
    assert report.mixed_gpus is False
    assert report.warnings == () and report.errors == ()


def test_h100_peak_bandwidth_is_bus_width_times_clock():
    # docs/measuring.md §5: 5120-bit / 8 x 2619 MHz x 2 = 3.35 TB/s for the H100 SXM.
    gpu = probe("h100_sxm_x8_nvlink.json").gpus[0]
    assert gpu.peak_memory_bandwidth_bytes_per_s == pytest.approx(3.352e12, rel=1e-3)
    assert gpu.peak_memory_bandwidth_source == "nvml"


def test_visible_subset_maps_cuda_ordinals_to_nvml_indices():
    report = probe("h100_sxm_x8_nvlink.json", CUDA_VISIBLE_DEVICES="7,3")
    assert [(g.index, g.physical_index) for g in report.gpus] == [(0, 7), (1, 3)]
    assert report.nvlink.physical_ids == (7, 3)
    assert report.physical_gpu_count == 8
    [pair] = report.nvlink.pairs
    assert (pair.a, pair.b, pair.physical_a, pair.physical_b) == (0, 1, 7, 3)


def test_h200_pair_matches_gpu_facts():
    # docs/gpu-facts.md §1-§2: NVIDIA H200, 143771 MiB, 6016-bit x 3201 MHz -> 4.81 TB/s, NV18, ancestor level 30.
    report = collect_from_scenario(scenario("h200_x2_nvlink.json"), {}, measure_p2p=True)
    gpu = report.gpus[0]
    assert gpu.name == "NVIDIA H200" and gpu.memory_total_bytes == 143771 * MIB
    assert gpu.peak_memory_bandwidth_bytes_per_s == pytest.approx(4.81e12, rel=2e-3)
    [pair] = report.nvlink.pairs
    assert pair.topology == "NV18" and pair.pcie_topology == "PHB"
    assert pair.measured_gbps == 391.0
    assert report.nvlink.custom_allreduce_on is True


# --- mixed GPUs (vllm#19045, #16740) -------------------------------------------------------------


def test_mixed_box_warns_with_vllms_exact_text_over_visible_gpus():
    report = probe("mixed_3090x2_1080tix3.json")
    assert report.mixed_gpus is True
    names = ", ".join(g.name for g in report.gpus)
    assert VLLM_MIXED_GPU_WARNING % names in report.warnings
    assert (
        "Detected different devices in the system: " + names + ". Please make sure to set "
        "`CUDA_DEVICE_ORDER=PCI_BUS_ID` to avoid unexpected behavior."
    ) in report.warnings


def test_two_visible_3090s_are_not_mixed_even_though_vllm_would_warn():
    # vllm#19045: CUDA_VISIBLE_DEVICES=0,1 (the 3090s under FASTEST_FIRST) and vLLM still warns.
    report = probe("mixed_3090x2_1080tix3.json", CUDA_VISIBLE_DEVICES="0,1")
    assert {g.name for g in report.gpus} == {"NVIDIA GeForce RTX 3090"}
    assert [g.physical_index for g in report.gpus] == [1, 3]
    assert report.mixed_gpus is False
    assert report.warnings == ()
    assert report.vllm_device_warning and report.vllm_device_warning.startswith("Detected different devices")
    assert any("vllm#19045" in n for n in report.notes)
    assert report.nvlink.fully_connected is True  # the bridged pair
    assert report.nvlink.pairs[0].topology == "NV4"


def test_pci_bus_id_order_silences_the_warning_but_not_the_fact():
    report = probe("mixed_3090x2_1080tix3.json", CUDA_VISIBLE_DEVICES="0,1", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert [g.physical_index for g in report.gpus] == [0, 1]
    assert report.mixed_gpus is True
    assert report.warnings == ()
    assert report.vllm_device_warning is None


def test_partial_nvlink_is_not_fully_connected_and_disables_custom_allreduce():
    report = probe("mixed_3090x2_1080tix3.json")
    assert report.nvlink.fully_connected is False
    assert report.nvlink.custom_allreduce_on is False
    assert "not supported on more than two PCIe-only GPUs" in report.nvlink.custom_allreduce


def test_h100_name_variants_are_one_model():
    # vllm#16740: "NVIDIA H100 80GB HBM3" and "NVIDIA H100" fired the warning; same PCI device id here.
    data = scenario("h100_sxm_x8_nvlink.json")
    data["calls"]["nvmlDeviceGetName"]["1"] = "NVIDIA H100"
    report = collect_from_scenario(data, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert report.mixed_gpus is False
    assert report.warnings == ()
    assert report.vllm_device_warning is not None  # vLLM compares raw names


def test_h100_and_a100_are_mixed_when_nvml_gives_no_pci_device_id():
    # issue 11: NVML in a VM answers pciDeviceId 0 for both GPUs; 0 means unknown, not "the same id".
    report = probe("h100_a100_pci_id_zero.json")
    assert [g.pci_device_id for g in report.gpus] == [None, None]
    assert report.mixed_gpus is True
    assert report.warnings == (VLLM_MIXED_GPU_WARNING % "NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-80GB",)


def test_equal_pci_ids_never_outvote_a_different_capability_or_table_entry():
    data = scenario("h100_a100_pci_id_zero.json")
    for key in ("0", "1"):
        data["calls"]["nvmlDeviceGetPciInfo"][key]["pciDeviceId"] = 0x233010DE  # the same (wrong) id on both
    assert collect_from_scenario(data, {}).mixed_gpus is True
    data["calls"]["nvmlDeviceGetCudaComputeCapability"]["1"] = [9, 0]  # same CC, still an A100 by the table
    assert collect_from_scenario(data, {}).mixed_gpus is True


# --- PCIe only ----------------------------------------------------------------------------------


def test_pcie_pair_has_p2p_but_no_nvlink():
    report = probe("l40s_x2_pcie.json")
    [pair] = report.nvlink.pairs
    assert pair.nvlink is False and pair.pcie_read is True and pair.pcie_write is True
    assert pair.topology == "PXB"
    assert report.nvlink.fully_connected is False
    assert "NOT_SUPPORTED" in report.nvlink.reason
    # Two GPUs need only P2P, not an NVLink mesh (docs/probe.md, "Custom all-reduce").
    assert report.nvlink.custom_allreduce_on is True


# --- NVML missing / torch fallback ---------------------------------------------------------------


def test_nvml_missing_without_torch_says_so_plainly():
    report = probe("nvml_missing.json")
    assert report.source == "none"
    assert report.gpus == ()
    assert report.nvlink.fully_connected is None
    assert any("NVML Shared Library Not Found" in e for e in report.errors)
    assert any("torch is not installed" in e for e in report.errors)
    assert any("No GPU found" in n for n in report.notes)


def test_nvml_missing_falls_back_to_torch():
    report = probe("nvml_missing_torch_a10g.json")
    assert report.source == "torch"
    [gpu] = report.gpus
    assert gpu.name == "NVIDIA A10G" and gpu.capability_str == "8.6"
    assert gpu.physical_index is None
    assert gpu.uuid.startswith("GPU-")
    # No bus width without NVML: probe/gpu_table.py gives the A10G's 600 GB/s datasheet peak.
    assert gpu.peak_memory_bandwidth_source == "table"
    assert gpu.peak_memory_bandwidth_bytes_per_s == pytest.approx(600e9)
    assert report.nvlink.fully_connected is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the driver check is Linux-only")
def test_no_cuda_driver_means_torch_is_never_imported(monkeypatch):
    # A machine without libnvidia-ml has no libcuda either: importing torch (~2 s) to hear "no GPU" is skipped.
    monkeypatch.setattr(torch_cuda, "CUDA_DRIVER_LIBRARY", "libcuda-absent-for-this-test.so.1")
    monkeypatch.setattr(torch_cuda.RealTorch, "inventory", lambda self: pytest.fail("torch.cuda was asked"))
    report = collect_probe({}, nvml=ReplayFacade(scenario("nvml_missing.json")), torch=torch_cuda.RealTorch())
    assert report.source == "none"
    assert any("NVML Shared Library Not Found" in e for e in report.errors)
    assert any("libcuda-absent-for-this-test.so.1 cannot be loaded" in e for e in report.errors)


def test_with_a_cuda_driver_torch_is_still_the_fallback(monkeypatch):
    monkeypatch.setattr(collect, "cuda_driver_missing", lambda: None)
    devices = [{"name": "NVIDIA A10G", "major": 8, "minor": 6, "total_memory": 24 << 30}]
    monkeypatch.setattr(torch_cuda.RealTorch, "inventory",
                        lambda self: {"version": "2.11", "cuda": "13.0", "devices": devices})
    report = collect_probe({}, nvml=ReplayFacade(scenario("nvml_missing.json")), torch=torch_cuda.RealTorch())
    assert report.source == "torch"
    assert [g.name for g in report.gpus] == ["NVIDIA A10G"]


def test_driver_not_loaded_and_torch_sees_nothing():
    report = probe("driver_not_loaded_torch_no_gpu.json")
    assert report.source == "none"
    assert any("Driver Not Loaded" in e for e in report.errors)


# --- faults --------------------------------------------------------------------------------------


def test_one_lost_gpu_leaves_the_others_reported():
    report = probe("a100_x4_gpu2_lost.json")
    assert len(report.gpus) == 4
    lost = [g for g in report.gpus if g.error]
    assert [g.physical_index for g in lost] == [2]
    assert "GPU is lost" in lost[0].error
    healthy = [g for g in report.gpus if not g.error]
    assert {g.name for g in healthy} == {"NVIDIA A100-SXM4-80GB"}
    assert any("GPU is lost" in e and "NVML 2" in e for e in report.errors)
    # vLLM catches the NVMLError and returns False.
    assert report.nvlink.fully_connected is False
    assert "GPU is lost" in report.nvlink.reason


def test_a_query_raising_a_non_nvml_exception_is_unknown_for_that_query_only():
    # docs/gpu-facts.md §2: NVML_P2P_CAPS_INDEX_READ == (0,) made nvmlDeviceGetP2PStatus raise ctypes.ArgumentError.
    report = probe("v100_x2_old_driver.json")
    [pair] = report.nvlink.pairs
    assert pair.pcie_read is None and pair.pcie_write is True and pair.nvlink is True
    assert report.nvlink.fully_connected is True
    assert any("ArgumentError" in w or "wrong type" in w for w in report.warnings)


def test_function_not_found_becomes_a_note_and_table_fallback():
    report = probe("v100_x2_old_driver.json")
    assert any("nvmlDeviceGetNumGpuCores" in n and "Function Not Found" in n for n in report.notes)
    gpu = report.gpus[0]
    assert gpu.memory_bus_width_bits is None
    assert gpu.peak_memory_bandwidth_source == "table"
    assert report.errors == ()


class _ExplodingMidQuery(ReplayFacade):
    """NVML answering normally, then raising something unexpected for one GPU."""

    def call(self, function, *args):
        if function == "nvmlDeviceGetMemoryInfo" and args and args[0] == 1:
            raise RuntimeError("driver hiccup")
        return super().call(function, *args)


def test_nvml_raising_mid_query_does_not_hide_other_gpus():
    data = scenario("l40s_x2_pcie.json")
    report = collect_probe({}, nvml=_ExplodingMidQuery(data), torch=ReplayTorch(data))
    assert len(report.gpus) == 2
    assert report.gpus[0].error is None and report.gpus[0].memory_total_bytes is not None
    assert report.gpus[1].memory_total_bytes is None
    assert "driver hiccup" in report.gpus[1].error


def test_nvml_count_failing_falls_back_instead_of_crashing():
    data = scenario("l40s_x2_pcie.json")
    data["calls"]["nvmlDeviceGetCount"][""] = {"nvml_error": "NVML_ERROR_UNKNOWN"}
    report = collect_from_scenario(data, {})
    assert report.source == "none"
    assert any("could not count" in e for e in report.errors)


def test_p2p_queries_pass_integer_caps_indices():
    # docs/gpu-facts.md §2: pass the integer, never nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ tuple.
    assert all(type(v) is int for v in P2P_CAPS_INDEX.values())
    facade = ReplayFacade(scenario("l40s_x2_pcie.json"))
    collect_probe({}, nvml=facade, torch=ReplayTorch({}))
    asked = {key for fn, key in facade.asked if fn == "nvmlDeviceGetP2PStatus"}
    assert asked == {"0,1,0", "0,1,1", "0,1,2", "0,1,3"}


# --- UUID / MIG CUDA_VISIBLE_DEVICES (vllm#41848, PR#51716, PR#41776) -----------------------------


def test_mig_uuid_reports_the_slice_memory_not_the_parent():
    data = scenario("a100_x2_mig.json")
    mig_uuid = data["calls"]["nvmlDeviceGetUUID"]["0:1"]
    report = collect_from_scenario(data, {"CUDA_VISIBLE_DEVICES": mig_uuid})
    [gpu] = report.gpus
    assert gpu.is_mig and gpu.uuid == mig_uuid
    assert gpu.parent_uuid == data["calls"]["nvmlDeviceGetUUID"]["0"]
    assert gpu.physical_index == 0
    assert gpu.memory_total_bytes == data["calls"]["nvmlDeviceGetMemoryInfo"]["0:1"]["total"]
    assert gpu.memory_total_bytes < data["calls"]["nvmlDeviceGetMemoryInfo"]["0"]["total"]
    assert gpu.capability_str == "8.0"
    assert report.nvlink.world_size == 1
    assert report.nvlink.fully_connected is True  # vLLM: no pair to check
    assert any("vllm#41848" in n for n in report.notes)


def test_legacy_mig_form_and_whole_gpu_beside_it():
    data = scenario("a100_x2_mig.json")
    parent = data["calls"]["nvmlDeviceGetUUID"]["0"]
    report = collect_from_scenario(data, {"CUDA_VISIBLE_DEVICES": f"MIG-{parent}/1/0"})
    assert report.gpus[0].uuid == data["calls"]["nvmlDeviceGetUUID"]["0:0"]
    whole = collect_from_scenario(data, {"CUDA_VISIBLE_DEVICES": data["calls"]["nvmlDeviceGetUUID"]["1"][:12]})
    assert [(g.physical_index, g.is_mig) for g in whole.gpus] == [(1, False)]


def test_short_uuid_prefixes_resolve_or_fail_like_cuda():
    name = "h200_x4_shared_uuid_prefix.json"
    ambiguous = probe(name, CUDA_VISIBLE_DEVICES="GPU-5a1c")
    assert ambiguous.gpus == ()
    assert ambiguous.invalid_visible_entry == "GPU-5a1c"
    assert ambiguous.warnings
    assert [g.physical_index for g in probe(name, CUDA_VISIBLE_DEVICES="GPU-5a1c9").gpus] == [3]
    assert [g.physical_index for g in probe(name, CUDA_VISIBLE_DEVICES="GPU-9d4c,GPU-5a1c3").gpus] == [2, 1]


def test_empty_cuda_visible_devices_means_no_gpu_but_nvml_works():
    report = probe("h100_sxm_x8_nvlink.json", CUDA_VISIBLE_DEVICES="")
    assert report.source == "nvml" and report.gpus == ()
    assert report.physical_gpu_count == 8
    assert any("none is visible" in n for n in report.notes)


# --- vLLM capability facts (docs/vllm-rules.md §5g) -------------------------------------------------------


def test_capability_facts_follow_vllm():
    mixed = probe("mixed_3090x2_1080tix3.json", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    gtx = capability_facts(mixed.gpus[0])
    assert gtx["supported_dtypes"] == ["float16", "float32"]
    assert gtx["supports_fp8"] is False
    assert gtx["bf16_error"] == (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        "Your NVIDIA GeForce GTX 1080 Ti GPU has compute capability 6.1. You can use float16 instead by "
        "explicitly setting the `dtype` flag in CLI, for example: --dtype=half."
    )
    rtx = capability_facts(mixed.gpus[1])
    assert rtx["supported_dtypes"] == ["bfloat16", "float16", "float32"] and rtx["bf16_error"] is None
    assert rtx["supports_fp8"] is False  # 8.6 < 8.9
    assert capability_facts(probe("l40s_x2_pcie.json").gpus[0])["supports_fp8"] is True  # 8.9


def test_scenario_env_var_selects_the_replay(tmp_path):
    report = collect_probe({"ATTNSEL_NVML_SCENARIO": str(FIXTURES / "l40s_x2_pcie.json")})
    assert [g.name for g in report.gpus] == ["NVIDIA L40S", "NVIDIA L40S"]


def test_a_replayed_call_can_hang_and_then_answer():
    # What the hangs/ scenarios use for an NVML call that hangs (a GPU fallen off the bus).
    data = scenario("h100_sxm_x8_nvlink.json")
    data["calls"]["nvmlDeviceGetMemoryInfo"]["5"] = {"delay_s": 0.3, "answer": {"nvml_error": "NVML_ERROR_GPU_IS_LOST"}}
    start = time.perf_counter()
    report = collect_from_scenario(data, {})
    assert time.perf_counter() - start >= 0.3
    assert report.gpus[5].error == "GPU is lost (NVML_ERROR_GPU_IS_LOST)"


def test_every_fixture_is_a_valid_scenario():
    for path in FIXTURES.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["schema"] == "attnsel-nvml-scenario/1", path.name
        assert collect_from_scenario(data, {}).source in {"nvml", "torch", "none"}


@pytest.mark.parametrize("name", ["h100_sxm_x8_nvlink.json", "h200_x2_nvlink.json", "a100_x2_mig.json"])
def test_no_nvml_query_is_asked_twice(name):
    # Each NVML call costs driver time; the probe asks each question once (docs/probe.md, "Speed").
    data = scenario(name)
    facade = ReplayFacade(data)
    collect_probe({}, nvml=facade, torch=ReplayTorch(data))
    assert facade.asked and len(facade.asked) == len(set(facade.asked))
