"""config.json → selector inputs, the way vLLM derives them (docs/vllm-rules.md §6, §7).

Every expectation below is worked out by hand from the config values and the §6 rules,
not read back from the code.
"""

import json
from pathlib import Path

import pytest

from attnsel.attention.model.config import (
    DEFAULT_MODEL,
    catalog_path,
    catalog_source,
    derive_model_facts,
    list_catalog,
    load_model_config,
)
from attnsel.errors import CheckFailed, UserInputError

FIXTURES = Path(__file__).parent / "fixtures" / "models"
H100 = (9, 0)


def facts(name, **kwargs):
    kwargs.setdefault("capability", H100)
    kwargs.setdefault("env", {})
    return derive_model_facts(load_model_config(name), **kwargs)


# name: (head_size, total heads, kv heads seen by the layers, dtype on CC 9.0 with --dtype auto)
# §6 head_size: MLA = kv_lora_rank + qk_rope_head_dim; else head_dim; else hidden // heads.
# §6 dtype: a bf16 config is kept on CC >= 8.0; float32 configs go to the preferred dtype.
CATALOG_EXPECTATIONS = {
    "llama-3.1-8b": (4096 // 32, 32, 8, "bfloat16"),
    "qwen2.5-7b": (3584 // 28, 28, 4, "bfloat16"),
    "qwen3-8b": (128, 32, 8, "bfloat16"),  # no head_dim in the file: Qwen3Config default 128
    "qwen3-0.6b": (128, 16, 8, "bfloat16"),  # head_dim 128 given (1024 / 16 would be 64)
    "granite-4.0-h-350m": (768 // 12, 12, 4, "bfloat16"),  # hybrid: 4 attention layers of 32, dtype key (transformers 5)
    "nemotron-h-8b": (128, 32, 8, "bfloat16"),  # hybrid: 4 attention layers of 52 (hybrid_override_pattern '*')
    "mistral-7b-v0.3": (4096 // 32, 32, 8, "bfloat16"),
    "gemma-2-9b": (256, 16, 8, "bfloat16"),  # head_dim 256 != 3584/16 = 224
    "gemma-3-12b": (256, 16, 8, "bfloat16"),
    "phi-3-mini-4k": (3072 // 32, 32, 32, "bfloat16"),  # head 96
    "deepseek-v2-lite": (512 + 64, 16, 1, "bfloat16"),  # MLA layers: one latent KV head
    "deepseek-v3": (512 + 64, 128, 1, "bfloat16"),
    "deepseek-v3.2": (512 + 64, 128, 1, "bfloat16"),
    "gpt-oss-20b": (64, 64, 8, "bfloat16"),  # no dtype in file → float32 → preferred bf16
    "bert-base": (768 // 12, 12, 12, "float16"),  # float32 pooling model → float16 (§6)
    "jamba-1.5-mini": (4096 // 32, 32, 8, "bfloat16"),
    "jamba-v0.1": (4096 // 32, 32, 8, "bfloat16"),  # hybrid: 4 attention layers of 32 (period 8, offset 4)
    "qwen3-next-80b-a3b": (256, 16, 2, "bfloat16"),  # hybrid: 12 full attention + 36 Gated DeltaNet
    "qwen3.5-9b": (256, 16, 4, "bfloat16"),  # hybrid, text_config: 8 full attention + 24 Gated DeltaNet
    "falcon-h1-7b": (128, 12, 2, "bfloat16"),  # hybrid: attention and Mamba-2 in every layer
    "glm-5-next": (512 + 0, 64, 1, "bfloat16"),  # hybrid MLA (no rope part) + Kimi Delta Attention
    "mamba-130m": (0, 0, 0, "bfloat16"),  # attention-free: head size 0 (§6 overrides)
    "qwen2.5-vl-7b": (3584 // 28, 28, 4, "bfloat16"),
    "llava-1.5-7b": (4096 // 32, 32, 32, "float16"),  # LlamaConfig defaults; fp16 config kept
}


# catalog models the default (seed, Feb 2026) rules do not know: the release that added them
NEWER_THAN_DEFAULT = {"glm-5-next": "0.33"}


def test_catalog_holds_the_promised_models():
    assert set(CATALOG_EXPECTATIONS) == set(list_catalog())
    assert DEFAULT_MODEL == "llama-3.1-8b"


@pytest.mark.parametrize("name", sorted(CATALOG_EXPECTATIONS))
def test_every_catalog_config_derives_the_expected_inputs(name):
    head_size, heads, kv_heads, dtype = CATALOG_EXPECTATIONS[name]
    f = facts(name, profile=NEWER_THAN_DEFAULT.get(name))
    assert (f.head_size, f.num_attention_heads, f.num_kv_heads, f.dtype) == (head_size, heads, kv_heads, dtype)
    assert f.num_heads_per_gpu == heads  # TP 1


@pytest.mark.parametrize("name", sorted(CATALOG_EXPECTATIONS))
def test_every_catalog_file_names_its_source(name):
    source = catalog_source(name)
    assert isinstance(source, str) and len(source) > 20
    # The loader drops attnsel's bookkeeping key, as vLLM ignores unknown keys.
    assert "_attnsel_source" not in load_model_config(name)


@pytest.mark.parametrize(
    "name, use_mla, use_sparse",
    [
        ("deepseek-v2-lite", True, False),  # §6: deepseek_v2 + kv_lora_rank
        ("deepseek-v3", True, False),
        ("deepseek-v3.2", True, True),  # §6 use_sparse: use_mla and index_topk
        ("llama-3.1-8b", False, False),
    ],
)
def test_mla_and_sparse_flags(name, use_mla, use_sparse):
    f = facts(name)
    assert (f.use_mla, f.use_sparse) == (use_mla, use_sparse)


def test_mla_models_expose_qk_nope_for_flashinfer_mla():
    # §3b FLASHINFER_MLA checks hf_text_config.qk_nope_head_dim == 128
    assert facts("deepseek-v3").qk_nope_head_dim == 128
    assert facts("llama-3.1-8b").qk_nope_head_dim is None


def test_vllm_mla_disable_turns_mla_off_and_changes_the_head_size():
    # §7 VLLM_MLA_DISABLE=1: use_mla False, head_size = qk_nope + qk_rope = 128 + 64
    f = facts("deepseek-v3", env={"VLLM_MLA_DISABLE": "1"})
    assert f.use_mla is False and f.use_sparse is False
    assert f.head_size == 128 + 64
    assert f.num_kv_heads == 128  # plain attention keeps num_key_value_heads


def test_vllm_mla_disable_zero_keeps_mla():
    assert facts("deepseek-v2-lite", env={"VLLM_MLA_DISABLE": "0"}).use_mla is True


def test_vllm_mla_disable_must_be_an_integer():
    with pytest.raises(UserInputError, match="VLLM_MLA_DISABLE"):
        facts("deepseek-v3", env={"VLLM_MLA_DISABLE": "yes"})


def test_env_none_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("VLLM_MLA_DISABLE", "1")
    f = derive_model_facts(load_model_config("deepseek-v2-lite"), capability=H100)
    assert f.use_mla is False


def test_sinks_come_from_gpt_oss_model_code():
    # §6 has_sink: gpt_oss.py passes sinks= to Attention
    assert facts("gpt-oss-20b").has_sink is True
    assert facts("qwen3-8b").has_sink is False


def test_mm_prefix_for_gemma3_but_not_other_vlms():
    # §6 use_mm_prefix: model_type in {gemma3, molmo2, paligemma}
    assert facts("gemma-3-12b").use_mm_prefix is True
    assert facts("qwen2.5-vl-7b").use_mm_prefix is False
    assert facts("llava-1.5-7b").use_mm_prefix is False


def test_is_mm_prefix_lm_key_wins_over_the_model_type_list():
    config = load_model_config("gemma-3-12b")
    config["is_mm_prefix_lm"] = False
    assert derive_model_facts(config, capability=H100, env={}).use_mm_prefix is False
    config = load_model_config("qwen2.5-vl-7b")
    config["is_mm_prefix_lm"] = True
    assert derive_model_facts(config, capability=H100, env={}).use_mm_prefix is True


def test_bert_is_encoder_only_and_llama_is_a_decoder():
    # §6 attn_type: EncoderOnlyAttention (BERT-like) → encoder_only
    assert facts("bert-base").attn_type == "encoder_only"
    assert facts("llama-3.1-8b").attn_type == "decoder"


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-7b", "qwen3-8b"])
def test_is_causal_false_makes_llama_qwen_encoder_only(name):
    config = load_model_config(name)
    config["is_causal"] = False
    assert derive_model_facts(config, capability=H100, env={}).attn_type == "encoder_only"


def test_hybrid_and_attention_free_models():
    jamba = facts("jamba-1.5-mini")
    assert jamba.is_hybrid is True and jamba.is_attention_free is False
    mamba = facts("mamba-130m")
    assert mamba.is_attention_free is True and mamba.is_hybrid is False
    assert any("no attention backend" in note for note in mamba.notes)


def test_hybrid_with_only_attention_layers_is_not_hybrid():
    # §6: is_hybrid is False when hf_config.layer_types is all "attention"
    f = derive_model_facts(
        load_model_config(FIXTURES / "granite-4.0-micro-like.json"), capability=H100, env={}
    )
    assert f.is_hybrid is False
    assert f.head_size == 2560 // 40


def test_nemotron_h_mamba_cache_dtype_from_config():
    config = load_model_config(FIXTURES / "nemotron-h-8b-trimmed.json")
    assert derive_model_facts(config, capability=H100, env={}).is_hybrid is True
    # the FA [16,32,64] rule (§3a) needs mamba_ssm_cache_dtype float32 on a hybrid model
    config["mamba_ssm_cache_dtype"] = "float32"
    assert derive_model_facts(config, capability=H100, env={}).mamba_cache_float32 is True
    # an explicit flag is not overridden by the config
    f = derive_model_facts(config, capability=H100, env={}, mamba_ssm_cache_dtype="float16")
    assert f.mamba_cache_float32 is False


def test_mamba_cache_flag_float32_only_matters_for_hybrid_models():
    jamba = facts("jamba-1.5-mini", mamba_ssm_cache_dtype="float32")
    assert jamba.mamba_cache_float32 is True
    assert facts("jamba-1.5-mini").mamba_cache_float32 is False  # CacheConfig default "auto"
    assert facts("llama-3.1-8b", mamba_cache_dtype="float32").mamba_cache_float32 is False


def test_unknown_mamba_cache_dtype_is_bad_input():
    with pytest.raises(UserInputError, match="mamba_ssm_cache_dtype"):
        facts("jamba-1.5-mini", mamba_ssm_cache_dtype="bf16")


def test_sliding_window():
    assert facts("gemma-2-9b").sliding_window == 4096
    assert facts("gpt-oss-20b").sliding_window == 128
    assert facts("mistral-7b-v0.3").sliding_window is None  # null in the file
    assert facts("qwen2.5-7b").sliding_window is None  # use_sliding_window false


def test_vision_encoder_facts_for_vit_selection():
    # §8 ViT inputs: vision hidden_size // heads; the model dtype
    qwen_vl = facts("qwen2.5-vl-7b").vision
    assert (qwen_vl.head_size, qwen_vl.num_heads, qwen_vl.dtype) == (1280 // 16, 16, "bfloat16")
    gemma = facts("gemma-3-12b").vision
    assert (gemma.head_size, gemma.num_heads) == (1152 // 16, 16)
    llava = facts("llava-1.5-7b").vision
    assert (llava.head_size, llava.dtype) == (1024 // 16, "float16")
    assert facts("llama-3.1-8b").vision is None


def test_transformers_defaults_fill_what_gemma3_configs_omit():
    # google/gemma-3-4b-it names no head_dim/heads: Gemma3TextConfig gives 256, 8 heads, 4 KV
    f = derive_model_facts(load_model_config(FIXTURES / "gemma-3-4b-original.json"), capability=H100, env={})
    assert (f.head_size, f.num_attention_heads, f.num_kv_heads) == (256, 8, 4)
    assert f.use_mm_prefix is True


def test_tensor_parallel_splits_heads():
    f = facts("deepseek-v3", tensor_parallel_size=8)
    assert f.num_heads_per_gpu == 128 // 8
    assert facts("llama-3.1-8b", tensor_parallel_size=4).num_heads_per_gpu == 32 // 4


def test_tensor_parallel_must_divide_the_heads():
    with pytest.raises(CheckFailed, match=r"Total number of attention heads \(28\) must be divisible by tensor parallel size \(8\)\."):
        facts("qwen2.5-7b", tensor_parallel_size=8)


@pytest.mark.parametrize("tp", [0, -2, 1.5])
def test_tensor_parallel_size_must_be_positive(tp):
    with pytest.raises(UserInputError, match="tensor_parallel_size"):
        facts("llama-3.1-8b", tensor_parallel_size=tp)


def test_kv_cache_scheme_forces_fp8():
    # §6 kv_cache_dtype: forced to fp8 when quant_config.kv_cache_scheme exists
    config = load_model_config("llama-3.1-8b")
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
    }
    assert derive_model_facts(config, capability=H100, env={}).kv_cache_dtype_forced == "fp8"
    config["quantization_config"]["kv_cache_scheme"] = None
    assert derive_model_facts(config, capability=H100, env={}).kv_cache_dtype_forced is None
    assert facts("deepseek-v3").kv_cache_dtype_forced is None  # fp8 weights, no kv scheme


def test_notes_show_how_values_were_derived():
    notes = "\n".join(facts("deepseek-v3").notes)
    assert "kv_lora_rank 512 + qk_rope_head_dim 64 = 576" in notes
    assert "128 total // tensor_parallel_size 1 = 128 per GPU" in notes


def test_to_dict_is_json_ready():
    d = facts("gemma-3-12b", capability=(8, 9)).to_dict()
    text = json.dumps(d)
    assert d["capability"] == "8.9" and d["vision"]["head_size"] == 72
    assert json.loads(text)["use_mm_prefix"] is True


def test_selector_fields_follow_the_selector_config_order():
    # §2 AttentionSelectorConfig: head_size, dtype, (kv, block), use_mla, has_sink, use_sparse, use_mm_prefix, attn_type
    fields = facts("gpt-oss-20b").selector_fields()
    assert list(fields) == ["head_size", "dtype", "use_mla", "has_sink", "use_sparse", "use_mm_prefix", "attn_type"]
    assert fields["has_sink"] is True and fields["head_size"] == 64


# --- loading and bad input ------------------------------------------------------------------


def test_load_accepts_a_file_a_folder_and_a_catalog_name(tmp_path):
    by_name = load_model_config("qwen3-8b")
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(catalog_path("qwen3-8b").read_text())
    assert load_model_config(folder) == by_name
    assert load_model_config(str(folder / "config.json")) == by_name


def test_missing_file():
    with pytest.raises(UserInputError, match=r"Model config not found: .*nowhere/config.json"):
        load_model_config("/nowhere/config.json")


def test_unknown_catalog_name_suggests_close_names():
    with pytest.raises(UserInputError, match=r"Did you mean 'llama-3.1-8b'"):
        load_model_config("llama-3.1-8")


def test_folder_without_config_json(tmp_path):
    with pytest.raises(UserInputError, match=r"is a directory without config.json"):
        load_model_config(tmp_path)


def test_invalid_json_names_the_line():
    with pytest.raises(UserInputError, match=r"Invalid JSON in .*invalid-json.json at line 5"):
        load_model_config(FIXTURES / "invalid-json.json")


def test_json_that_is_not_an_object():
    with pytest.raises(UserInputError, match="is not a JSON object \\(found an array\\)"):
        load_model_config(FIXTURES / "not-an-object.json")


def test_binary_file_is_bad_input(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\xff\xfe\x00\x81binary")
    with pytest.raises(UserInputError, match="not a UTF-8 text file"):
        load_model_config(path)


def test_config_without_model_type():
    with pytest.raises(UserInputError, match='no "model_type"'):
        derive_model_facts(load_model_config(FIXTURES / "no-model-type.json"), capability=H100, env={})


def test_unknown_model_type_suggests_close_names():
    with pytest.raises(UserInputError, match=r"Unknown model type 'lama'.*'llama'"):
        derive_model_facts({"model_type": "lama", "hidden_size": 64, "num_attention_heads": 2}, capability=H100, env={})
    # an escape hatch derives it with the generic rules
    f = derive_model_facts(
        {"model_type": "lama", "hidden_size": 64, "num_attention_heads": 2},
        capability=H100,
        env={},
        allow_unknown_model_type=True,
    )
    assert f.head_size == 32


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"head_dim": 0}, "Impossible head_dim 0"),
        ({"head_dim": -64}, "Impossible head_dim -64"),
        ({"head_dim": 64.5}, "Impossible head_dim 64.5"),
        ({"head_dim": "128"}, "Impossible head_dim '128'"),
        ({"hidden_size": 4097}, "hidden_size 4097 is not divisible by num_attention_heads 32"),
        ({"num_attention_heads": 0}, "Impossible num_attention_heads 0"),
        ({"num_key_value_heads": -8}, "Impossible num_key_value_heads -8"),
    ],
)
def test_impossible_head_sizes(overrides, message):
    config = load_model_config("llama-3.1-8b")
    config.update(overrides)
    with pytest.raises(UserInputError, match=message):
        derive_model_facts(config, capability=H100, env={})


def test_missing_head_fields():
    # phi3 has no transformers defaults in our table, so nothing fills the gap
    config = {"model_type": "phi3", "hidden_size": 3072}
    with pytest.raises(UserInputError, match="has no num_attention_heads"):
        derive_model_facts(config, capability=H100, env={})


def test_unknown_profile():
    with pytest.raises(UserInputError, match="Unknown vLLM profile 'v9'"):
        facts("llama-3.1-8b", profile="v9")


@pytest.mark.parametrize(
    "config, head_size, use_mla",
    [
        # §6 head_size step 3: hidden_size_per_head (PLaMo2)
        ({"model_type": "plamo2", "hidden_size": 4096, "num_attention_heads": 32, "hidden_size_per_head": 128}, 128, False),
        # §6 per-model-type override: zamba2 uses attention_head_dim
        ({"model_type": "zamba2", "hidden_size": 2560, "num_attention_heads": 32, "attention_head_dim": 160}, 160, False),
        # §6 use_mla: an eagle draft over a DeepSeek model with kv_lora_rank is MLA
        (
            {"model_type": "eagle", "model": {"model_type": "deepseek_v3"}, "kv_lora_rank": 512,
             "qk_rope_head_dim": 64, "hidden_size": 7168, "num_attention_heads": 128},
            512 + 64,
            True,
        ),
        # §6 use_mla needs kv_lora_rank: a deepseek_v2 config without it is plain attention
        ({"model_type": "deepseek_v2", "hidden_size": 2048, "num_attention_heads": 16}, 2048 // 16, False),
    ],
)
def test_head_size_rules(config, head_size, use_mla):
    f = derive_model_facts(config, capability=H100, env={})
    assert (f.head_size, f.use_mla) == (head_size, use_mla)
