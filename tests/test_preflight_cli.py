"""`attnsel preflight` as a CI script runs it: recorded NVML scenarios (ATTNSEL_NVML_SCENARIO,
tests/fixtures/probe/) stand in for the machine; exit 0 = no failure, 1 = a failure, 2 = bad input.

vLLM facts the expectations come from: docs/vllm-rules.md §5g (mixed-device warning, bf16 error text,
CUDA_DEVICE_ORDER), docs/probe.md, "Custom all-reduce" (custom all-reduce: 2 GPUs need P2P, more need a
full NVLink mesh), §B.8 (vLLM only warns about mixed GPUs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

PROBE = Path(__file__).parent / "fixtures" / "probe"
MODEL = "llama-3.1-8b"  # 32 attention heads, bf16 config (attention/models/llama-3.1-8b.json)


def preflight(scenario: str | Path | None, *args: str, env: dict | None = None):
    environment = {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None, "NO_COLOR": "1"}
    if scenario is not None:
        environment["ATTNSEL_NVML_SCENARIO"] = str(PROBE / scenario) if isinstance(scenario, str) else str(scenario)
    environment.update(env or {})
    return CliRunner().invoke(app, ["preflight", "--model", MODEL, *args], env=environment)


def checks_of(result) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def test_eight_nvlinked_h100s_pass_every_check_for_tp8():
    result = preflight("h100_sxm_x8_nvlink.json", "--tensor-parallel-size", "8")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    status_lines = [line for line in lines if line[:4] in ("PASS", "WARN", "FAIL")]
    assert status_lines and all(line.startswith("PASS") for line in status_lines)
    assert {line.split()[1] for line in status_lines} >= {"gpu-count", "same-model", "interconnect", "dtype", "attention"}
    assert lines[-1].startswith("Result:") and "0 fail" in lines[-1]


def test_json_output_is_only_json_with_one_entry_per_check():
    result = preflight("h100_sxm_x8_nvlink.json", "-tp", "8", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["exit_code"] == 0
    assert all(c["status"] == "pass" for c in doc["checks"])
    assert doc["explain"]["selected"] is not None
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 8


def test_more_tensor_parallel_ranks_than_gpus_fails():
    result = preflight("h200_x2_nvlink.json", "-tp", "4", "--json")
    assert result.exit_code == 1
    check = checks_of(result)["gpu-count"]
    assert check["status"] == "fail" and "2 usable GPU(s)" in check["message"] and check["hint"]


def test_a_lost_gpu_in_the_group_fails_the_gpu_count():
    result = preflight("a100_x4_gpu2_lost.json", "-tp", "4", "--json")
    assert result.exit_code == 1
    assert "GPU is lost" in checks_of(result)["gpu-count"]["message"]


def test_pcie_pair_with_p2p_keeps_custom_allreduce_for_tp2():
    """Two GPUs need P2P, not NVLink (docs/probe.md, "Custom all-reduce")."""
    result = preflight("l40s_x2_pcie.json", "-tp", "2", "--json")
    assert result.exit_code == 0
    check = checks_of(result)["interconnect"]
    assert check["status"] == "pass" and "PCIe P2P" in check["message"]


def test_pcie_pair_without_p2p_warns_that_custom_allreduce_falls_back_to_nccl(tmp_path):
    scenario = json.loads((PROBE / "l40s_x2_pcie.json").read_text())
    p2p = scenario["calls"]["nvmlDeviceGetP2PStatus"]
    p2p["0,1,0"] = p2p["0,1,1"] = 1  # READ / WRITE: NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    scenario["calls"]["nvmlDeviceGetTopologyCommonAncestor"]["0,1"] = 50  # SYS
    path = tmp_path / "l40s_no_p2p.json"
    path.write_text(json.dumps(scenario))
    result = preflight(path, "-tp", "2", "--json")
    assert result.exit_code == 0  # slower, but vLLM starts
    check = checks_of(result)["interconnect"]
    assert check["status"] == "warn" and "NCCL" in check["message"]
    assert "lacks GPU P2P capability or P2P test failed" in check["vllm_message"]


def test_more_than_two_gpus_without_full_nvlink_mesh_warn():
    result = preflight("mixed_3090x2_1080tix3.json", "-tp", "4", "--dtype", "half", "--json")
    check = checks_of(result)["interconnect"]
    assert check["status"] == "warn"
    assert "not supported on more than two PCIe-only GPUs" in check["vllm_message"]


def test_mixed_gpu_models_warn_with_vllms_text_and_fail_only_with_strict():
    # a length the 11 GiB cards hold under every release's sizing (0.34's extensible cache keeps 1 GiB
    # more free than 0.92 of an 11 GiB card): this test is about the GPU mix, not memory
    args = ("-tp", "4", "--dtype", "half", "--max-model-len", "32768", "--json")
    loose = preflight("mixed_3090x2_1080tix3.json", *args)
    check = checks_of(loose)["same-model"]
    assert check["status"] == "warn"
    assert "Please make sure to set `CUDA_DEVICE_ORDER=PCI_BUS_ID` to avoid unexpected behavior." in check["vllm_message"]
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in check["hint"]
    assert loose.exit_code == 0

    strict = preflight("mixed_3090x2_1080tix3.json", *args, "--strict")
    assert checks_of(strict)["same-model"]["status"] == "fail"
    assert strict.exit_code == 1

    ordered = preflight("mixed_3090x2_1080tix3.json", *args, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert checks_of(ordered)["same-model"]["status"] == "pass"


def test_hiding_the_other_model_makes_the_group_one_model():
    result = preflight("mixed_3090x2_1080tix3.json", "-tp", "2", "--json", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert {g["name"] for g in doc["gpus"]} == {"NVIDIA GeForce RTX 3090"}
    assert checks_of(result)["same-model"]["status"] == "pass"


def test_bf16_on_a_pre_ampere_gpu_fails_with_vllms_message():
    result = preflight("v100_x2_old_driver.json", "-tp", "2", "--dtype", "bfloat16", "--json")
    assert result.exit_code == 1
    check = checks_of(result)["dtype"]
    assert check["status"] == "fail"
    assert check["vllm_message"] == (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU "
        "has compute capability 7.0. You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
        "for example: --dtype=half."
    )


def test_an_attention_configuration_vllm_refuses_fails_with_vllms_error():
    """docs/vllm-rules.md §5f (seed era, pinned with --vllm-version seed: vLLM main of Feb 2026)."""
    result = preflight("h100_sxm_x8_nvlink.json", "--attention-backend", "FLASHINFER", "--block-size", "8",
                       "--vllm-version", "seed", "--json")
    assert result.exit_code == 1
    check = checks_of(result)["attention"]
    assert check["status"] == "fail"
    assert check["vllm_message"].startswith("User-specified --block-size 8 is incompatible with the specified --attention-backend FLASHINFER")


def test_vllm_warnings_about_the_attention_configuration_are_warnings():
    """--block-size 8 alone: the seed-era vLLM falls back from its preferred backend and logs a warning (§5f)."""
    result = preflight("h100_sxm_x8_nvlink.json", "--block-size", "8", "--vllm-version", "seed", "--json")
    assert result.exit_code == 0
    check = checks_of(result)["attention"]
    assert check["status"] == "warn"
    assert "--block-size 8 is not supported by the preferred" in check["vllm_message"]


def test_heads_not_divisible_by_tp_fail_with_vllms_message():
    result = preflight("h100_sxm_x8_nvlink.json", "-tp", "3", "--json")
    assert result.exit_code == 1
    check = checks_of(result)["model-config"]
    assert check["vllm_message"] == "Total number of attention heads (32) must be divisible by tensor parallel size (3)."


def test_no_gpu_fails_with_a_hint_and_a_target_gpu_can_be_checked_instead():
    bare = preflight("nvml_missing.json", "-tp", "2", "--json")
    assert bare.exit_code == 1
    check = checks_of(bare)["gpu-count"]
    assert check["status"] == "fail" and "--gpu NAME --num-gpus N" in check["hint"]

    target = preflight("nvml_missing.json", "-tp", "8", "--gpu", "H100", "--num-gpus", "8", "--json")
    assert target.exit_code == 0, target.output
    checks = checks_of(target)
    assert checks["gpu-count"]["status"] == "pass"
    assert checks["interconnect"]["status"] == "warn"  # links of a machine we cannot see are unknown
    assert checks["attention"]["status"] == "pass"


def test_github_format_emits_workflow_commands_for_warnings_and_failures():
    result = preflight("mixed_3090x2_1080tix3.json", "-tp", "4", "--format", "github")
    assert result.exit_code == 1  # bf16 config on a GTX 1080 Ti in the group
    lines = result.stdout.splitlines()
    errors = [line for line in lines if line.startswith("::error::")]
    warnings = [line for line in lines if line.startswith("::warning::")]
    assert any("dtype" in line for line in errors)
    assert any("same-model" in line for line in warnings)
    assert all("\n" not in line and "\r" not in line for line in errors + warnings)


def test_quiet_prints_only_problems():
    result = preflight("h100_sxm_x8_nvlink.json", "-tp", "8", "--quiet")
    assert result.exit_code == 0 and result.stdout == ""
    result = preflight("h200_x2_nvlink.json", "-tp", "4", "-q")
    assert result.exit_code == 1
    shown = [line.split()[:2] for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert ["FAIL", "gpu-count"] in shown
    assert all(status in ("WARN", "FAIL") for status, _name in shown)


@pytest.mark.parametrize("args, words", [
    (["--model", "no/such/config.json"], "not found"),
    (["--num-gpus", "4"], "--gpu NAME"),
    (["--format", "xml"], "unknown --format"),
    (["-tp", "0"], "--tensor-parallel-size"),
    (["--gpu", "H9000"], "unknown GPU name"),
    (["--kv-cache-dtype", "int3"], "Invalid kv_cache_dtype"),
])
def test_bad_input_exits_2_with_one_line(args, words):
    result = preflight("h100_sxm_x8_nvlink.json", *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0]
