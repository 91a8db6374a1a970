"""`attnsel probe` through the CLI: exit codes (README "Exit codes"), --json schema, one-line errors,
and no torch import on the NVML path. NVML is replayed from tests/fixtures/probe via
ATTNSEL_NVML_SCENARIO, the CLI's documented switch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

FIXTURES = Path(__file__).parent / "fixtures" / "probe"


def run(args, scenario, **env):
    env = {"ATTNSEL_NVML_SCENARIO": str(FIXTURES / scenario), "CUDA_VISIBLE_DEVICES": None,
           "CUDA_DEVICE_ORDER": None, **env}
    return CliRunner().invoke(app, ["probe", *args], env=env)


def assert_one_line_error(result, code):
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output + result.stderr


def test_json_has_the_documented_schema():
    result = run(["--json"], "h100_sxm_x8_nvlink.json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["source"] == "nvml"
    assert data["driver_version"] == "580.95.05"
    gpu = data["gpus"][0]
    for key in ("index", "physical_index", "name", "uuid", "compute_capability", "memory_total_bytes"):
        assert key in gpu
    assert gpu["compute_capability"] == "9.0"
    assert gpu["uuid"].startswith("GPU-")
    assert data["nvlink"]["fully_connected"] is True
    assert len(data["nvlink"]["pairs"]) == 28
    assert data["mixed_gpus"] is False
    assert data["warnings"] == [] and data["errors"] == []
    assert gpu["vllm"]["supports_fp8"] is True


def test_json_with_nvml_missing_uses_nulls_not_a_crash():
    result = run(["--json"], "nvml_missing.json")
    assert result.exit_code == 0  # a plain probe that finds nothing still succeeds
    data = json.loads(result.stdout)
    assert data["source"] == "none" and data["gpus"] == []
    assert data["nvlink"]["fully_connected"] is None
    assert data["errors"]


def test_table_shows_gpus_topology_and_verdicts():
    result = run([], "mixed_3090x2_1080tix3.json", CUDA_VISIBLE_DEVICES="0,1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "NVIDIA GeForce RTX 3090" in out
    assert "NV4" in out
    assert "NVLink fully connected (vLLM is_fully_connected): yes" in out
    assert "Mixed GPU models: no" in out


def test_table_prints_device_data_verbatim():
    # rich would turn ":AB:" in a PCI bus id into an emoji if cells were markup.
    result = run([], "h100_sxm_x8_nvlink.json")
    assert "00000000:AB:00.0" in result.stdout


def test_measure_p2p_shows_the_copy_bandwidth():
    # docs/gpu-facts.md §2: 1 GiB copy_ GPU 0 -> GPU 1 on two H200 ran at 391 GB/s (replayed here).
    result = run(["--measure-p2p", "--json"], "h200_x2_nvlink.json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["nvlink"]["pairs"][0]["measured_gbps"] == 391.0
    table = run(["--measure-p2p"], "h200_x2_nvlink.json")
    assert "391.0" in table.stdout


def test_table_without_gpu_says_so_plainly():
    result = run([], "nvml_missing.json")
    assert result.exit_code == 0
    assert "No GPU" in result.stdout


@pytest.mark.parametrize(
    "args, scenario, env, code",
    [
        (["--require-gpus", "8"], "h100_sxm_x8_nvlink.json", {}, 0),
        (["--require-gpus", "9"], "h100_sxm_x8_nvlink.json", {}, 1),
        (["--require-gpus", "4"], "a100_x4_gpu2_lost.json", {}, 1),  # a lost GPU is not usable
        (["--require-capability", "9.0"], "h100_sxm_x8_nvlink.json", {}, 0),
        (["--require-capability", "8.0"], "mixed_3090x2_1080tix3.json", {}, 1),
        (["--require-nvlink"], "h100_sxm_x8_nvlink.json", {}, 0),
        (["--require-nvlink"], "l40s_x2_pcie.json", {}, 1),
        (["--require-same-model"], "mixed_3090x2_1080tix3.json", {}, 1),
        (["--require-same-model"], "mixed_3090x2_1080tix3.json", {"CUDA_VISIBLE_DEVICES": "0,1"}, 0),
        (["--require-gpus", "1"], "nvml_missing.json", {}, 1),
    ],
)
def test_requirements_exit_codes(args, scenario, env, code):
    result = run(args, scenario, **env)
    if code == 0:
        assert result.exit_code == 0, result.output
    else:
        assert_one_line_error(result, 1)
        assert "requirement failed" in result.stderr


def test_failed_requirement_still_prints_the_json_report():
    result = run(["--json", "--require-nvlink"], "l40s_x2_pcie.json")
    assert_one_line_error(result, 1)
    data = json.loads(result.stdout)
    assert data["requirements"] == [
        {"check": "--require-nvlink", "ok": False, "detail": data["requirements"][0]["detail"]}
    ]


@pytest.mark.parametrize("args", [["--require-capability", "nine"], ["--require-capability", "9.10"],
                                  ["--require-capability", "99.0"]])
def test_bad_capability_is_exit_2_with_one_line(args):
    assert_one_line_error(run(args, "h100_sxm_x8_nvlink.json"), 2)


@pytest.mark.parametrize("count", ["0", "two"])
def test_bad_gpu_count_is_exit_2(count):
    result = run(["--require-gpus", count], "h100_sxm_x8_nvlink.json")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "--require-gpus" in result.output


def test_missing_scenario_file_is_exit_2(tmp_path):
    result = run([], "does-not-exist.json")
    assert_one_line_error(result, 2)


def test_probe_json_in_a_subprocess_never_imports_torch():
    env = {"ATTNSEL_NVML_SCENARIO": str(FIXTURES / "h200_x2_nvlink.json"), "PATH": "/usr/bin:/bin"}
    if os.environ.get("PYTHONPATH"):  # the GPU machine imports attnsel through PYTHONPATH
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "attnsel", "probe", "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["gpus"][0]["name"] == "NVIDIA H200"
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "attnsel.probe.collect" in imported
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}
    # An option left unset costs no pydantic (~0.08 s): Typer's coercer is built only for a given value.
    assert not {m for m in imported if m == "pydantic" or m.startswith("pydantic.")}
