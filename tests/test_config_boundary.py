"""Every memory-relevant config value is checked at the boundary (issue 33, attention/model/validation.py),
and a nested text_config that relies on its transformers config class's defaults is planned with them
(LlavaConfig builds LlamaConfig(**text_config), Gemma3Config Gemma3TextConfig(**text_config); the
defaults are the release data's `models.transformers_defaults`, cited from transformers 5.17.0)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile import CATALOG, invoke, llama  # noqa: E402

from attnsel.attention.versions import select_profile  # noqa: E402


def _write(tmp_path: Path, config: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("key", ["vocab_size", "intermediate_size", "max_position_embeddings", "num_hidden_layers"])
@pytest.mark.parametrize("value", [-1, 0, None, "4096", 1.5, [], {}])
def test_a_memory_size_no_model_has_is_bad_input(tmp_path, key, value):
    result, _ = invoke(["explain", "--model", _write(tmp_path, llama(**{key: value})), "--gpu", "H100"])
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert key in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_null_kv_heads_is_transformers_default_of_the_heads(tmp_path):
    result, _ = invoke(["explain", "--model", _write(tmp_path, llama(num_key_value_heads=None)), "--gpu", "H100",
                        "--max-model-len", "4096"])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("experts,top_k,code", [(8, 2, 0), (0, 0, 0), (0, 2, 2), (8, 0, 2), (8, 9, 2), (-1, 2, 2)])
def test_expert_counts(tmp_path, experts, top_k, code):
    config = llama(model_type="mixtral", architectures=["MixtralForCausalLM"], num_local_experts=experts,
                   num_experts_per_tok=top_k)
    result, _ = invoke(["explain", "--model", _write(tmp_path, config), "--gpu", "H200", "--max-model-len", "4096"])
    assert result.exit_code == code, result.stderr


@pytest.mark.parametrize("method", [7, ["awq"], {"x": 1}])
def test_a_quant_method_that_is_no_name(tmp_path, method):
    config = llama(quantization_config={"quant_method": method})
    result, _ = invoke(["explain", "--model", _write(tmp_path, config), "--gpu", "H100"])
    assert result.exit_code == 2 and "quant_method" in result.stderr


def _plan(args: list[str]) -> dict:
    result, _ = invoke(["explain", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["memory"]


@pytest.mark.parametrize("missing", ["max_position_embeddings", "vocab_size"])
def test_gemma3_text_config_takes_transformers_defaults(tmp_path, missing):
    defaults = select_profile(None).profile.model_rules.transformers_defaults["gemma3_text"]
    config = json.loads((CATALOG / "gemma-3-12b.json").read_text())
    config.pop("_attnsel_source", None)
    assert config["text_config"].get(missing, defaults[missing]) == defaults[missing]  # the catalog writes it out
    config["text_config"].pop(missing, None)
    without = _plan(["--model", _write(tmp_path, config), "--gpu", "H100"])
    full = _plan(["--model", "gemma-3-12b", "--gpu", "H100"])
    for key in ("derived_max_model_len", "weights_gib", "kv_cache_tokens"):
        assert without[key] == full[key], key
    if missing == "max_position_embeddings":
        assert without["derived_max_model_len"] == defaults["max_position_embeddings"]


def test_llavas_plan_is_made_with_llamas_defaults():
    # llava-1.5-7b's text_config names only vocab_size and max_position_embeddings (LlamaConfig's defaults: 7B)
    plan = _plan(["--model", "llava-1.5-7b", "--gpu", "H100"])
    assert plan is not None and plan["max_model_len"] == 4096
    assert 12.5 < plan["weights_gib"] < 14.0  # ~6.7B parameters in float16


def test_explain_says_why_there_is_no_plan(tmp_path):
    # a release without memory data (the seed): explain says so in one line, as preflight's memory check does
    result, _ = invoke(["explain", "--model", "llama-3.1-8b", "--gpu", "H100", "--vllm-version", "seed"])
    assert result.exit_code == 0
    assert "Memory: not planned:" in result.stdout
    doc, _ = invoke(["explain", "--model", "llama-3.1-8b", "--gpu", "H100", "--vllm-version", "seed", "--json"])
    assert json.loads(doc.stdout)["memory_not_planned"]
