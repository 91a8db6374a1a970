"""vLLM's start-up refusals besides the KV-cache check, each in the release's own words (its data's
`memory.checks`), and how the release counts a sliding window's blocks and sizes 0.34's extensible KV
cache (docs/memory.md). The releases come from the versions folder: every release whose memory data
holds a check is asked about it."""

from __future__ import annotations

import json
import math
import struct

import pytest
from typer.testing import CliRunner

from attnsel.attention.memory import MemoryFlags, Verdict, memory_for, weight_bytes
from attnsel.attention.memory.checkpoint import read_header
from attnsel.attention.memory.checks import derived_max_model_len
from attnsel.attention.model import derive_model_facts, load_model_config
from attnsel.attention.versions import get_profile
from attnsel.attention.versions.registry import available_profiles
from attnsel.cli.app import app
from attnsel.errors import UserInputError

ENV = {"CUDA_VISIBLE_DEVICES": None, "ATTNSEL_NVML_SCENARIO": None, "NO_COLOR": "1"}
H100 = 81559 * 2**20  # as the card reports itself


def releases_with(*path: str) -> list[str]:
    found = []
    for name in available_profiles():
        node = get_profile(name).memory or {}
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None and get_profile(name).is_release:
            found.append(name)
    return found


def preflight(release: str, *args: str) -> dict:
    result = CliRunner().invoke(app, ["preflight", "--vllm-version", release, "--gpu", "H100", "--json", *args], env=ENV)
    doc = json.loads(result.stdout)
    return {"code": result.exit_code, "check": {c["name"]: c for c in doc["checks"]}["memory"], "plan": doc["memory"]}


def plan(release: str, model: str, **flags):
    profile = get_profile(release)
    config = load_model_config(model)
    facts = derive_model_facts(config, capability=(9, 0), dtype="auto", tensor_parallel_size=1, gpu_name="NVIDIA H100",
                               profile=profile.model_rules)
    return memory_for(profile, config, facts, None, MemoryFlags(**flags), total_bytes=H100, gpu_name="NVIDIA H100")


@pytest.mark.parametrize("release", releases_with("checks", "mamba_blocks"))
def test_a_hybrid_model_is_refused_when_max_num_seqs_exceeds_its_mamba_blocks(release):
    """compilation.py resolve_cudagraph_mode_and_sizes: with full CUDA graphs every decode sequence needs a
    Mamba block; vLLM's bound is the KV pool's block count."""
    text = get_profile(release).memory["checks"]["mamba_blocks"]["text"]
    run = preflight(release, "--model", "falcon-h1-7b")
    bound, seqs = run["plan"]["mamba_block_bound"], run["plan"]["max_num_seqs"]
    assert bound == (run["plan"]["capacity_blocks"] or run["plan"]["kv_cache_blocks"])
    if seqs <= bound:
        assert run["plan"]["verdict"] == "fits"
        return
    assert run["code"] == 1 and run["plan"]["verdict"] == Verdict.MAMBA_BLOCKS
    assert run["check"]["vllm_message"] == text.format(max_num_seqs=seqs, num_blocks=bound)
    assert run["check"]["hint"].startswith(f"--max-num-seqs {bound}")
    assert preflight(release, "--model", "falcon-h1-7b", "--max-num-seqs", str(bound))["plan"]["verdict"] == "fits"
    assert preflight(release, "--model", "falcon-h1-7b", "--enforce-eager")["plan"]["verdict"] == "fits"


@pytest.mark.parametrize("release", releases_with("checks", "derived_max_len"))
def test_a_length_above_the_configs_derived_maximum_is_refused_with_vllms_text(release):
    rule = get_profile(release).memory["checks"]["derived_max_len"]
    derived = derived_max_model_len(load_model_config("llama-3.1-8b"))
    run = preflight(release, "--model", "llama-3.1-8b", "--max-model-len", str(int(derived.value) * 2))
    assert run["code"] == 1 and run["plan"]["verdict"] == Verdict.DERIVED_MAX_LEN
    assert run["check"]["vllm_message"] == rule["text"].format(
        max_model_len=int(derived.value) * 2, key="max_position_embeddings", derived=derived.shown, model_max_length=None)
    assert run["check"]["hint"].startswith(f"--max-model-len {int(derived.value)}")


def test_the_derived_maximum_applies_a_linear_rope_factor_but_not_llama3s():
    """config/model.py _get_and_verify_max_len: max_position_embeddings times the RoPE factor, except for
    the types whose length is already scaled (llama3, yarn, longrope, ...)."""
    llama = load_model_config("llama-3.1-8b")
    assert derived_max_model_len(llama).value == llama["max_position_embeddings"]
    linear = {**llama, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert derived_max_model_len(linear).value == 2 * llama["max_position_embeddings"]
    assert derived_max_model_len(linear).default_len == 2 * llama["max_position_embeddings"]
    nothing = {k: v for k, v in llama.items() if k not in ("max_position_embeddings", "rope_scaling", "rope_theta")}
    assert derived_max_model_len(nothing).value == 2048


@pytest.mark.parametrize("release", releases_with("checks", "batched_tokens_below_seqs"))
def test_fewer_batched_tokens_than_sequences_is_refused(release):
    rule = get_profile(release).memory["checks"]["batched_tokens_below_seqs"]
    run = preflight(release, "--model", "qwen3-0.6b", "--max-num-batched-tokens", "512")
    seqs = run["plan"]["max_num_seqs"]
    assert seqs > 512 and run["plan"]["verdict"] == Verdict.BATCHED_TOKENS_BELOW_SEQS
    assert run["check"]["vllm_message"] == rule["text"].format(max_num_batched_tokens=512, max_num_seqs=seqs)
    fixed = preflight(release, "--model", "qwen3-0.6b", "--max-num-batched-tokens", "512", "--max-num-seqs", "512")
    assert fixed["plan"]["verdict"] == "fits"


def test_without_chunked_prefill_max_num_batched_tokens_must_cover_max_model_len():
    release = releases_with("checks", "batched_tokens_below_len")[-1]
    refused = plan(release, "qwen3-0.6b", max_num_batched_tokens=4096, max_model_len=8192, enable_chunked_prefill=False)
    assert refused.verdict == Verdict.BATCHED_TOKENS_BELOW_LEN
    assert "max_num_batched_tokens (4096) is smaller than max_model_len (8192)" in refused.vllm_message
    # vLLM's own default is raised to max_model_len without chunked prefill (arg_utils.py)
    assert plan(release, "qwen3-0.6b", max_model_len=65536, enable_chunked_prefill=False).max_num_batched_tokens == 65536


def _window_blocks(release: str, p, window: int, length: int) -> int:
    batches = 1 if get_profile(release).memory.get("in_flight_batches", "one") == "one" else 2
    return math.ceil(min(window - 1 + batches * p.max_num_batched_tokens, length) / p.block_size) + 1


@pytest.mark.parametrize("release", [r for r in releases_with("gpu_tiers")])
def test_gpt_oss_sliding_window_layers_hold_the_window_plus_the_tokens_in_flight(release):
    """gpt-oss-20b: 12 sliding-window (128) and 12 full-attention layers, one group each. A request of
    max_model_len holds cdiv(len, block) full blocks and the window's: cdiv(min(window - 1 + in-flight
    tokens, len), block) + 1 (SlidingWindowSpec); in-flight: 2 batches from 0.26.0 (async scheduling)."""
    config = load_model_config("gpt-oss-20b")
    for tokens in (2048, 16384):
        p = plan(release, "gpt-oss-20b", max_num_batched_tokens=tokens, max_num_seqs=256, enforce_eager=True)
        per_request = math.ceil(p.max_model_len / p.block_size) + _window_blocks(release, p, config["sliding_window"], p.max_model_len)
        assert p.max_concurrency == pytest.approx(p.kv_cache_blocks / per_request)
        assert p.kv_cache_tokens == int(p.kv_cache_blocks / per_request * p.max_model_len)


def test_gemma3_groups_five_sliding_layers_to_each_global_one():
    release = releases_with("checks")[-1]
    config = load_model_config("gemma-3-12b")
    p = plan(release, "gemma-3-12b", max_model_len=32768, enforce_eager=True)
    layers = config.get("text_config", config)["num_hidden_layers"]
    full = layers // 6
    per_request = math.ceil(32768 / p.block_size) + math.ceil((layers - full) / full) * _window_blocks(release, p, 1024, 32768)
    assert p.max_concurrency == pytest.approx(p.kv_cache_blocks / per_request)


EXTENSIBLE = releases_with("extensible_kv_cache")


def capped_hint(rules: dict, utilization: float, after_warmup: bool) -> str:
    """_more_kv_cache_memory_hint's first text (extensible cache below 1.0), as the data holds it."""
    hints, step = rules["kv_cache_hints"], int(after_warmup)
    return hints["returns"][0].format(used_by=hints["words"]["used_by"][step],
                                      graphs_hint=hints["words"]["graphs_hint"][step], utilization=utilization)


@pytest.mark.parametrize("release", EXTENSIBLE)
def test_the_extensible_kv_cache_resolves_utilization_to_one_and_off_to_the_default(release):
    rules = get_profile(release).memory
    on = plan(release, "llama-3.1-8b")
    assert on.kv_sizing == "extensible" and on.gpu_memory_utilization == rules["gpu_memory_utilization_extensible"]
    off = plan(release, "llama-3.1-8b", enable_extensible_kv_cache=False)
    assert off.kv_sizing == "profiled" and off.gpu_memory_utilization == rules["gpu_memory_utilization"]
    assert on.kv_cache_tokens > off.kv_cache_tokens
    assert plan(release, "llama-3.1-8b", gpu_memory_utilization=0.5).gpu_memory_utilization == 0.5
    bytes_set = plan(release, "llama-3.1-8b", kv_cache_memory_bytes=2**34)
    reason = rules["extensible_kv_cache"]["off_when"]["kv_cache_memory_bytes"]
    assert bytes_set.kv_sizing == "profiled"
    assert any(rules["extensible_kv_cache"]["off_warning"].format(reason=reason) in note for note in bytes_set.notes)


@pytest.mark.parametrize("release", EXTENSIBLE)
def test_the_extensible_refusal_carries_the_hint_of_its_utilization(release):
    rules = get_profile(release).memory
    refused = plan(release, "llama-3.1-8b", gpu_memory_utilization=0.3)
    assert refused.verdict == Verdict.MAX_MODEL_LEN
    hint = capped_hint(rules, 0.3, after_warmup=False)
    assert f"{hint} Decreasing `max_model_len` also reduces what is needed." in refused.vllm_message
    assert plan(release, "llama-3.1-8b", gpu_memory_utilization=0.3, max_model_len=32768).verdict == Verdict.FITS


def _safetensors(path, tensors: dict) -> None:
    header = json.dumps({"__metadata__": {"format": "pt"}, **tensors}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_weights_come_from_the_safetensors_headers_when_the_folder_has_them(tmp_path):
    """Only the 8-byte length and the JSON header are read (the file here has no data at all); floats
    count at the model dtype, integer and fp8 tensors as stored."""
    config = load_model_config("qwen3-0.6b")
    facts = derive_model_facts(config, capability=(9, 0), dtype="auto", tensor_parallel_size=1, gpu_name="NVIDIA H100",
                               profile=get_profile(available_profiles()[-1]).model_rules)
    _safetensors(tmp_path / "model-00001.safetensors", {"a": {"dtype": "F32", "shape": [1000, 1000], "data_offsets": [0, 0]},
                                                         "q": {"dtype": "I32", "shape": [10, 10], "data_offsets": [0, 0]}})
    _safetensors(tmp_path / "model-00002.safetensors", {"s": {"dtype": "F8_E4M3", "shape": [256], "data_offsets": [0, 0]}})
    assert set(read_header(tmp_path / "model-00001.safetensors")) == {"__metadata__", "a", "q"}
    stored = 1000 * 1000 * 2 + 100 * 4 + 256  # bfloat16 model: the F32 tensor loads at 2 bytes
    one = weight_bytes(config, facts, model_dir=str(tmp_path))
    assert one.from_checkpoint and one.total == stored
    counted = weight_bytes(config, facts)
    two = weight_bytes(config, facts, tp=2, model_dir=str(tmp_path))
    assert two.total == int(stored * weight_bytes(config, facts, tp=2).total / counted.total)
    (tmp_path / "bad.safetensors").write_bytes(b"\x05\x00")
    with pytest.raises(UserInputError, match="not a safetensors file"):
        read_header(tmp_path / "bad.safetensors")
    fallback = weight_bytes(config, facts, model_dir=str(tmp_path))  # vLLM would fail to load; the plan counts
    assert not fallback.from_checkpoint and fallback.total == counted.total and "not a safetensors file" in fallback.note


@pytest.mark.parametrize("quant, per_param", [({"quant_method": "fp8"}, 1.0),
                                              ({"quant_method": "awq", "bits": 4}, 0.53),
                                              ({"quant_method": "gptq", "bits": 4}, 0.53)])
def test_quantized_checkpoints_count_their_linear_layers_at_the_methods_bytes(quant, per_param):
    config = {**load_model_config("llama-3.1-8b"), "quantization_config": quant}
    facts = derive_model_facts(config, capability=(9, 0), dtype="auto", tensor_parallel_size=1, gpu_name="NVIDIA H100",
                               profile=get_profile(available_profiles()[-1]).model_rules)
    quantized = weight_bytes(config, facts)
    plain = weight_bytes(load_model_config("llama-3.1-8b"), facts)
    assert quantized.linear_bytes_per_param == per_param and quantized.quantization == quant["quant_method"]
    # the embedding and the (untied) LM head stay in bfloat16, the vocabulary padded to 64
    ends = 2 * math.ceil(config["vocab_size"] / 64) * 64 * config["hidden_size"] * 2
    assert quantized.total == pytest.approx(ends + (plain.total - ends) * per_param / 2, rel=1e-6)


def test_preflight_of_a_checkpoint_folder_reads_its_safetensors_headers(tmp_path):
    config = load_model_config("qwen3-0.6b")
    (tmp_path / "config.json").write_text(json.dumps(config))
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    _safetensors(tmp_path / "model.safetensors", {"embed": {"dtype": "BF16", "shape": [vocab, hidden], "data_offsets": [0, 0]},
                                                  "body": {"dtype": "BF16", "shape": [2**28], "data_offsets": [0, 0]}})
    release = available_profiles()[-1]
    run = preflight(release, "--model", str(tmp_path))
    assert run["plan"]["weights_gib"] == round((vocab * hidden + 2**28) * 2 / 2**30, 2)
    assert any("safetensors headers" in note for note in run["plan"]["notes"])


@pytest.mark.parametrize("release", EXTENSIBLE)
def test_a_length_the_reservation_holds_but_the_committed_cache_does_not_is_refused_after_warmup(release):
    """kv_cache_planning.py shrink_kv_cache_configs (0.34.0): the check runs again on the blocks committed
    after warm-up and CUDA-graph capture (less the null block), with the after-warm-up hint."""
    rules = get_profile(release).memory
    first = plan(release, "llama-3.1-8b", gpu_memory_utilization=0.3, max_model_len=8192)
    assert first.capacity_blocks > first.kv_cache_blocks + 2
    length = (first.capacity_blocks - 2) * first.block_size  # within the reservation, beyond the commit
    refused = plan(release, "llama-3.1-8b", gpu_memory_utilization=0.3, max_model_len=length)
    assert refused.verdict == Verdict.MAX_MODEL_LEN
    hint = capped_hint(rules, 0.3, after_warmup=True)
    assert hint in refused.vllm_message
    assert refused.estimated_max_model_len <= (first.kv_cache_blocks - 1) * first.block_size


@pytest.mark.parametrize("release", EXTENSIBLE)
def test_an_old_habit_utilization_with_the_extensible_cache_gets_vllms_warning(release):
    """extensible_kv_cache.py measure_kv_cache_blocks (0.34.0): 0.9 keeps GiBs the device has free out of the
    cache; vLLM sizes at 0.9 anyway and says so."""
    warning = get_profile(release).memory["extensible_kv_cache"]["capped_warning"].split("{")[0]
    habit = plan(release, "llama-3.1-8b", gpu_memory_utilization=0.9)
    assert habit.kv_sizing == "extensible" and any(note.startswith("vLLM: " + warning) for note in habit.notes)
    assert not any(warning in note for note in plan(release, "llama-3.1-8b").notes)
    assert habit.kv_cache_tokens < plan(release, "llama-3.1-8b").kv_cache_tokens


@pytest.mark.parametrize("release", releases_with("checks", "startup_free"))
def test_a_utilization_above_what_is_free_at_start_is_refused_unless_the_cache_is_extensible(release):
    """v1/worker/utils.py request_memory: utilization x the device's total must be free when vLLM starts
    (the CUDA context already holds some); 0.34's extensible cache takes the budget as a cap only."""
    rules = get_profile(release).memory
    refused = plan(release, "llama-3.1-8b", gpu_memory_utilization=1.0, enable_extensible_kv_cache=False)
    assert refused.verdict == Verdict.FREE_MEMORY
    assert refused.vllm_message.startswith("Free memory on device cuda:0 (") and "(1.0, " in refused.vllm_message
    util = float(refused.fixes[0].split()[1])
    assert util < 1.0 and plan(release, "llama-3.1-8b", gpu_memory_utilization=util,
                               enable_extensible_kv_cache=False).verdict == Verdict.FITS
    if rules.get("extensible_kv_cache"):
        assert plan(release, "llama-3.1-8b", gpu_memory_utilization=1.0).verdict == Verdict.FITS
