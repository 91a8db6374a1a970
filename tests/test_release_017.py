"""`--vllm-version 0.17` answers for the vLLM 0.17.0 release (attention/versions/vllm_0_17), not for
vLLM main of February 2026 (the seed, still reachable as `--vllm-version seed`). They share the
backend classes and differ in the start-up path (0.17.0 vllm/platforms/cuda.py): check_and_update_config
settles the block size (16, a hybrid model's aligned size, an MLA kernel's), then every layer
selects with block_size=None (cuda.py:351). Checked against the real 0.17.0 wheel on CPU:
tests/fixtures/parity/parity_017.json and tests/fixtures/hybrid/hybrid_017.json replay it."""

import json

import pytest
from typer.testing import CliRunner

from attnsel.attention.versions import choose_profile
from attnsel.cli.app import app


def explain(*args):
    result = CliRunner().invoke(app, ["explain", "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_0_17_is_the_release_and_the_seed_keeps_its_own_name():
    assert choose_profile("0.17").profile.name == "vllm_0_17"
    assert choose_profile("0.17.1").profile.name == "vllm_0_17"
    assert choose_profile("seed").profile.name == choose_profile("seed-0.17").profile.name == "seed_0_17"
    assert not choose_profile("seed").profile.is_release  # never picked for a version number


@pytest.mark.parametrize("kv_cache_dtype,block_size", [("auto", 80), ("fp8", 160)])
def test_jamba_on_an_h100_runs_flash_attn_at_the_mamba_aligned_block_size(kv_cache_dtype, block_size):
    # HybridAttentionMambaModelConfig aligns the attention page to the Mamba state (80 tokens; an fp8
    # cache halves the page: 160); the layers then select without a block size, so FLASH_ATTN is valid
    doc = explain("--model", "jamba-v0.1", "--gpu", "H100", "--vllm-version", "0.17", "--kv-cache-dtype", kv_cache_dtype)
    assert (doc["selected"], doc["block_size"]) == ("FLASH_ATTN", block_size)
    # the selection raises nothing; Jamba's 52B weights then do not fit one H100 (explain's memory verdict)
    assert doc["error_phase"] == "memory" and doc["memory"]["verdict"] == "weights_do_not_fit"
    seed = explain("--model", "jamba-v0.1", "--gpu", "H100", "--vllm-version", "seed", "--kv-cache-dtype",
                   kv_cache_dtype)
    assert seed["selected"] is None and "No valid attention backend" in seed["error"]  # main selected with it


def test_a_block_size_no_backend_lists_does_not_rule_backends_out_at_selection():
    doc = explain("--head-size", "128", "--gpu", "H100", "--vllm-version", "0.17", "--block-size", "8")
    assert all("block_size not supported" not in b["reasons"] for b in doc["backends"])
    assert "block_size=None" in doc["vllm_config_repr"]


def test_mla_block_sizes_are_forced_at_config_time():
    # cuda.py:241 FlashMLA on Hopper: 64; :255 FlashInfer MLA on Blackwell, forced as the backend too
    hopper = explain("--model", "deepseek-v3", "--gpu", "H100", "--vllm-version", "0.17")
    assert (hopper["selected"], hopper["block_size"]) == ("FLASH_ATTN_MLA", 64)
    assert {"level": "info", "message": "Forcing kv cache block size to 64 for FlashMLA backend.",
            "source": "cuda.py check_and_update_config"} in hopper["logs"]
    blackwell = explain("--model", "deepseek-v3", "--gpu", "B200", "--vllm-version", "0.17")
    assert (blackwell["selected"], blackwell["block_size"]) == ("FLASHINFER_MLA", 64)
    assert explain("--model", "deepseek-v3", "--gpu", "H100", "--vllm-version", "seed")["block_size"] == 16


def test_qwen35_takes_its_ssm_state_dtype_from_the_text_config_in_the_release():
    # 0.17.0 models/config.py Qwen3_5ForConditionalGenerationConfig (the seed predates it)
    doc = explain("--model", "qwen3.5-9b", "--gpu", "H100", "--vllm-version", "0.17")
    assert doc["hybrid"]["state_dtypes"] == ["bfloat16", "float32"] and doc["block_size"] == 528
