"""Priorities, selection, block-size logic, messages and the ViT rule of the seed-era profile.

Expectations derived by hand from docs/vllm-rules.md §4, §5, §8 (the seed's vllm/platforms/cuda.py).
"""

import pytest

from attnsel.attention.rules import (
    MultipleOf,
    SelectionContext,
    SelectorInputs,
    VllmRaises,
)
from attnsel.attention.selector import vit_backend
from attnsel.attention.selector.engine import (
    backend_kernel_block_size,
    explain,
    select_attention_backend,
)
from attnsel.attention.versions import get_profile
from attnsel.errors import UserInputError

PROFILE = get_profile()

H100, A100, T4, B200, B300, RTX5090 = (9, 0), (8, 0), (7, 5), (10, 0), (10, 3), (12, 0)
MLA_BLACKWELL = ["FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"]


def cfg(head_size=128, dtype="bfloat16", **kw):
    return SelectorInputs(head_size=head_size, dtype=dtype, **kw)


def deepseek(**kw):
    return cfg(576, use_mla=True, **kw)


# --- §5a priorities --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "use_mla,cc,num_heads,expected",
    [
        (True, B200, 16, [*MLA_BLACKWELL, "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]),  # heads <= 16
        (True, B200, 17, [*MLA_BLACKWELL, "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"]),
        (True, B200, None, [*MLA_BLACKWELL, "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"]),  # num_heads None
        (True, B300, 8, [*MLA_BLACKWELL, "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]),  # major == 10
        (True, H100, 8, ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE"]),
        (True, RTX5090, 8, ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE"]),
        (False, B200, None, ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"]),
        (False, B300, None, ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"]),
        (False, RTX5090, None, ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]),  # SM12x: "other"
        (False, (11, 0), None, ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]),
        (False, H100, None, ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]),
    ],
)
def test_priority_lists(use_mla, cc, num_heads, expected):
    # docs/vllm-rules.md §5a, cuda.py _get_backend_priorities
    inputs = deepseek() if use_mla else cfg()
    assert PROFILE.priority_list(inputs, SelectionContext(capability=cc, num_heads=num_heads)) == expected


# --- preferred / kernel block sizes (§2, §5f) ------------------------------------------------------
@pytest.mark.parametrize(
    "backend,expected",
    [("FLASHMLA", 64), ("CUTLASS_MLA", 128), ("FLASHINFER_MLA", 32), ("FLASHMLA_SPARSE", 64),
     ("FLASHINFER_MLA_SPARSE", 32), ("FLASH_ATTN", 16), ("FLASHINFER", 16), ("TRITON_ATTN", 16),
     ("FLEX_ATTENTION", 16), ("TRITON_MLA", 16), ("FLASH_ATTN_MLA", 16)],
)
def test_automatic_block_sizes(backend, expected):
    # docs/vllm-rules.md §5f "Resulting automatic block sizes with the defaults"
    assert PROFILE.preferred_block_size(backend, SelectionContext(capability=H100), 16) == expected


def test_flash_attn_kernel_blocks_for_hybrid_float32_mamba():
    # docs/vllm-rules.md §3a FLASH_ATTN: [16,32,64] for hybrid models with float32 Mamba cache
    plain = SelectionContext(capability=H100)
    hybrid = SelectionContext(capability=H100, is_hybrid=True, mamba_cache_float32=True)
    assert PROFILE.kernel_block_sizes("FLASH_ATTN", plain) == [MultipleOf(16)]
    assert PROFILE.kernel_block_sizes("FLASH_ATTN", hybrid) == [16, 32, 64]
    assert PROFILE.kernel_block_sizes("FLASH_ATTN", SelectionContext(capability=H100, is_hybrid=True)) == [MultipleOf(16)]


@pytest.mark.parametrize(
    "backend,block_size,hybrid,expected",
    [
        ("FLASHINFER", 128, False, 64),  # largest int kernel size dividing 128
        ("FLASHINFER", 32, False, 32),  # exact
        ("FLASHMLA", 256, False, 64),
        ("CUTLASS_MLA", 256, False, 128),
        ("FLASH_ATTN", 128, False, 128),  # MultipleOf(16) accepts 128 as is
        ("FLASH_ATTN", 128, True, 64),  # hybrid float32 Mamba: [16, 32, 64]
        ("TRITON_MLA", 8, False, 8),  # MultipleOf(1)
    ],
)
def test_kernel_block_size(backend, block_size, hybrid, expected):
    # vLLM select_common_block_size (vllm/v1/worker/utils.py), one backend per KV-cache group
    ctx = SelectionContext(capability=B200, is_hybrid=hybrid, mamba_cache_float32=hybrid)
    assert backend_kernel_block_size(PROFILE, backend, block_size, ctx) == expected


# --- end-to-end selections (§5c, §5d, §5f) ---------------------------------------------------------
def test_h100_llama_picks_flash_attn_and_logs_the_tuple():
    e = explain(PROFILE, cfg(), SelectionContext(capability=H100))
    assert (e.selected, e.block_size, e.kernel_block_size, e.exit_code) == ("FLASH_ATTN", 16, 16, 0)
    # seed get_attn_backend_cls: tuple, no trailing period (docs/vllm-rules.md §5d)
    assert e.warnings == [
        "Using FLASH_ATTN attention backend out of potential backends: "
        "('FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION')"
    ]
    assert e.vllm_args == ["--attention-backend", "FLASH_ATTN", "--block-size", "16"]


def test_b200_picks_flashinfer_with_hnd_layout():
    e = explain(PROFILE, cfg(), SelectionContext(capability=B200))
    assert e.selected == "FLASHINFER"  # §5a FI first on major 10
    assert e.kv_cache_layout == "HND"  # §3a required layout HND on CC major 10
    assert "Using HND KV cache layout for FLASHINFER backend." in e.warnings  # §5e


def test_single_valid_backend_prints_a_one_tuple():
    e = explain(PROFILE, cfg(64, has_sink=True), SelectionContext(capability=A100))
    assert e.selected == "TRITON_ATTN"  # gpt-oss on A100: FA2 and FI have no sinks (§3a)
    assert e.warnings[-1] == "Using TRITON_ATTN attention backend out of potential backends: ('TRITON_ATTN',)"


@pytest.mark.parametrize(
    "cc,num_heads,qk_nope,expected_backend,expected_block",
    [
        (H100, 128, 128, "FLASH_ATTN_MLA", 16),  # §5a FA_MLA first on 9.x; MultipleOf(16) -> 16
        (B200, 128, 128, "FLASHINFER_MLA", 32),  # qk_nope 128 -> FI_MLA, preferred 32
        (B200, 128, None, "CUTLASS_MLA", 128),  # qk_nope absent = 1 -> FI_MLA invalid; CUTLASS 128
        (A100, 128, 128, "TRITON_MLA", 16),
    ],
)
def test_mla_selection(cc, num_heads, qk_nope, expected_backend, expected_block):
    e = explain(PROFILE, deepseek(), SelectionContext(capability=cc, num_heads=num_heads, qk_nope_head_dim=qk_nope))
    assert (e.selected, e.block_size) == (expected_backend, expected_block)
    if expected_block != 16:
        assert f"Setting kv cache block size to {expected_block} for {expected_backend} backend." in e.warnings


@pytest.mark.parametrize(
    "cc,num_heads,expected_backend,expected_block",
    [
        (H100, 128, "FLASHMLA_SPARSE", 64),  # the only sparse backend on 9.x
        (B200, 16, "FLASHINFER_MLA_SPARSE", 32),  # heads/GPU <= 16 puts FI sparse first
        (B200, 128, "FLASHMLA_SPARSE", 64),
    ],
)
def test_sparse_mla_selection(cc, num_heads, expected_backend, expected_block):
    ctx = SelectionContext(capability=cc, num_heads=num_heads, qk_nope_head_dim=128, has_index_topk=True)
    e = explain(PROFILE, deepseek(use_sparse=True), ctx)
    assert (e.selected, e.block_size) == (expected_backend, expected_block)


def test_user_block_size_that_pushes_past_the_preferred_backend_warns():
    # docs/vllm-rules.md §5f step 6: B200 DeepSeek --block-size 16 -> FI_MLA [32,64] and CUTLASS [128] refuse
    ctx = SelectionContext(capability=B200, num_heads=128, qk_nope_head_dim=128)
    e = explain(PROFILE, deepseek(block_size=16), ctx)
    assert (e.selected, e.block_size) == ("TRITON_MLA", 16)
    assert e.warnings[0] == (
        "--block-size 16 is not supported by the preferred FLASHINFER_MLA backend. Using TRITON_MLA instead, "
        "which may result in reduced performance. Consider removing --block-size to auto-select the optimal "
        "block size."
    )


def test_block_size_8_on_t4_falls_to_flex_with_warning():
    # §3a: TRITON_ATTN needs MultipleOf(16); FLEX takes MultipleOf(1); §5f warning names the preferred one
    e = explain(PROFILE, cfg(80, "float16", block_size=8), SelectionContext(capability=T4))
    assert (e.selected, e.block_size, e.exit_code) == ("FLEX_ATTENTION", 8, 0)
    assert e.warnings[0].startswith("--block-size 8 is not supported by the preferred TRITON_ATTN backend. Using FLEX_ATTENTION instead")


def test_explicit_backend_with_incompatible_block_size_raises_the_user_specified_error():
    # docs/vllm-rules.md §5f step 8, second bullet
    ctx = SelectionContext(capability=H100, user_backend="flashinfer")
    e = explain(PROFILE, cfg(block_size=8), ctx)
    assert e.exit_code == 1 and e.selected is None
    assert e.error == (
        "User-specified --block-size 8 is incompatible with the specified --attention-backend FLASHINFER "
        "(supported kernel block sizes: [16, 32, 64]). Either remove --block-size to auto-select, or choose "
        "a compatible value."
    )


def test_user_specified_error_whatever_the_real_reason():
    # docs/vllm-rules.md §5f step 8: "This happens whatever the real reason was" (here: head size 80)
    e = explain(PROFILE, cfg(80, block_size=16), SelectionContext(capability=H100, user_backend="FLASHINFER"))
    assert e.error.startswith("User-specified --block-size 16 is incompatible with the specified --attention-backend FLASHINFER")


def test_explicit_multiple_of_backend_prints_the_object_repr():
    # MultipleOf has no __repr__ in vLLM (docs/vllm-rules.md §2), so vLLM prints an object repr
    e = explain(PROFILE, cfg(block_size=8), SelectionContext(capability=H100, user_backend="FLASH_ATTN"))
    assert "(supported kernel block sizes: [<vllm.v1.attention.backend.MultipleOf object at 0x...>])" in e.error


def test_no_backend_for_user_block_size():
    # docs/vllm-rules.md §5f step 8, third bullet. H100, head 16, fp32, kv fp8, --block-size 8
    e = explain(PROFILE, cfg(16, "float32", kv_cache_dtype="fp8", block_size=8), SelectionContext(capability=H100))
    assert e.error == (
        "No valid attention backend found for --block-size 8. Reasons: {"
        "FLASH_ATTN: [dtype not supported, block_size not supported], "
        "FLASHINFER: [head_size not supported, dtype not supported, block_size not supported], "
        "TRITON_ATTN: [head_size not supported, block_size not supported], "
        "FLEX_ATTENTION: [kv_cache_dtype not supported]}. "
        "Either remove --block-size to auto-select, or choose a compatible value."
    )


def test_no_backend_without_block_size_is_raised_by_the_layer_with_block_size_16():
    # docs/vllm-rules.md §5f (deferred) + §5c message; block_size=16 because the platform set it (§5f step 2)
    e = explain(PROFILE, cfg(16, "float32", kv_cache_dtype="fp8"), SelectionContext(capability=H100))
    assert e.error_phase == "layer"
    assert e.error == (
        "No valid attention backend found for cuda with AttentionSelectorConfig(head_size=16, "
        "dtype=torch.float32, kv_cache_dtype=fp8, block_size=16, use_mla=False, has_sink=False, "
        "use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False, "
        "attn_type=AttentionType.DECODER). Reasons: {FLASH_ATTN: [dtype not supported], "
        "FLASHINFER: [head_size not supported, dtype not supported], TRITON_ATTN: [head_size not supported], "
        "FLEX_ATTENTION: [kv_cache_dtype not supported]}."
    )


def test_explicit_invalid_backend_raises_selected_backend_error():
    # docs/vllm-rules.md §5c step 1: enum repr + Python list repr
    e = explain(PROFILE, cfg(), SelectionContext(capability=H100, user_backend="FLASHMLA"))
    assert e.error == (
        "Selected backend AttentionBackendEnum.FLASHMLA is not valid for this configuration. "
        "Reason: ['head_size not supported', 'block_size not supported', 'non-MLA not supported']"
    )


def test_explicit_valid_backend_logs_enum():
    e = explain(PROFILE, cfg(), SelectionContext(capability=H100, user_backend="triton_attn"))
    assert e.selected == "TRITON_ATTN"
    assert e.warnings == ["Using AttentionBackendEnum.TRITON_ATTN backend."]  # §5d explicit


def test_tree_attn_only_when_named():
    e = explain(PROFILE, cfg(), SelectionContext(capability=H100, user_backend="TREE_ATTN"))
    assert e.selected == "TREE_ATTN" and e.explicit_backend.priority is None  # §5a never automatic


def test_unregistered_enum_members_raise_their_own_value_error():
    # docs/vllm-rules.md §9 "Not CUDA" table: TORCH_SDPA value "", CUSTOM None -> get_path raises
    e = explain(PROFILE, cfg(), SelectionContext(capability=H100, user_backend="TORCH_SDPA"))
    assert e.error == (
        "Backend TORCH_SDPA must be registered before use. "
        "Use register_backend(Backend.TORCH_SDPA, 'your.module.YourClass')"
    )


def test_no_attention_is_an_import_error():
    # docs/vllm-rules.md §9: no no_attention module in the 0.17.0 wheel -> ImportError reason
    e = explain(PROFILE, cfg(), SelectionContext(capability=H100, user_backend="NO_ATTENTION"))
    assert e.error == (
        "Selected backend AttentionBackendEnum.NO_ATTENTION is not valid for this configuration. "
        "Reason: ['ImportError']"
    )


def test_bf16_below_sm80_is_vllms_dtype_error():
    # docs/vllm-rules.md §5g
    e = explain(PROFILE, cfg(dtype="bfloat16"), SelectionContext(capability=T4, gpu_name="Tesla T4"))
    assert e.error == (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
        "compute capability 7.5. You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
        "for example: --dtype=half."
    )


def test_missing_flashinfer_package_reports_import_error_and_moves_on():
    # docs/vllm-rules.md §5b: ImportError reason; B200 then falls to FLASH_ATTN
    ctx = SelectionContext(capability=B200, importable={"flashinfer": False})
    e = explain(PROFILE, cfg(), ctx)
    assert e.backends[0].reasons == ("ImportError",)
    assert e.selected == "FLASH_ATTN"


def test_fa_override_3_on_blackwell_is_logged():
    ctx = SelectionContext(capability=B200, flash_attn_version_override=3)
    e = explain(PROFILE, cfg(), ctx)
    assert e.warnings[0] == (
        "Cannot use FA version 3 on Blackwell platform, defaulting to FA version 4 if supported, otherwise FA2."
    )


def test_hybrid_model_skips_the_block_size_step():
    # docs/vllm-rules.md §5f step 3: hybrid models are skipped (HybridAttentionMambaModelConfig)
    e = explain(PROFILE, deepseek(), SelectionContext(capability=B200, is_hybrid=True, qk_nope_head_dim=128))
    assert e.selected == "FLASHINFER_MLA" and e.block_size is None
    assert not any(w.startswith("Setting kv cache block size") for w in e.warnings)


def test_select_attention_backend_without_raising_returns_none():
    ctx = SelectionContext(capability=H100)
    assert select_attention_backend(PROFILE, None, cfg(16, "float32", kv_cache_dtype="fp8"), ctx, raise_on_invalid=False) is None
    with pytest.raises(VllmRaises):
        select_attention_backend(PROFILE, None, cfg(16, "float32", kv_cache_dtype="fp8"), ctx)


# --- bad input (§4, §7) -----------------------------------------------------------------------------
def test_unknown_backend_lists_this_platforms_backends_and_suggests():
    with pytest.raises(UserInputError) as info:
        explain(PROFILE, cfg(), SelectionContext(capability=H100, user_backend="flashinfer_mla_sparce"))
    message = info.value.message
    assert message.startswith("Unknown attention backend: 'FLASHINFER_MLA_SPARCE'. Did you mean FLASHINFER_MLA_SPARSE")
    assert f"CUDA backends of vLLM {PROFILE.vllm_version}: FLASH_ATTN, " in message
    assert "CPU_ATTN" not in message and "ROCM" not in message  # other platforms' backends are no help


def test_invalid_kv_cache_dtype_message():
    with pytest.raises(UserInputError) as info:
        explain(PROFILE, cfg(kv_cache_dtype="fp4"), SelectionContext(capability=H100))
    assert info.value.message == (
        "Invalid kv_cache_dtype: fp4. Valid values are: "
        "('auto', 'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', 'fp8_ds_mla')"
    )


def test_rocm_backend_is_not_modelled():
    with pytest.raises(UserInputError, match="ROCm"):
        explain(PROFILE, cfg(), SelectionContext(capability=H100, user_backend="ROCM_ATTN"))


# --- §8 ViT -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "head_size,dtype,cc,expected",
    [
        (80, "bfloat16", H100, "FLASH_ATTN"),  # CC>=8, hs%8, <=256, fp16/bf16
        (80, "float16", T4, "TRITON_ATTN"),  # FA needs CC 8.0
        (72, "float32", H100, "TRITON_ATTN"),  # FA no fp32
        (264, "bfloat16", H100, "TRITON_ATTN"),  # FA hs <= 256
        (20, "bfloat16", H100, "TORCH_SDPA"),  # FA hs%8, Triton hs >= 32
        (20, "bfloat16", A100, "TORCH_SDPA"),
    ],
)
def test_vit_backend(head_size, dtype, cc, expected):
    assert vit_backend(PROFILE, head_size, dtype, cc).backend == expected


def test_vit_override_outside_the_list_is_vllms_assertion():
    with pytest.raises(VllmRaises) as info:
        vit_backend(PROFILE, 80, "bfloat16", H100, override="FLASHINFER")
    assert info.value.message == (
        "Backend AttentionBackendEnum.FLASHINFER is not supported for vit attention. Supported backends are: "
        "[<AttentionBackendEnum.FLASH_ATTN: 'vllm.v1.attention.backends.flash_attn.FlashAttentionBackend'>, "
        "<AttentionBackendEnum.TRITON_ATTN: 'vllm.v1.attention.backends.triton_attn.TritonAttentionBackend'>, "
        "<AttentionBackendEnum.TORCH_SDPA: ''>]"
    )
    assert vit_backend(PROFILE, 80, "bfloat16", H100, override="torch_sdpa").log == (
        "Using backend AttentionBackendEnum.TORCH_SDPA for vit attention"
    )


def test_selector_fields_are_a_profile_parameter():
    # docs/vllm-rules.md §2: v0.17.0 adds use_per_head_quant_scales before attn_type; the strict seed lacks it
    strict = PROFILE.with_params(selector_fields=[
        "head_size", "dtype", "kv_cache_dtype", "block_size", "use_mla", "has_sink", "use_sparse",
        "use_mm_prefix", "attn_type",
    ])
    assert cfg(block_size=16).vllm_repr(strict) == (
        "AttentionSelectorConfig(head_size=128, dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=16, "
        "use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False, attn_type=AttentionType.DECODER)"
    )
    assert "use_per_head_quant_scales=False, attn_type=AttentionType.DECODER)" in cfg().vllm_repr(PROFILE)
