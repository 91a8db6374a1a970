"""validate_configuration of the vLLM 0.33 profile, backend by backend.

Every expectation is read from docs/vllm-rules.md §9 (0.33 column; §2 for the reason
texts that did not change); the comment names the row. Inputs default to a plain decoder, bf16,
kv auto, no block size.
"""

import pytest

from attnsel.attention.rules import SelectionContext, SelectorInputs
from attnsel.attention.versions import get_profile

PROFILE = get_profile("0.33")

H100, A100, T4, B200, RTX5090 = (9, 0), (8, 0), (7, 5), (10, 0), (12, 0)
FA4_CUTE = "vllm.vllm_flash_attn.cute.interface"
FP8_MSG = "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100"
MM_FA4_MSG = (
    "mm_prefix (PrefixLM bidirectional attention) requires FlashAttention v4, which does not resolve for this head_size"
)
MLA = dict(head_size=576, use_mla=True)
R1 = dict(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)

# (backend, capability, inputs kwargs, context kwargs, expected reasons)  # docs/vllm-rules.md section
CASES = [
    # --- FLASH_ATTN (§9 FLASH_ATTN row) ---
    ("FLASH_ATTN", H100, {}, {}, []),
    ("FLASH_ATTN", H100, {"head_size": 512}, {}, []),  # <=512 if FA4 is supported
    ("FLASH_ATTN", H100, {"head_size": 512}, {"importable": {FA4_CUTE: False}}, ["head_size not supported"]),
    ("FLASH_ATTN", A100, {"head_size": 320}, {}, ["head_size not supported"]),  # no FA4 on 8.x: <=256
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "fp8"}, {}, []),  # FA3 on SM90
    ("FLASH_ATTN", B200, {"kv_cache_dtype": "fp8_e4m3"}, {}, []),  # FA4 on SM100
    # fp8 outside SM90/SM100: supports_kv_cache_dtype asks FA too, AND supports_combination says why
    # (vLLM 0.33 flash_attn.py; recorded in tests/fixtures/parity/parity_033.json)
    ("FLASH_ATTN", A100, {"kv_cache_dtype": "fp8"}, {}, ["kv_cache_dtype not supported", FP8_MSG]),
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "fp8_e5m2"}, {}, ["kv_cache_dtype not supported", FP8_MSG]),
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "float16"}, {}, []),
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "fp8", "use_mm_prefix": True}, {},
     ["SM90 FP8 KV with mm_prefix requires Triton"]),
    ("FLASH_ATTN", H100, {"head_size": 256, "use_mm_prefix": True}, {}, [MM_FA4_MSG]),  # FA3 resolves for 256
    ("FLASH_ATTN", H100, {"head_size": 512, "use_mm_prefix": True}, {}, []),  # FA3 -> FA4 for head > 256
    # no FA4 on 8.x: mm_prefix unsupported, and the combination check says FA4 does not resolve
    ("FLASH_ATTN", A100, {"use_mm_prefix": True}, {}, ["partial multimodal token full attention not supported", MM_FA4_MSG]),
    ("FLASH_ATTN", H100, {"has_sink": True}, {}, []),  # sink iff FA 3 or 4
    ("FLASH_ATTN", B200, {"has_sink": True}, {}, []),
    ("FLASH_ATTN", H100, {"has_sliding_window": True, "use_rswa": True, "use_non_causal": True,
                          "use_batch_invariant": True}, {}, []),
    # --- FLASHINFER (§9 FLASHINFER row) ---
    ("FLASHINFER", A100, {"head_size": 512}, {}, []),  # heads + 512
    ("FLASHINFER", T4, {"dtype": "float16"}, {}, ["compute capability not supported"]),  # CC 8.0-12.1
    ("FLASHINFER", B200, {"kv_cache_dtype": "nvfp4"}, {}, []),
    ("FLASHINFER", H100, {"has_sink": True}, {}, []),  # TRT-LLM on 9.0
    ("FLASHINFER", A100, {"has_sink": True}, {}, ["attention sinks not supported"]),
    ("FLASHINFER", H100, {"has_sink": True}, {"use_trtllm_attention": False}, ["attention sinks not supported"]),
    ("FLASHINFER", B200, {"has_sliding_window": True, "use_non_causal": True}, {}, []),
    ("FLASHINFER", B200, {"use_batch_invariant": True}, {}, ["batch invariance not supported"]),  # §7
    ("FLASHINFER", B200, {}, {"importable": {"flashinfer": False}},
     ["ModuleNotFoundError: No module named 'flashinfer'"]),  # §9 import reason
    # --- TRITON_ATTN / FLEX_ATTENTION / TURBOQUANT ---
    ("TRITON_ATTN", H100, {"block_size": 48}, {}, []),  # bs % 16, no Literal
    ("TRITON_ATTN", H100, {"block_size": 40}, {}, ["block_size not supported"]),
    ("TRITON_ATTN", H100, {"kv_cache_dtype": "int8_per_token_head"}, {}, []),
    ("FLEX_ATTENTION", H100, {"block_size": 8}, {}, ["block_size not supported"]),  # MultipleOf(16)
    ("TURBOQUANT", H100, {}, {}, ["kv_cache_dtype not supported"]),  # valid only with turboquant_*
    ("TURBOQUANT", H100, {"kv_cache_dtype": "turboquant_k8v4"}, {}, []),
    ("FLASH_ATTN", H100, {"kv_cache_dtype": "turboquant_k8v4"}, {}, ["kv_cache_dtype not supported"]),
    # --- MLA (§9 MLA rows) ---
    ("FLASHINFER_MLA", B200, MLA, {"qk_nope_head_dim": 64}, []),  # qk_nope in {64,128,192}
    ("FLASHINFER_MLA", B200, MLA, {"qk_nope_head_dim": 96},
     ["FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got 96"]),
    ("TRITON_MLA", H100, {**MLA, "head_size": 100, "kv_cache_dtype": "fp8"}, {}, []),  # any head, + fp8
    ("TRITON_MLA", H100, {**MLA, "block_size": 8}, {}, ["block_size not supported"]),  # bs % 16
    ("FLASH_ATTN_MLA", H100, {**MLA, "head_size": 512}, {}, []),  # MLA base heads [320, 512, 576]
    ("FLASHMLA_SPARSE", H100, {**MLA, "use_sparse": True, "kv_cache_dtype": "fp8"}, {}, []),  # kv + fp8
    ("TOKENSPEED_MLA", B200, {**MLA, "kv_cache_dtype": "fp8"}, R1, []),  # CC10, fp8, R1 dims
    ("CUTLASS_MLA", B200, {**MLA, "block_size": 64}, {}, ["block_size not supported"]),  # [128]
]


@pytest.mark.parametrize("backend,cc,inputs_kw,ctx_kw,expected", CASES)
def test_validate_configuration_033(backend, cc, inputs_kw, ctx_kw, expected):
    inputs = SelectorInputs(**{"head_size": 128, "dtype": "bfloat16", **inputs_kw})
    assert PROFILE.validate(backend, inputs, SelectionContext(capability=cc, **ctx_kw)) == expected


def test_tokenspeed_needs_fp8_kv():
    # §9 TOKENSPEED_MLA "kv fp8 only"
    inputs = SelectorInputs(head_size=576, dtype="bfloat16", use_mla=True)
    reasons = PROFILE.validate("TOKENSPEED_MLA", inputs, SelectionContext(capability=B200, **R1))
    assert reasons[0] == "kv_cache_dtype not supported"


def test_flash_attn_sink_on_ampere_reports_the_renamed_reason_first():
    # §9: sinks need FA 3 or 4, and the reason is "attention sinks not supported"
    inputs = SelectorInputs(head_size=128, dtype="bfloat16", has_sink=True)
    assert PROFILE.validate("FLASH_ATTN", inputs, SelectionContext(capability=A100))[0] == "attention sinks not supported"


def test_new_reasons_come_after_the_attention_type_in_order():
    # §9 lists them in this order; they follow `attention type ... not supported` (§2 #10)
    inputs = SelectorInputs(head_size=128, dtype="bfloat16", attn_type="encoder", has_sliding_window=True,
                            use_non_causal=True, use_batch_invariant=True)
    assert PROFILE.validate("FLASHMLA", inputs, SelectionContext(capability=H100))[-4:] == [
        "attention type AttentionType.ENCODER not supported",
        "sliding window not supported",
        "non-causal attention not supported",
        "batch invariance not supported",
    ]
