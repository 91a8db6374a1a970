"""validate_configuration of the seed-era profile, backend by backend (docs/vllm-rules.md §2, §3, §3c).

Every expectation was derived by hand from docs/vllm-rules.md; the comment names the
section. Inputs default to a plain decoder, bf16, kv auto, no block size.
"""

import pytest

from attnsel.attention.rules import SelectionContext, SelectorInputs
from attnsel.attention.versions import get_profile

PROFILE = get_profile("seed_0_17")

H100, A100, T4, V100, B200, B300, RTX5090, GB10 = (9, 0), (8, 0), (7, 5), (7, 0), (10, 0), (10, 3), (12, 0), (12, 1)

FA2_C = "vllm.vllm_flash_attn._vllm_fa2_C"
FA3_C = "vllm.vllm_flash_attn._vllm_fa3_C"
FA4_CUTE = "vllm.vllm_flash_attn.cute.interface"


def inputs(head_size=128, dtype="bfloat16", **kw):
    return SelectorInputs(head_size=head_size, dtype=dtype, **kw)


MLA = dict(head_size=576, use_mla=True)

# (backend, capability, inputs kwargs, context kwargs, expected reasons)  # docs/vllm-rules.md section
CASES = [
    # --- FLASH_ATTN (§3a) ---
    ("FLASH_ATTN", H100, {}, {}, []),  # §3a all defaults fine
    ("FLASH_ATTN", H100, {"head_size": 72}, {}, []),  # §3a hs%8==0 and hs<=256
    ("FLASH_ATTN", H100, {"head_size": 100}, {}, ["head_size not supported"]),  # §3a hs%8
    ("FLASH_ATTN", H100, {"head_size": 264}, {}, ["head_size not supported"]),  # §3a hs<=256
    ("FLASH_ATTN", H100, {"dtype": "float32"}, {}, ["dtype not supported"]),  # §3a fp16/bf16
    ("FLASH_ATTN", T4, {"dtype": "float16"}, {}, ["compute capability not supported"]),  # §3a CC >= 8.0
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "fp8"}, {}, []),  # §3a fp8 iff FA3 on 9.x
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "fp8_e5m2"}, {}, []),  # §3a any "fp8*" string
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "fp8"}, {"flash_attn_version_override": 2},
     ["kv_cache_dtype not supported"]),  # §3c override 2 -> FA2 -> no fp8
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "fp8"}, {"importable": {FA3_C: False}},
     ["kv_cache_dtype not supported"]),  # §3c FA3 needs _vllm_fa3_C
    ("FLASH_ATTN", A100, {"kv_cache_dtype": "fp8"}, {}, ["kv_cache_dtype not supported"]),  # §3a FA2 on 8.x
    ("FLASH_ATTN", B200, {"kv_cache_dtype": "fp8"}, {}, ["kv_cache_dtype not supported"]),  # §3c FA4 on 10.x, fp8 needs 3
    ("FLASH_ATTN", H100, {"has_sink": True}, {}, []),  # §3a sink iff FA3
    ("FLASH_ATTN", B200, {"has_sink": True}, {}, ["sink setting not supported"]),  # §3c 0.17: FA4 on 10.x, sinks need 3
    ("FLASH_ATTN", B200, {"has_sink": True}, {"flash_attn_version_override": 3},
     ["sink setting not supported"]),  # §3c v3 on Blackwell -> 4
    ("FLASH_ATTN", A100, {"has_sink": True}, {},
     ["sink setting not supported", "sink not supported on compute capability < 9.0"]),  # §3a combination
    ("FLASH_ATTN", H100, {"use_mm_prefix": True}, {},
     ["partial multimodal token full attention not supported"]),  # §3a mm_prefix False
    ("FLASH_ATTN", H100, {"attn_type": "encoder_only"}, {}, []),  # §3a all four attention types
    ("FLASH_ATTN", H100, {"head_size": 576, "use_mla": True}, {},
     ["head_size not supported", "MLA not supported"]),  # §2 #1 and #6
    ("FLASH_ATTN", H100, {"block_size": 8}, {}, ["block_size not supported"]),  # §3a MultipleOf(16)
    ("FLASH_ATTN", H100, {"block_size": 48}, {}, ["block_size not supported"]),  # §2 BlockSize literal
    ("FLASH_ATTN", H100, {"block_size": 256}, {}, []),  # §3a MultipleOf(16)
    ("FLASH_ATTN", H100, {"block_size": 128}, {"is_hybrid": True, "mamba_cache_float32": True}, []),  # §2 64 | 128
    ("FLASH_ATTN", H100, {}, {"importable": {"vllm.vllm_flash_attn": False}}, ["ImportError"]),  # §3a Import, §5b
    ("FLASH_ATTN", H100, {"use_per_head_quant_scales": True}, {}, []),  # §3a 0.17.0: per-head iff FA>=3
    ("FLASH_ATTN", A100, {"use_per_head_quant_scales": True}, {},
     ["per-head quant scales not supported"]),  # §2 (0.17.0) row, FA2
    # --- FLASHINFER (§3a) ---
    ("FLASHINFER", T4, {"dtype": "float16"}, {}, []),  # §3a CC >= 7.5
    ("FLASHINFER", V100, {"dtype": "float16"}, {}, ["compute capability not supported"]),  # §3a
    ("FLASHINFER", GB10, {}, {}, []),  # §3a CC <= 12.1
    ("FLASHINFER", (12, 2), {}, {}, ["compute capability not supported"]),  # §3a CC <= 12.1
    ("FLASHINFER", H100, {"head_size": 80}, {}, ["head_size not supported"]),  # §3a [64,128,256]
    ("FLASHINFER", H100, {"kv_cache_dtype": "fp8_e5m2"}, {}, []),  # §3a kv list
    ("FLASHINFER", H100, {"kv_cache_dtype": "fp8_inc"}, {}, ["kv_cache_dtype not supported"]),  # §3a kv list
    ("FLASHINFER", H100, {"block_size": 128}, {}, []),  # §2 fixed 64 also accepts 128
    ("FLASHINFER", H100, {"block_size": 8}, {}, ["block_size not supported"]),  # §3a [16,32,64]
    ("FLASHINFER", B200, {"has_sink": True}, {}, []),  # §3a sink via TRT-LLM on 10.x
    ("FLASHINFER", B300, {"has_sink": True}, {}, []),  # §3a family 10.x
    ("FLASHINFER", H100, {"has_sink": True}, {}, ["sink setting not supported"]),  # §3a only family 10
    ("FLASHINFER", B200, {"has_sink": True}, {"use_trtllm_attention": False},
     ["sink setting not supported"]),  # §3a use_trtllm_attention False
    ("FLASHINFER", B200, {"has_sink": True}, {"batch_invariant": True},
     ["sink setting not supported"]),  # §7 VLLM_BATCH_INVARIANT
    ("FLASHINFER", B200, {"has_sink": True}, {"has_flashinfer_cubin": False},
     ["sink setting not supported"]),  # §3a has_nvidia_artifactory
    ("FLASHINFER", H100, {"attn_type": "encoder_only"}, {},
     ["attention type AttentionType.ENCODER_ONLY not supported"]),  # §2 #10, decoder only
    ("FLASHINFER", H100, {}, {"importable": {"flashinfer": False}}, ["ImportError"]),  # §3a Import
    # --- TRITON_ATTN (§3a) ---
    ("TRITON_ATTN", V100, {"dtype": "float32", "has_sink": True, "use_mm_prefix": True,
                           "attn_type": "encoder"}, {}, []),  # §3a fp32, sink, mm_prefix, any CC, all types
    ("TRITON_ATTN", H100, {"head_size": 16}, {}, ["head_size not supported"]),  # §3a hs >= 32
    ("TRITON_ATTN", H100, {"block_size": 8}, {}, ["block_size not supported"]),  # §3a MultipleOf(16)
    # --- FLEX_ATTENTION (§3a) ---
    ("FLEX_ATTENTION", H100, {"head_size": 20, "dtype": "float32", "block_size": 8}, {}, []),  # §3a any hs, MultipleOf(1)
    ("FLEX_ATTENTION", H100, {"block_size": 48}, {}, ["block_size not supported"]),  # §2 literal check first
    ("FLEX_ATTENTION", H100, {"attn_type": "encoder"}, {},
     ["attention type AttentionType.ENCODER not supported"]),  # §3a decoder, encoder_only
    ("FLEX_ATTENTION", H100, {"has_sink": True, "kv_cache_dtype": "fp8"}, {},
     ["kv_cache_dtype not supported", "sink setting not supported"]),  # §3a kv auto/bf16, no sink
    # --- TREE_ATTN (§3a) ---
    ("TREE_ATTN", H100, {"head_size": 80}, {}, ["head_size not supported"]),  # §3a head list
    # --- FLASH_ATTN_MLA (§3b) ---
    ("FLASH_ATTN_MLA", H100, MLA, {}, []),  # §3b major 9 + FA3
    ("FLASH_ATTN_MLA", A100, MLA, {},
     ["compute capability not supported", "FlashAttention MLA not supported on this device"]),  # §3b
    ("FLASH_ATTN_MLA", H100, MLA, {"importable": {FA3_C: False}},
     ["FlashAttention MLA not supported on this device"]),  # §3b needs FA3 supported
    ("FLASH_ATTN_MLA", H100, {**MLA, "kv_cache_dtype": "fp8"}, {}, ["kv_cache_dtype not supported"]),  # §3b kv
    # --- FLASHMLA (§3b) ---
    ("FLASHMLA", H100, {**MLA, "kv_cache_dtype": "fp8_e4m3"}, {}, []),  # §3b dense on 9.x
    ("FLASHMLA", H100, {**MLA, "block_size": 16}, {}, ["block_size not supported"]),  # §3b [64]
    ("FLASHMLA", B200, MLA, {}, ["FlashMLA Dense is only supported on Hopper devices."]),  # §3b dense on CC 10
    ("FLASHMLA", B200, {**MLA, "use_sparse": True}, {}, ["sparse not supported"]),  # §3b not sparse; sparse ok on 10
    ("FLASHMLA", A100, {**MLA, "use_sparse": True}, {},
     ["sparse not supported", "compute capability not supported",
      "FlashMLA Sparse is only supported on Hopper and Blackwell devices."]),  # §3b
    ("FLASHMLA", H100, MLA, {"importable": {"vllm._flashmla_C": False}},
     ["vllm._flashmla_C is not available, likely was not compiled due to insufficient nvcc version or a "
      "supported arch was not in the list of target arches to compile for."]),  # §3b helper messages
    ("FLASHMLA", H100, MLA, {"importable": {"vllm._flashmla_extension_C": False}},
     ["vllm._flashmla_extension_C is not available, likely was not compiled due to a build error."]),  # §3b
    # --- FLASHINFER_MLA (§3b) ---
    ("FLASHINFER_MLA", B200, MLA, {},
     ["FlashInfer MLA kernel requires qk_nope_head_dim == 128, but got 1"]),  # §3b default 1
    ("FLASHINFER_MLA", B200, MLA, {"qk_nope_head_dim": 128}, []),  # §3b
    ("FLASHINFER_MLA", B200, MLA, {"qk_nope_head_dim": 64},
     ["FlashInfer MLA kernel requires qk_nope_head_dim == 128, but got 64"]),  # §3b
    ("FLASHINFER_MLA", B200, {**MLA, "kv_cache_dtype": "fp8_e5m2"}, {"qk_nope_head_dim": 128},
     ["kv_cache_dtype not supported"]),  # §3b kv list
    ("FLASHINFER_MLA", H100, MLA, {"qk_nope_head_dim": 128}, ["compute capability not supported"]),  # §3b major 10
    # --- CUTLASS_MLA (§3b) ---
    ("CUTLASS_MLA", B200, {**MLA, "block_size": 256}, {}, []),  # §3b [128]
    ("CUTLASS_MLA", B200, {**MLA, "block_size": 64}, {}, ["block_size not supported"]),  # §3b [128]
    ("CUTLASS_MLA", RTX5090, MLA, {}, ["compute capability not supported"]),  # §3b major 10 only
    # --- TRITON_MLA (§3b) ---
    ("TRITON_MLA", V100, {**MLA, "dtype": "float16", "block_size": 1}, {}, []),  # §3b any CC, MultipleOf(1)
    ("TRITON_MLA", H100, {}, {}, ["head_size not supported", "non-MLA not supported"]),  # §3b head 576
    # --- FLASHMLA_SPARSE (§3b) ---
    ("FLASHMLA_SPARSE", H100, {**MLA, "use_sparse": True, "kv_cache_dtype": "fp8_ds_mla"}, {}, []),  # §3b
    ("FLASHMLA_SPARSE", H100, {**MLA, "use_sparse": True, "dtype": "float16"}, {}, ["dtype not supported"]),  # bf16 only
    ("FLASHMLA_SPARSE", H100, MLA, {}, ["non-sparse not supported"]),  # §2 #8
    # --- FLASHINFER_MLA_SPARSE (§3b) ---
    ("FLASHINFER_MLA_SPARSE", B200, {**MLA, "use_sparse": True}, {"qk_nope_head_dim": 128, "has_index_topk": True}, []),
    ("FLASHINFER_MLA_SPARSE", B200, {**MLA, "use_sparse": True}, {"qk_nope_head_dim": 128},
     ["FlashInfer MLA Sparse requires model with index_topk config"]),  # §3b
    ("FLASHINFER_MLA_SPARSE", B200, {**MLA, "use_sparse": True}, {"has_index_topk": True},
     ["FlashInfer MLA Sparse kernel requires qk_nope_head_dim == 128, but got 1"]),  # §3b qk_nope first
]


@pytest.mark.parametrize("backend,cc,inp,ctx_kw,expected", CASES)
def test_reasons_match_the_reference(backend, cc, inp, ctx_kw, expected):
    cfg = inputs(**inp)
    ctx = SelectionContext(capability=cc, **ctx_kw)
    assert PROFILE.validate(backend, cfg, ctx) == expected


def test_reasons_come_in_vllm_order():
    # docs/vllm-rules.md §2: head, dtype, kv, block, mm_prefix, MLA, sink, sparse, CC, attention type
    cfg = SelectorInputs(
        head_size=80, dtype="float32", kv_cache_dtype="fp8_inc", block_size=8, use_mla=True,
        has_sink=True, use_sparse=True, use_mm_prefix=True, attn_type="encoder",
    )
    reasons = PROFILE.validate("FLASHINFER", cfg, SelectionContext(capability=(7, 0)))
    assert reasons == [
        "head_size not supported",
        "dtype not supported",
        "kv_cache_dtype not supported",
        "block_size not supported",
        "partial multimodal token full attention not supported",
        "MLA not supported",
        "sink setting not supported",
        "sparse not supported",
        "compute capability not supported",
        "attention type AttentionType.ENCODER not supported",
    ]


@pytest.mark.parametrize(
    "cc,override,fa_modules_missing,expected",
    [
        ((9, 0), None, (), 3),  # §3c default 3 on major 9
        ((9, 0), None, (FA3_C,), 2),  # §3c FA3 unavailable -> 2
        ((8, 0), None, (), 2),  # §3c default 2
        ((7, 5), None, (), None),  # §3c FA2 needs CC >= 8 -> unsupported -> None
        ((10, 0), None, (), 4),  # §3c 0.17.0: 4 on major 10
        ((10, 0), None, (FA4_CUTE,), 2),  # §3c FA4 unavailable
        ((10, 0), 3, (), 4),  # §3c v3 on Blackwell -> 4 if supported
        ((10, 0), 3, (FA4_CUTE,), 2),  # §3c ... otherwise FA2
        ((12, 0), None, (), 2),  # §3c default 2 on 12.x
        ((12, 0), 4, (), None),  # §3c FA4 support: 9.x/10.x/11.x only
        ((11, 0), 4, (), 4),  # §3c FA4 on 11.x
        ((8, 0), 3, (), None),  # §3c FA3 needs 9.x
        ((9, 0), 4, (), 4),  # §3c FA4 on 9.x allowed by override
    ],
)
def test_flash_attn_version_resolution(cc, override, fa_modules_missing, expected):
    ctx = SelectionContext(
        capability=cc, flash_attn_version_override=override, importable={m: False for m in fa_modules_missing}
    )
    assert PROFILE.code.flash_attn_version(ctx).version == expected


def test_fa3_on_blackwell_logs_vllm_warning():
    # docs/vllm-rules.md §3c, 0.17.0 wording
    resolution = PROFILE.code.flash_attn_version(SelectionContext(capability=(10, 0), flash_attn_version_override=3))
    assert resolution.warnings == (
        "Cannot use FA version 3 on Blackwell platform, defaulting to FA version 4 if supported, otherwise FA2.",
    )


def test_fa4_head_size_rule_only_applies_with_a_head_size():
    # docs/vllm-rules.md §3c: the supports_* helpers call it without a head size
    ctx = SelectionContext(capability=(10, 0))
    assert PROFILE.code.flash_attn_version(ctx).version == 4
    resolution = PROFILE.code.flash_attn_version(ctx, head_size=256)
    assert resolution.version == 2
    assert resolution.warnings == (
        "FA4 on Blackwell does not support head_size=256 due to TMEM capacity limits, defaulting to FA version 2.",
    )


def test_0_16_fa_rules_are_a_profile_parameter():
    # docs/vllm-rules.md §3c v0.16.0 column: no FA4 default on Blackwell; v3 there falls back to 2
    old = PROFILE.with_params(flash_attn_version_rules="0.16.0")
    ctx = SelectionContext(capability=(10, 0), flash_attn_version_override=3)
    resolution = old.code.flash_attn_version(ctx)
    assert resolution.version == 2
    assert resolution.warnings == ("Cannot use FA version 3 on Blackwell platform, defaulting to FA version 2.",)
    assert old.code.flash_attn_version(SelectionContext(capability=(10, 0))).version == 2
