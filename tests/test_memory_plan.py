"""vLLM's memory verdict before `vllm serve` runs (issue 22): `preflight` fails its `memory` check with
vLLM's own error text and the flag that fixes it, `explain --model --gpu` shows the plan, `--json`
carries it. vLLM's flow: gpu_worker.py determine_available_memory, kv_cache_planning.py (0.33) /
kv_cache_utils.py (0.24) check_enough_kv_cache_memory and estimate_max_model_len."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.attention.memory import weight_bytes
from attnsel.attention.model import derive_model_facts, load_model_config
from attnsel.attention.versions import get_profile
from attnsel.cli.app import app

SEVENTY_B = str(Path(__file__).parent / "fixtures" / "memory" / "llama-3.1-70b-shape")
ENV = {"CUDA_VISIBLE_DEVICES": None, "ATTNSEL_NVML_SCENARIO": None, "NO_COLOR": "1"}


def run(*args: str):
    return CliRunner().invoke(app, list(args), env=ENV)


def memory_check(*args: str) -> tuple[int, dict, dict]:
    result = run("preflight", *args, "--json")
    doc = json.loads(result.stdout)
    return result.exit_code, {c["name"]: c for c in doc["checks"]}["memory"], doc["memory"]


def test_a_70b_model_on_one_l4_fails_and_names_tp8_with_a_shorter_length():
    code, check, memory = memory_check("--model", SEVENTY_B, "-tp", "1", "--gpu", "L4")
    assert code == 1 and check["status"] == "fail"
    assert memory["verdict"] == "weights_do_not_fit" and memory["weights_gib"] > 120
    assert check["hint"].startswith("-tp 8 with --max-model-len")


def test_the_70b_model_on_eight_l4s_gets_vllms_max_model_len_error_with_its_estimate():
    code, check, memory = memory_check("--model", SEVENTY_B, "-tp", "8", "--gpu", "L4")
    assert code == 1 and memory["verdict"] == "max_model_len_too_long"
    assert check["vllm_message"].startswith("To serve at least one request with the model's max seq len (131072), (")
    estimate = memory["estimated_max_model_len"]
    assert f"the estimated maximum model length is {estimate}." in check["vllm_message"]
    shorter = int(check["hint"].split("--max-model-len ")[1].split()[0])
    assert shorter <= estimate and shorter % 1024 == 0
    fp8, _, _ = memory_check("--model", SEVENTY_B, "-tp", "8", "--gpu", "L4", "--kv-cache-dtype", "fp8")
    assert ("--kv-cache-dtype fp8" in check["hint"]) == (fp8 == 0)  # offered where it starts
    code, check, _ = memory_check("--model", SEVENTY_B, "-tp", "8", "--gpu", "L4", "--max-model-len", str(shorter))
    assert code == 0 and check["status"] in ("pass", "warn")


def test_deepseek_v3_does_not_fit_one_h100_nor_eight_but_fits_eight_h200s():
    code, check, memory = memory_check("--model", "deepseek-v3", "-tp", "1", "--gpu", "H100")
    assert code == 1 and memory["verdict"] == "weights_do_not_fit"
    assert "-pp 2" in check["hint"]  # 626 GiB of fp8 weights: 78 GiB per GPU at TP 8 is more than 0.9 x 79.6
    code, _, memory = memory_check("--model", "deepseek-v3", "-tp", "8", "--gpu", "H100")
    assert code == 1 and memory["verdict"] in ("weights_do_not_fit", "no_cache_memory")
    code, check, memory = memory_check("--model", "deepseek-v3", "-tp", "8", "--gpu", "H200")
    assert memory["verdict"] == "fits" and check["status"] != "fail"


def test_llama_8b_fits_an_h100_and_the_json_has_the_plan():
    code, check, memory = memory_check("--model", "llama-3.1-8b", "--gpu", "H100")
    assert code == 0 and check["status"] == "pass"
    for key in ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "verdict", "estimated_max_model_len"):
        assert key in memory
    assert memory["kv_cache_tokens"] == memory["kv_cache_blocks"] * memory["block_size"]
    assert memory["max_concurrency"] == round(memory["kv_cache_blocks"] / (131072 // memory["block_size"]), 2)


def test_a_low_utilization_refuses_the_configs_length_and_accepts_a_shorter_one():
    code, check, memory = memory_check("--model", "llama-3.1-8b", "--gpu", "H100", "--gpu-memory-utilization", "0.3")
    assert code == 1 and memory["verdict"] == "max_model_len_too_long"
    assert "(16.0 GiB KV cache is needed" in check["vllm_message"]  # 131072 tokens x 128 KiB, vLLM's format_gib
    code, _, memory = memory_check("--model", "llama-3.1-8b", "--gpu", "H100", "--gpu-memory-utilization", "0.3",
                                   "--max-model-len", "32768")
    assert code == 0 and memory["verdict"] == "fits"


def test_fp8_kv_cache_holds_twice_the_tokens_and_tp2_halves_the_weights():
    _, _, bf16 = memory_check("--model", "llama-3.1-8b", "--gpu", "H100")
    _, _, fp8 = memory_check("--model", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-dtype", "fp8")
    assert abs(fp8["kv_cache_tokens"] / bf16["kv_cache_tokens"] - 2) < 0.01
    _, _, tp2 = memory_check("--model", "llama-3.1-8b", "--gpu", "H100", "-tp", "2", "--num-gpus", "2")
    assert abs(tp2["weights_gib"] / bf16["weights_gib"] - 0.5) < 0.02


def test_enforce_eager_leaves_the_graph_estimate_to_the_kv_cache():
    _, _, graphs = memory_check("--model", "llama-3.1-8b", "--gpu", "H100")
    _, _, eager = memory_check("--model", "llama-3.1-8b", "--gpu", "H100", "--enforce-eager")
    assert eager["kv_cache_tokens"] > graphs["kv_cache_tokens"]


def test_bad_memory_flags_are_one_line_exit_2():
    result = run("preflight", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpu-memory-utilization", "1.5")
    assert result.exit_code == 2 and "--gpu-memory-utilization must be in (0, 1]" in result.output
    assert "Traceback" not in result.output
    result = run("preflight", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "0")
    assert result.exit_code == 2 and "--max-model-len" in result.output


def test_github_format_annotates_the_memory_failure():
    result = run("preflight", "--model", SEVENTY_B, "--gpu", "L4", "--format", "github")
    assert result.exit_code == 1
    assert any(line.startswith("::error") and "memory" in line for line in result.stdout.splitlines())


def test_explain_shows_the_plan_on_a_named_gpu_only():
    result = run("explain", "--model", "llama-3.1-8b", "--gpu", "H100")
    assert result.exit_code == 0 and "KV cache" in result.stdout and "maximum concurrency for 131,072" in result.stdout
    doc = json.loads(run("explain", "--model", "llama-3.1-8b", "--gpu", "H100", "--json").stdout)
    assert doc["memory"]["verdict"] == "fits"
    refused = run("explain", "--model", SEVENTY_B, "--gpu", "L4", "-tp", "8")
    assert "vLLM would not start: To serve at least one request" in refused.stdout
    assert "memory" not in json.loads(run("explain", "--model", "llama-3.1-8b", "--json").stdout)


def test_weights_from_the_config_match_the_published_parameter_counts():
    profile = get_profile("0.33")
    published = {"llama-3.1-8b": 8.03e9, "deepseek-v3": 671e9, "gpt-oss-20b": 20.9e9, "deepseek-v2-lite": 15.7e9,
                 "mistral-7b-v0.3": 7.25e9, "qwen3-next-80b-a3b": 80e9, "jamba-v0.1": 51.6e9}
    for model, params in published.items():
        config = load_model_config(model)
        facts = derive_model_facts(config, capability=(9, 0), dtype="auto", tensor_parallel_size=1, gpu_name="H100",
                                   profile=profile.model_rules)
        assert abs(weight_bytes(config, facts).parameters / params - 1) < 0.03, model


def test_explain_takes_the_length_and_utilization_the_plan_reads():
    refused = json.loads(run("explain", "--model", SEVENTY_B, "--gpu", "L4", "-tp", "8", "--json").stdout)["memory"]
    assert refused["verdict"] == "max_model_len_too_long"
    # the plan's fix: vLLM's estimate rounded down, re-checked (0.34's estimate on its reservation can
    # still fail the check after warm-up)
    shorter = refused["fixes"][0].split("--max-model-len ")[1].split()[0]
    assert int(shorter) <= refused["estimated_max_model_len"]
    fits = json.loads(run("explain", "--model", SEVENTY_B, "--gpu", "L4", "-tp", "8", "--max-model-len", shorter,
                          "--json").stdout)["memory"]
    assert fits["verdict"] == "fits" and fits["max_model_len"] == int(shorter)
    result = run("explain", "--model", "llama-3.1-8b", "--gpu", "L4", "--gpu-memory-utilization", "2")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_pipeline_stages_split_the_layers_and_the_busiest_stage_decides():
    from attnsel.attention.memory import MemoryFlags, memory_for

    profile = get_profile("0.33")
    config = load_model_config(SEVENTY_B)
    facts = derive_model_facts(config, capability=(9, 0), dtype="auto", tensor_parallel_size=2, gpu_name="H100",
                               profile=profile.model_rules)
    plans = [memory_for(profile, config, facts, None, MemoryFlags(tensor_parallel_size=2, pipeline_parallel_size=pp),
                        total_bytes=85520809984, gpu_name="H100 SXM5 80GB") for pp in (1, 2)]
    one, two = plans
    assert two.weights_gib < one.weights_gib * 0.55  # half the layers, one end of the vocabulary
    assert two.kv_cache_tokens > one.kv_cache_tokens * 2  # half the layers per block, and more room


@pytest.mark.parametrize("model, gpu", [(SEVENTY_B, "L4"), ("gemma-3-12b", "T4"), ("deepseek-v3", "H100"),
                                        ("qwen3-next-80b-a3b", "L4")])
def test_the_more_gpus_fix_preflight_names_starts_when_it_is_applied(model, gpu):
    """A suggestion that vLLM would refuse in turn is no fix: `-tp N [with --max-model-len L]` re-checked."""
    code, check, _ = memory_check("--model", model, "--gpu", gpu)
    assert code == 1
    fix = next(part for part in check["hint"].split("; ") if part.startswith("-tp "))
    words = fix.split(" (")[0].replace(" with ", " ").split()
    _, again_check, memory = memory_check("--model", model, "--gpu", gpu, *words)
    assert memory["verdict"] == "fits", (fix, memory["verdict"], again_check.get("vllm_message"))
