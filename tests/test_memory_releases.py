"""vLLM's memory verdict in each release's own words (issue 22): `explain --vllm-version X --json` quotes the
text release X raises, from the module X raises it in, with X's utilization default and scheduler defaults.
What each release says was read from its wheel with bench/tools/memory_facts.py (docs/memory.md):
- 0.17.0-0.21.0 v1/core/kv_cache_utils.py: "the models's max seq len", no "(which also controls CPU memory
  on the CPU backend)"; from 0.22.0 "the model's max seq len" and the CPU notes in both messages;
- the checks move to v1/core/kv_cache_planning.py in 0.33.0;
- config/cache.py gpu_memory_utilization: 0.9 up to 0.19.0, 0.92 from 0.20.0;
- engine/arg_utils.py get_batch_defaults: a >= 160 GiB tier (vllm serve 16384 tokens) from 0.28.0; 0.33.0
  keeps the GB10 (capability 12.1) on the small tier;
- VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: absent in 0.17.0, off in 0.18-0.19, on from 0.20.0;
- 0.34.0 ends both refusals with advice that depends on how the cache is sized
  (kv_cache_planning.py:64 _more_kv_cache_memory_hint @ 0.34.0): with its extensible KV cache (on by
  default on CUDA, utilization 1.0) "The KV cache gets what is left after ..." (or "already takes all
  device memory ..."), sized by profiling 0.33's "Try increasing `gpu_memory_utilization` ..." sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.attention.versions import get_profile, release_profiles
from attnsel.bench.tools.memory_facts import differences
from attnsel.cli.app import app

ENV = {"CUDA_VISIBLE_DEVICES": None, "ATTNSEL_NVML_SCENARIO": None, "NO_COLOR": "1"}
# every release in attention/versions, as major.minor (the seed is not a release)
RELEASES = [".".join(map(str, get_profile(name).data["vllm_release"][:2])) for name in release_profiles()]
RECORDED = json.loads((Path(__file__).parent / "fixtures" / "memory" / "wheel_facts.json").read_text())
# the releases whose wheel facts are recorded (tests/test_parity_recorded.py's recording gate fails for one that is not)
READ = [release for release in RELEASES if f"{release}.0" in RECORDED]


def since(minor: int) -> set[str]:
    return {r for r in RELEASES if int(r.split(".")[1]) >= minor}


OLD_TEXTS = set(RELEASES) - since(22)
PLANNING_MODULE = since(33)
SIZING_HINT = since(34)  # {hint}: the advice the release's sizing mode gives
UTILIZATION_09 = set(RELEASES) - since(20)
HUGE_TIER = since(28)
NO_GRAPH_ESTIMATE = set(RELEASES) - since(20)


def memory(release: str, *args: str) -> dict:
    result = CliRunner().invoke(app, ["explain", "--vllm-version", release, "--json", *args], env=ENV)
    doc = json.loads(result.stdout)
    plan = doc["memory"]
    # explain's exit code follows the memory verdict (README: 0 means vLLM would start), and so does the JSON
    refused = plan["verdict"] != "fits"
    assert result.exit_code == doc["exit_code"] == (1 if refused else 0), result.output
    if refused and plan["vllm_message"]:
        assert doc["error"] == plan["vllm_message"] and plan["vllm_message"] in result.stderr
    return plan


def llama_8b(release: str, *args: str) -> dict:
    return memory(release, "--model", "llama-3.1-8b", "--gpu", "H100", *args)


@pytest.mark.parametrize("release", RELEASES)
def test_the_max_model_len_refusal_is_in_the_releases_own_words(release):
    plan = llama_8b(release, "--gpu-memory-utilization", "0.3")
    assert plan["verdict"] == "max_model_len_too_long"
    text = plan["vllm_message"]
    assert "(16.0 GiB KV cache is needed" in text and "(131072)" in text
    assert f"the estimated maximum model length is {plan['estimated_max_model_len']}. " in text
    if release in OLD_TEXTS:
        assert "the models's max seq len" in text and "CPU backend" not in text
    elif release in SIZING_HINT:  # the advice of the sizing the plan models: 0.34's extensible cache, 0.3 given
        hints = get_profile(release).memory["kv_cache_hints"]
        advice = (hints["returns"][0].format(used_by=hints["words"]["used_by"][0], graphs_hint=hints["words"]["graphs_hint"][0],
                                             utilization=0.3) if plan["kv_sizing"] == "extensible" else hints["returns"][2])
        assert "the model's max seq len" in text and text.count(advice) == 1
        assert "Decreasing `max_model_len` also reduces what is needed." in text and "{" not in text
    else:
        assert "the model's max seq len" in text and "(which also controls CPU memory on the CPU backend)" in text
    module = "kv_cache_planning.py" if release in PLANNING_MODULE else "kv_cache_utils.py"
    assert plan["vllm_source"] == f"vllm/v1/core/{module} _check_enough_kv_cache_memory"


@pytest.mark.parametrize("release", RELEASES)
def test_no_room_for_any_cache_block_is_in_the_releases_own_words(release):
    plan = llama_8b(release, "--gpu-memory-utilization", "0.2")  # 15.9 GiB for 15 GiB of weights and the profile run
    assert plan["verdict"] == "no_cache_memory"
    assert plan["vllm_message"].startswith("No available memory for the cache blocks. ")
    assert "{" not in plan["vllm_message"]
    extensible = plan["kv_sizing"] == "extensible"  # 0.34's advice: what is left after the model and activations
    assert ("CPU memory reservation on the CPU backend" in plan["vllm_message"]) == (release not in OLD_TEXTS
                                                                                   and not extensible)


@pytest.mark.parametrize("release", READ)
def test_the_utilization_default_is_the_releases(release):
    plan = llama_8b(release)
    # as read from the wheel: 0.34's default is 1.0 with the extensible KV cache (on by default on CUDA) and
    # DEFAULT_GPU_MEMORY_UTILIZATION without it (config/cache.py:186, 494-501 @ 0.34.0)
    facts = RECORDED[f"{release}.0"]
    if plan["kv_sizing"] == "extensible":
        assert plan["gpu_memory_utilization"] == facts["gpu_memory_utilization_extensible"]
        plan = llama_8b(release, "--gpu-memory-utilization", str(facts["gpu_memory_utilization"]))
    assert plan["gpu_memory_utilization"] == facts["gpu_memory_utilization"]
    assert plan["gpu_memory_utilization"] == (0.9 if release in UTILIZATION_09 else 0.92)


@pytest.mark.parametrize("release", RELEASES)
def test_vllm_serves_16384_tokens_a_step_on_a_b200_from_the_release_with_the_160_gib_tier(release):
    plan = memory(release, "--model", "llama-3.1-8b", "--gpu", "B200")
    assert plan["max_num_batched_tokens"] == (16384 if release in HUGE_TIER else 8192)
    assert plan["max_num_seqs"] == 1024


@pytest.mark.parametrize("release", ["0.32", "0.33"])
def test_a_gb10_stays_on_the_small_defaults_from_033(release):
    plan = memory(release, "--model", "llama-3.1-8b", "--gpu", "GB10")
    small = release in since(33)
    assert (plan["max_num_batched_tokens"], plan["max_num_seqs"]) == ((2048, 256) if small else (8192, 1024))


def preflight(release: str, *args: str) -> tuple[int, dict, dict]:
    result = CliRunner().invoke(app, ["preflight", "--vllm-version", release, "--model", "llama-3.1-8b", "--gpu", "H100",
                                      *args, "--json"], env=ENV)
    doc = json.loads(result.stdout)
    return result.exit_code, {c["name"]: c for c in doc["checks"]}["memory"], doc["memory"]


@pytest.mark.parametrize("release", ["0.17", "0.19", "0.20", "0.33"])
def test_the_graph_estimate_comes_off_the_kv_cache_only_where_the_release_takes_it(release):
    (_, _, graphs), (_, _, eager) = preflight(release), preflight(release, "--enforce-eager")
    if release in NO_GRAPH_ESTIMATE:
        assert eager["kv_cache_tokens"] == graphs["kv_cache_tokens"]
    else:
        assert eager["kv_cache_tokens"] > graphs["kv_cache_tokens"]


def test_preflight_checks_memory_for_017():
    code, check, _ = preflight("0.17", "--gpu-memory-utilization", "0.3")
    assert code == 1 and check["status"] == "fail"
    assert "the models's max seq len (131072)" in check["vllm_message"]


def test_every_releases_memory_data_says_what_its_wheel_says():
    """tests/fixtures/memory/wheel_facts.json: bench/tools/memory_facts.py's reading of each wheel (--record)."""
    assert {v.rsplit(".", 1)[0] for v in RECORDED} <= set(RELEASES)  # no recording of a release attnsel has not
    for version, facts in RECORDED.items():
        assert differences(facts, get_profile(version).memory) == [], version
