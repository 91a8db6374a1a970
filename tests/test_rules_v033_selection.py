"""Priorities, selection, the 0.33 block-size flow, messages, ViT and model lists of the vLLM 0.33
profile. Expectations from docs/vllm-rules.md §9 (cited per test), §2 for unchanged rules.
"""

import pytest

from attnsel.attention.model import derive_model_facts
from attnsel.attention.rules import SelectionContext, SelectorInputs
from attnsel.attention.selector import explain, vit_backend
from attnsel.attention.versions import get_profile
from attnsel.attention.versions.block_size import (
    aligned_block_size_error,
    common_block_size,
)

V033 = get_profile("0.33")
SEED = get_profile("seed")
H100, A100, T4, B200, RTX5090 = (9, 0), (8, 0), (7, 5), (10, 0), (12, 0)
MLA_B200 = ["FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"]
MLA_OTHER = ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA"]
NON_MLA_OTHER = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"]
NON_MLA_B200 = ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"]


def cfg(head_size=128, dtype="bfloat16", **kw):
    return SelectorInputs(head_size=head_size, dtype=dtype, **kw)


def mla(**kw):
    return cfg(576, use_mla=True, **kw)


# --- §9 priority rows and their new keys (kv dtype, head size, mm-prefix, non-causal) ------------
@pytest.mark.parametrize(
    "inputs,cc,num_heads,expected",
    [
        (cfg(), B200, None, NON_MLA_B200),
        (cfg(use_mm_prefix=True), B200, None, ["TRITON_FLASHINFER", *NON_MLA_B200]),
        (cfg(use_non_causal=True), B200, None, NON_MLA_OTHER),  # non-causal -> the "other" list
        (cfg(), H100, None, NON_MLA_OTHER),
        (cfg(use_mm_prefix=True), H100, None, ["TRITON_FLASH_ATTN", *NON_MLA_OTHER]),
        (cfg(use_mm_prefix=True), A100, None, NON_MLA_OTHER),  # composite only on CC major 9
        (mla(), B200, 128, [*MLA_B200, "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"]),
        (mla(), B200, 16, [*MLA_B200, "FLASH_ATTN_MLA_SPARSE_FA4", "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]),
        (mla(kv_cache_dtype="fp8"), B200, 16, [*MLA_B200, "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]),
        (mla(), RTX5090, 16, ["TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"]),
        (mla(), H100, 16, [*MLA_OTHER, "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM90"]),
        (cfg(512, use_mla=True), H100, 16,
         [*MLA_OTHER, "FLASHINFER_MLA_SPARSE_SM90", "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"]),
    ],
)
def test_priority_lists_033(inputs, cc, num_heads, expected):
    assert V033.priority_list(inputs, SelectionContext(capability=cc, num_heads=num_heads)) == expected


# --- selection and messages ------------------------------------------------------------------------
def test_h100_llama_log_is_a_list_with_a_period_and_block_size_is_set_after():
    e = explain(V033, cfg(), SelectionContext(capability=H100))
    assert (e.selected, e.block_size, e.error) == ("FLASH_ATTN", 16, None)
    assert e.warnings == [  # §9 selection log; the block-size flow logs only a size other than 16
        "Using FLASH_ATTN attention backend out of potential backends: "
        "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].",
    ]
    assert e.kv_cache_layout is None  # §9: layout resolved in get_kv_cache_spec, not the selector


def test_blackwell_deepseek_gets_flashinfer_mla_with_its_preferred_block():
    e = explain(V033, mla(), SelectionContext(capability=B200, num_heads=128, qk_nope_head_dim=128))
    assert (e.selected, e.block_size) == ("FLASHINFER_MLA", 32)  # [32, 64]: 16 rejected -> smallest (§2)
    assert "Setting kv cache block size to 32 for FLASHINFER_MLA backend(s)." in e.warnings


def test_user_block_size_precluding_higher_priority_backends_warns():
    # §9: counts only higher-priority backends whose ONLY reason was the block size
    e = explain(V033, mla(block_size=16), SelectionContext(capability=B200, num_heads=128, qk_nope_head_dim=128))
    assert (e.selected, e.block_size) == ("TRITON_MLA", 16)
    assert (
        "--block-size 16 precluded higher-priority backend(s) FLASHINFER_MLA, CUTLASS_MLA. Using TRITON_MLA "
        "instead, which may result in reduced performance. Consider removing --block-size to auto-select "
        "the optimal block size."
    ) in e.warnings


def test_explicit_backend_with_a_bad_block_size_is_the_selector_error_in_033():
    # the seed's "User-specified --block-size ... incompatible" lived in cuda.py's removed
    # _update_block_size_for_backend (§5f); 0.33 passes the user block size to the selector (§9)
    e = explain(V033, mla(block_size=16), SelectionContext(capability=B200, user_backend="CUTLASS_MLA"))
    assert e.error == (
        "Selected backend AttentionBackendEnum.CUTLASS_MLA is not valid for this configuration. "
        "Reason: ['block_size not supported']"
    )


def test_no_valid_backend_prints_the_033_selector_config():
    e = explain(V033, cfg(head_size=16, dtype="float32", kv_cache_dtype="fp8"), SelectionContext(capability=H100))
    assert e.error.startswith("No valid attention backend found for cuda with AttentionSelectorConfig(head_size=16, ")
    assert "attn_type=AttentionType.DECODER, has_sliding_window=False, use_non_causal=False" in e.error
    assert "use_dcp=False, use_rswa=False). Reasons: {FLASH_ATTN: [dtype not supported" in e.error


def test_gemma3_like_mm_prefix_head_256_uses_the_triton_composites():
    # §9: FA needs FA4 for mm_prefix; on SM90 head 256 resolves to FA3 -> TRITON_FLASH_ATTN first
    hopper = explain(V033, cfg(256, use_mm_prefix=True), SelectionContext(capability=H100))
    blackwell = explain(V033, cfg(256, use_mm_prefix=True), SelectionContext(capability=B200))
    assert hopper.selected == "TRITON_FLASH_ATTN" and blackwell.selected == "TRITON_FLASHINFER"


def test_batch_invariance_moves_blackwell_off_flashinfer():
    e = explain(V033, cfg(use_batch_invariant=True), SelectionContext(capability=B200, batch_invariant=True))
    assert e.backends[0].reasons == ("batch invariance not supported",)
    assert e.selected == "FLASH_ATTN"


# --- §9 block-size flow: one size every layer backend accepts ----------------------------------------
@pytest.mark.parametrize(
    "backends,expected",
    [
        (["FLASHMLA"], 64),
        (["FLASH_ATTN"], 16),
        (["FLASH_ATTN", "FLASHMLA"], 64),  # lcm(16, 64)
        (["FLASHINFER_MLA", "CUTLASS_MLA"], 128),  # lcm(32, 128)
        (["FLASH_ATTN", "TRITON_ATTN", "FLASH_ATTN"], 16),
    ],
)
def test_common_block_size(backends, expected):
    assert common_block_size(V033, backends, SelectionContext(capability=B200)) == expected


def test_aligned_block_size_error_names_the_backends():
    ctx = SelectionContext(capability=B200)
    assert aligned_block_size_error(V033, ["FLASH_ATTN", "CUTLASS_MLA"], 64, ctx) == (
        "Aligned KV cache block size 64 is not supported by attention backend(s): CUTLASS_MLA."
    )
    assert aligned_block_size_error(V033, ["FLASH_ATTN"], 64, ctx) is None


# --- §9 ViT ---------------------------------------------------------------------------------------
def test_vit_below_cc80_reaches_sdpa_before_triton():
    # seed: TRITON_ATTN (SDPA skipped, §8); 0.33: [FA, SDPA, TRITON, FLASHINFER], SDPA returned
    assert vit_backend(SEED, 64, "float16", T4).backend == "TRITON_ATTN"
    assert vit_backend(V033, 64, "float16", T4).backend == "TORCH_SDPA"
    assert vit_backend(V033, 80, "bfloat16", H100).backend == "FLASH_ATTN"
    assert vit_backend(V033, 20, "bfloat16", H100).backend == "TORCH_SDPA"  # FA %8 fails, TRITON >=32 fails


# --- §9 model lists (attention/model/rules.py "0.33") ------------------------------------------------
def _derive(config, profile):
    return derive_model_facts(config, capability=H100, dtype="auto", profile=profile, env={})


MLA_CONFIG = {"hidden_size": 1024, "num_attention_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
              "qk_nope_head_dim": 128, "torch_dtype": "bfloat16"}


def test_axk1_spelling_changed():
    assert _derive({"model_type": "axk1", **MLA_CONFIG}, "0.33").use_mla is True
    assert _derive({"model_type": "AXK1", **MLA_CONFIG}, "seed").use_mla is True


def test_is_causal_false_turns_mla_off_in_033_only():
    config = {"model_type": "deepseek_v3", "is_causal": False, **MLA_CONFIG}
    assert _derive(config, "seed").use_mla is True
    assert _derive(config, "0.33").use_mla is False


def test_deepseek_v4_uses_head_dim():
    config = {"model_type": "deepseek_v4", "hidden_size": 4096, "num_attention_heads": 64, "head_dim": 512,
              "torch_dtype": "bfloat16"}
    facts = _derive(config, "0.33")
    assert (facts.use_mla, facts.head_size) == (True, 512)


def test_mm_prefix_list_adds_bagel_and_plamo2_float16_allowed():
    bagel = {"model_type": "bagel", "hidden_size": 2048, "num_attention_heads": 16, "torch_dtype": "bfloat16"}
    assert _derive(bagel, "0.33").use_mm_prefix is True
    plamo2 = {"model_type": "plamo2", "hidden_size": 2048, "num_attention_heads": 16, "torch_dtype": "bfloat16"}
    assert derive_model_facts(plamo2, capability=H100, dtype="float16", profile="0.33", env={}).dtype == "float16"


# --- §9 registry: removed, model-driven and missing-module backends ----------------------------------
def test_tree_attn_was_removed_from_the_registry():
    from attnsel.errors import UserInputError

    with pytest.raises(UserInputError, match="Unknown attention backend: 'TREE_ATTN'"):
        explain(V033, cfg(), SelectionContext(capability=H100, user_backend="tree_attn"))
    assert explain(SEED, cfg(), SelectionContext(capability=H100, user_backend="TREE_ATTN")).selected == "TREE_ATTN"


def test_model_driven_backend_is_a_clear_not_modelled_exit_2():
    from attnsel.errors import UserInputError

    with pytest.raises(UserInputError, match="B12X: model-driven or explicit only"):
        explain(V033, cfg(), SelectionContext(capability=B200, user_backend="B12X"))


def test_no_attention_import_reason_uses_the_033_wording():
    e = explain(V033, cfg(), SelectionContext(capability=H100, user_backend="NO_ATTENTION"))
    assert e.explicit_backend.reasons == (
        "ModuleNotFoundError: No module named 'vllm.v1.attention.backends.no_attention'",
    )
