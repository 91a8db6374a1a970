"""Fuzzing the boundary (Hypothesis): config.json fields and flag values of every command, drawn
from JSON-shaped values, numbers at and beyond every limit and arbitrary text. Whatever comes in,
the promise of tests/hostile.py holds: no traceback, an exit code in the documented set, one
stderr line when it is not 0, and no hang. An internal error (exit 70) is a finding too: the
funnel is a safety net, the boundary should have named the problem first.

Derandomized (a fixed sequence of examples, no example database): CI runs the same inputs every
time, and a failure prints the shrunk input to reproduce it."""

from __future__ import annotations

import json

from hostile import assert_promise, invoke, llama
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
EXPECTED = {0, 1, 2}  # a verdict or bad input; never 70 (unforeseen) for any of these inputs

EDGE_INTS = st.sampled_from([0, 1, -1, 7, 2**31 - 1, 2**31, 2**63, 2**64, -(2**63), 10**30])
NUMBERS = st.one_of(st.integers(), EDGE_INTS, st.floats(allow_nan=True, allow_infinity=True))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20),
                    st.sampled_from(["llama", "bfloat16", "float8_e4m3fn", "auto", "", "LlamaForCausalLM"]))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                           max_leaves=12)
# every key attnsel or vLLM reads from a config, at the top level and in the nested configs
CONFIG_KEYS = [
    "model_type", "architectures", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "num_hidden_layers", "torch_dtype", "dtype", "text_config", "vision_config", "quantization_config",
    "sliding_window", "use_sliding_window", "layer_types", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
    "v_head_dim", "index_topk", "is_causal", "rope_scaling", "attention_chunk_size", "sliding_window_pattern",
    "max_window_layers", "is_encoder_decoder", "mamba_ssm_cache_dtype", "attn_type_list", "hybrid_override_pattern",
    "layers_block_type", "attn_layer_period", "ssm_cfg", "is_mm_prefix_lm", "multi_query_group_num",
]
NESTED_KEYS = ["model_type", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "torch_dtype"]


@st.composite
def damaged_configs(draw) -> dict:
    base = draw(st.sampled_from(["llama", "deepseek", "empty"]))
    config = llama() if base == "llama" else {"model_type": "deepseek_v3", "kv_lora_rank": 512,
                                                "qk_rope_head_dim": 64, "num_attention_heads": 128,
                                                "hidden_size": 7168} if base == "deepseek" else {}
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), min_size=1, max_size=4, unique=True)):
        config[key] = draw(JSON_VALUES)
    if draw(st.booleans()):
        nested = draw(st.dictionaries(st.sampled_from(NESTED_KEYS), JSON_VALUES, max_size=3))
        config[draw(st.sampled_from(["text_config", "vision_config"]))] = nested
    return config


@FUZZ
@given(config=damaged_configs(), command=st.sampled_from(["explain", "preflight", "tune"]))
def test_fuzzed_config_files_end_in_an_answer_or_one_line(config, command):
    args = {"explain": ["explain", "--gpu", "H100", "--model", "-"],
            "preflight": ["preflight", "--gpu", "H100", "--model", "-"],
            "tune": ["tune", "--dry-run", "--gpu", "H100", "--model", "-"]}[command]
    result, elapsed = invoke(args, stdin=json.dumps(config))
    assert_promise(result, elapsed)
    assert result.exit_code in EXPECTED, (result.exit_code, result.stderr)


TEXT_VALUES = st.one_of(
    st.text(max_size=30), NUMBERS.map(str), st.sampled_from(["", " ", "nan", "-inf", "1e309", "0x10", "9" * 5000,
                                                             "H100", "h100 sxm", "sm_90", "GPU-0", "a,b,,c"]),
)
# (command prefix, flag) pairs: every value-taking flag users type
FLAGS = [(["explain", "--gpu", "H100"], flag) for flag in (
    "--head-size", "--dtype", "--kv-cache-dtype", "--block-size", "--attention-backend", "--attn-type", "--num-heads",
    "--num-kv-heads", "--tensor-parallel-size", "--qk-nope-head-dim", "--index-topk", "--kv-lora-rank",
    "--flash-attn-version", "--vllm-version", "--dcp", "--pcp", "--qk-rope-head-dim", "--v-head-dim",
    "--mm-encoder-attn-backend", "--model")] + [(["explain"], flag) for flag in ("--gpu", "--capability")] + [
    (["preflight", "--model", "llama-3.1-8b", "--gpu", "H100"], flag) for flag in (
        "--tensor-parallel-size", "--dtype", "--kv-cache-dtype", "--block-size", "--attention-backend", "--format",
        "--num-gpus", "--vllm-version", "--pipeline-parallel-size")] + [(["preflight", "--model", "llama-3.1-8b"], "--gpu")] + [
    (["tune", "--dry-run", "--gpu", "H100", "--model", "llama-3.1-8b"], flag) for flag in (
        "--block-sizes", "--backends", "--workload", "--weights", "--tolerance", "--timeout", "--dtype",
        "--tensor-parallel-size", "--num-heads", "--vllm-version", "--kv-cache-dtype", "--gpus", "--min-gain",
        "--kv-lora-rank", "--qk-rope-head-dim", "--qk-nope-head-dim")] + [
    (["probe"], flag) for flag in ("--require-gpus", "--require-capability")] + [
    (["report", "tests/fixtures/report/h200_llama8b_synthetic"], flag) for flag in ("--format",)]


@FUZZ
@given(flag=st.sampled_from(FLAGS), value=TEXT_VALUES)
def test_fuzzed_flag_values_end_in_an_answer_or_one_line(flag, value):
    prefix, name = flag
    result, elapsed = invoke([*prefix, name, value])
    assert_promise(result, elapsed)
    assert result.exit_code in EXPECTED, (result.exit_code, result.stderr)


ENV_VARS = ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "VLLM_MLA_DISABLE", "COLUMNS", "NO_COLOR", "HF_HUB_OFFLINE"]
ENV_TEXT = st.one_of(TEXT_VALUES, st.lists(st.sampled_from(["0", "1", "-1", "GPU-", "MIG-GPU-x/1/2", "9" * 40, ""]),
                                           max_size=6).map(",".join)).filter(lambda v: "\0" not in v)


@FUZZ
@given(name=st.sampled_from(ENV_VARS), value=ENV_TEXT,
       args=st.sampled_from([["probe", "--json"], ["explain", "--model", "deepseek-v3"],
                             ["preflight", "--model", "llama-3.1-8b", "-tp", "2"]]))
def test_fuzzed_environment_variables_end_in_an_answer_or_one_line(name, value, args):
    result, elapsed = invoke(args, env={name: value})
    assert_promise(result, elapsed)
    assert result.exit_code in EXPECTED, (result.exit_code, result.stderr)
