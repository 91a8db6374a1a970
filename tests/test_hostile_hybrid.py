"""Bad-input corpus, part 3: the config keys of hybrid models (Mamba, Gated DeltaNet, Kimi Delta
Attention), as a hostile user would change them. transformers' config classes refuse each of
these (or vLLM could never build the state), so each gets one line naming the key, exit 2, from
explain, tune --dry-run and preflight alike; a huge layer count is answered in linear time."""

from __future__ import annotations

import json

import pytest
from hostile import CATALOG, assert_promise, invoke

INF, BIG = float("inf"), 2**40
# (id, bundled model, changes to its text config, fragment of the one stderr line)
HYBRID_MUTATIONS = [
    ("jamba-expand-inf", "jamba-v0.1", {"mamba_expand": INF}, "Impossible mamba_expand inf"),
    ("jamba-expand-negative", "jamba-v0.1", {"mamba_expand": -2}, "Impossible mamba_expand -2"),
    ("jamba-d_state-1e30", "jamba-v0.1", {"mamba_d_state": 1e30}, "Impossible mamba_d_state 1e+30"),
    ("jamba-d_conv-string", "jamba-v0.1", {"mamba_d_conv": "4"}, "Impossible mamba_d_conv '4'"),
    ("jamba-period-zero", "jamba-v0.1", {"attn_layer_period": 0}, "Impossible attn_layer_period 0"),
    ("jamba-period-string", "jamba-v0.1", {"attn_layer_period": "8"}, "Impossible attn_layer_period '8'"),
    ("jamba-offset-100", "jamba-v0.1", {"attn_layer_offset": 100},
     "attention layer offset (100) must be smaller than attention layer period (8)"),
    ("jamba-offset-negative", "jamba-v0.1", {"attn_layer_offset": -1}, "Impossible attn_layer_offset -1"),
    ("jamba-state-too-big", "jamba-v0.1", {"mamba_d_state": 2**30}, "state elements per layer"),
    ("granite-d_head-abc", "granite-4.0-h-350m", {"mamba_d_head": "abc"}, "Impossible mamba_d_head 'abc'"),
    ("granite-d_head-mismatch", "granite-4.0-h-350m", {"mamba_d_head": 33},
     "the dimensions for the Mamba head state do not match the model intermediate_size"),
    ("granite-heads-not-dividing", "granite-4.0-h-350m", {"mamba_n_heads": 7},
     "mamba_n_heads (7) must divide mamba_expand * hidden_size"),
    ("granite-expand-negative", "granite-4.0-h-350m", {"mamba_expand": -2}, "Impossible mamba_expand -2"),
    ("granite-expand-null", "granite-4.0-h-350m", {"mamba_expand": None}, "mamba_expand is null"),
    ("granite-d_state-1e30", "granite-4.0-h-350m", {"mamba_d_state": 1e30}, "Impossible mamba_d_state 1e+30"),
    ("granite-d_state-2^40", "granite-4.0-h-350m", {"mamba_d_state": BIG}, "larger than any model"),
    ("granite-chunk-zero", "granite-4.0-h-350m", {"mamba_chunk_size": 0}, "Impossible mamba_chunk_size 0"),
    ("granite-layer_types-banana", "granite-4.0-h-350m", {"layer_types": ["banana"] * 32},
     "the `layer_types` entries must be in mamba, attention"),
    ("granite-layer_types-short", "granite-4.0-h-350m", {"layer_types": ["mamba", "attention"]},
     "`num_hidden_layers` (32) must be equal to the number of layer types (2)"),
    ("nemotron-pattern-XYZ", "nemotron-h-8b", {"hybrid_override_pattern": "XYZ"},
     "must only contain characters 'M', '*', '-' or 'E'"),
    ("nemotron-pattern-short", "nemotron-h-8b", {"hybrid_override_pattern": "M*"},
     "must have the same length as num_hidden_layers"),
    ("nemotron-pattern-number", "nemotron-h-8b", {"hybrid_override_pattern": 5},
     "hybrid_override_pattern must be a string"),
    ("nemotron-pattern-no-layers", "nemotron-h-8b", {"hybrid_override_pattern": "-" * 52},
     "no Mamba ('M') and no attention ('*') layer"),
    ("nemotron-ssm-cache-dtype-bogus", "nemotron-h-8b", {"mamba_ssm_cache_dtype": "bogus"},
     "Mamba SSM cache dtype 'bogus'"),
    ("nemotron-ssm-cache-dtype-number", "nemotron-h-8b", {"mamba_ssm_cache_dtype": 5}, "Mamba SSM cache dtype 5"),
    ("nemotron-heads-float", "nemotron-h-8b", {"mamba_num_heads": 128.5}, "Impossible mamba_num_heads 128.5"),
    ("nemotron-groups-zero", "nemotron-h-8b", {"n_groups": 0}, "Impossible n_groups 0"),
    ("falcon-d_ssm-string", "falcon-h1-7b", {"mamba_d_ssm": "3072"}, "Impossible mamba_d_ssm '3072'"),
    ("falcon-d_head-mismatch", "falcon-h1-7b", {"mamba_d_head": 100}, "do not match the model intermediate_size"),
    ("falcon-heads-not-dividing-d_ssm", "falcon-h1-7b", {"mamba_n_heads": 7}, "must divide mamba_d_ssm (3072)"),
    ("qwen3-next-layer_types-banana", "qwen3-next-80b-a3b", {"layer_types": ["banana"] * 48},
     "the `layer_types` entries must be in full_attention, linear_attention"),
    ("qwen3-next-interval-zero", "qwen3-next-80b-a3b", {"full_attention_interval": 0},
     "Impossible full_attention_interval 0"),
    ("qwen3-next-heads-list", "qwen3-next-80b-a3b", {"linear_num_value_heads": [32]},
     "Impossible linear_num_value_heads [32]"),
    ("qwen3.5-ssm-dtype-bogus", "qwen3.5-9b", {"mamba_ssm_dtype": "bogus"}, "Mamba SSM cache dtype 'bogus'"),
    ("qwen3.5-layer_types-short", "qwen3.5-9b", {"layer_types": ["full_attention"]},
     "`num_hidden_layers` (32) must be equal to the number of layer types (1)"),
    ("glm5-linear_attn_config-list", "glm-5-next", {"linear_attn_config": [1, 2]},
     "linear_attn_config must be an object, not a list"),
    ("glm5-linear_attn_config-heads-zero", "glm-5-next", {"linear_attn_config": {"num_heads": 0}},
     "Impossible linear_attn_config.num_heads 0"),
    ("glm5-linear_attn_config-layers-strings", "glm-5-next",
     {"linear_attn_config": {"full_attn_layers": ["a"], "kda_layers": [1]}},
     "linear_attn_config.full_attn_layers must be a list of layer numbers"),
    ("glm5-kpool-negative", "glm-5-next", {"index_kpool": -16}, "Impossible index_kpool -16"),
]
# num_hidden_layers at the int32 limit: every period / interval is counted without a loop per layer
HUGE_LAYER_COUNTS = [("jamba", "jamba-v0.1", {}), ("qwen3-next", "qwen3-next-80b-a3b", {}),
                     ("glm5-no-layer_types", "glm-5-next", {"layer_types": ...}), ("falcon", "falcon-h1-7b", {})]


def _write(tmp_path, name: str, model: str, changes: dict) -> str:
    config = json.loads((CATALOG / f"{model}.json").read_text())
    config.pop("_attnsel_source", None)
    text = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    for key, value in changes.items():
        if value is ...:
            text.pop(key, None)
        else:
            text[key] = value
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("name,model,changes,fragment", HYBRID_MUTATIONS, ids=[m[0] for m in HYBRID_MUTATIONS])
def test_a_hybrid_key_transformers_refuses_is_one_line_exit_2(tmp_path, name, model, changes, fragment):
    path = _write(tmp_path, name, model, changes)
    for args in (["explain", "--json", "--gpu", "H100"], ["explain", "--gpu", "all"]):
        result, elapsed = invoke([*args, "--model", path])
        assert_promise(result, elapsed, 2, fragment)
    # every release reads these keys (Qwen3.5's Mamba SSM dtype since 0.17.0's config hook), so answering
    # for all of them refuses as each one does
    result, elapsed = invoke(["explain", "--gpu", "H100", "--vllm-version", "all", "--model", path])
    assert_promise(result, elapsed, 2, fragment)


@pytest.mark.parametrize("name", ["jamba-expand-inf", "nemotron-pattern-XYZ", "nemotron-ssm-cache-dtype-bogus",
                                  "granite-d_head-abc", "glm5-linear_attn_config-list", "qwen3-next-layer_types-banana"])
def test_tune_and_preflight_refuse_the_same_hybrid_keys(tmp_path, name):
    _, model, changes, fragment = next(m for m in HYBRID_MUTATIONS if m[0] == name)
    path = _write(tmp_path, name, model, changes)
    for args in (["tune", "--dry-run", "--gpu", "H100"], ["preflight", "--gpu", "H100"]):
        result, elapsed = invoke([*args, "--model", path])
        assert_promise(result, elapsed, 2, fragment)


@pytest.mark.parametrize("name,model,changes", HUGE_LAYER_COUNTS, ids=[m[0] for m in HUGE_LAYER_COUNTS])
def test_an_int32_layer_count_is_answered_without_a_loop_per_layer(tmp_path, name, model, changes):
    path = _write(tmp_path, name, model, {**changes, "num_hidden_layers": 2**31 - 1})
    for args in (["explain", "--json", "--gpu", "H100"], ["tune", "--dry-run", "--gpu", "H100"],
                 ["preflight", "--gpu", "H100"]):
        result, elapsed = invoke([*args, "--model", path])
        assert_promise(result, elapsed)  # TIME_LIMIT_S; it was 143 s for Jamba
        assert elapsed < 5, (args, elapsed)
