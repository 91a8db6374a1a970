"""Hybrid models on the command line: the Mamba cache flags vLLM parses per version (checked before
any work, exit 2), and the flags line, which advises no --block-size for a hybrid model (vLLM
computes it: interface.py `_align_hybrid_block_size`) but shows what an explicit one would do."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

runner = CliRunner()


def explain(*args: str):
    return runner.invoke(app, ["explain", "--model", "jamba-v0.1", "--gpu", "H100", *args])


@pytest.mark.parametrize("args, says", [
    (["--vllm-version", "0.33", "--mamba-cache-mode", "all"], "no --mamba-cache-mode 'all'; use one of align, none"),
    (["--vllm-version", "0.24", "--mamba-cache-mode", "prefix"], "use one of all, align, none"),
    (["--vllm-version", "seed", "--mamba-ssm-cache-dtype", "bfloat16"], "use one of auto, float32, float16"),
    (["--vllm-version", "0.33", "--mamba-cache-dtype", "fp8"], "no --mamba-cache-dtype 'fp8'"),
])
def test_a_value_the_version_does_not_parse_is_one_line_and_exit_2(args, says):
    result = explain(*args)
    assert result.exit_code == 2
    assert says in result.output and "Traceback" not in result.output


def test_prefix_caching_flag_sets_the_cache_mode_per_version():
    on_024 = json.loads(explain("--vllm-version", "0.24", "--enable-prefix-caching", "--json").stdout)["hybrid"]
    off_033 = json.loads(explain("--vllm-version", "0.33", "--no-enable-prefix-caching", "--json").stdout)["hybrid"]
    # 0.24 MambaModelConfig: Jamba supports Mamba prefix caching, so 'all' (aligned to the 2048 chunk)
    assert (on_024["prefix_caching"], on_024["mamba_cache_mode"], on_024["block_size"]) == (True, "all", 2048)
    assert (off_033["prefix_caching"], off_033["mamba_cache_mode"], off_033["block_size"]) == (False, "none", 80)


def test_033_parses_mamba_cache_mode_but_drops_it_with_vllms_warning():
    doc = json.loads(explain("--vllm-version", "0.33", "--no-enable-prefix-caching", "--mamba-cache-mode", "align",
                             "--json").stdout)
    assert doc["hybrid"]["mamba_cache_mode"] == "none"
    assert any("--mamba-cache-mode is deprecated" in w and "It has no effect" in w for w in doc["warnings"])
    kept = json.loads(explain("--vllm-version", "0.24", "--no-enable-prefix-caching", "--mamba-cache-mode", "align",
                              "--json").stdout)
    assert "Mamba cache mode is set to 'none' when prefix caching is disabled" in kept["warnings"]


def test_mamba_ssm_cache_dtype_flag_sizes_the_state_page():
    bf16 = json.loads(explain("--vllm-version", "0.33", "--json").stdout)["hybrid"]
    fp32 = json.loads(explain("--vllm-version", "0.33", "--mamba-ssm-cache-dtype", "float32", "--json").stdout)["hybrid"]
    assert bf16["state_dtypes"] == ["bfloat16", "bfloat16"] and fp32["state_dtypes"] == ["bfloat16", "float32"]
    assert fp32["state_page_bytes"] > bf16["state_page_bytes"] and fp32["block_size"] > bf16["block_size"]


def test_a_hybrid_flags_line_advises_no_block_size_and_shows_what_one_would_do():
    text = explain("--vllm-version", "0.33").stdout
    flags = next(line for line in text.splitlines() if line.startswith("vLLM flags:"))
    assert flags.startswith("vLLM flags: none needed")  # vLLM picks the backend and the block size itself
    assert "vLLM computes a hybrid model's KV block from its Mamba state (80 here)" in " ".join(text.split())
    doc = json.loads(explain("--vllm-version", "0.33", "--json").stdout)
    outcome = {row["block_size"]: row["ends_with"] for row in doc["hybrid_explicit_block_sizes"]}
    assert outcome[16] == 80 and outcome[64] == 128 and outcome[80] == 80 and outcome[128] == 128
    assert "--block-size" not in doc["vllm_args"]


def test_an_explicit_block_size_the_backend_refuses_is_shown_with_vllms_error():
    result = runner.invoke(app, ["explain", "--model", "qwen3.5-9b", "--gpu", "B200", "--vllm-version", "0.33",
                                 "--attention-backend", "FLASH_ATTN", "--mamba-cache-float32", "--json"])
    rows = {row["block_size"]: row for row in json.loads(result.stdout)["hybrid_explicit_block_sizes"]}
    assert rows[16]["ends_with"] is None
    assert rows[16]["error"].startswith("Selected backend AttentionBackendEnum.FLASH_ATTN is not valid")


def test_non_hybrid_models_keep_the_block_size_flag():
    doc = json.loads(runner.invoke(app, ["explain", "--model", "llama-3.1-8b", "--gpu", "H100", "--vllm-version",
                                         "0.33", "--block-size", "64", "--json"]).stdout)
    assert doc["vllm_args"] == ["--block-size", "64"] and doc["hybrid_explicit_block_sizes"] == []
