"""What changed from one vLLM release to the next between 0.26 and 0.33, as a user of `--vllm-version`
sees it: each test pins one step, read in the releases' wheels (file and function cited) and
checked against the real releases (tests/fixtures/parity/parity_0XX.json)."""

import pytest

from attnsel.attention.rules import SelectionContext, SelectorInputs
from attnsel.attention.selector import cudagraph, explain
from attnsel.attention.versions import get_profile

H100, B200 = (9, 0), (10, 0)


def cfg(head_size=128, dtype="bfloat16", **kw):
    return SelectorInputs(head_size=head_size, dtype=dtype, **kw)


def fa_version(version, cc, head_size, **kw):
    ctx = SelectionContext(capability=cc, **kw)
    return get_profile(version).code.flash_attn_version(ctx, head_size, cfg(head_size)).version


def test_fa4_head_256_on_blackwell_was_off_in_028_and_has_its_own_kernel_from_029():
    # fa_utils.get_flash_attn_version: 0.28 "FA4 on Blackwell is temporarily disabled for
    # head_size=256"; 0.29 adds the hd256 kernel (uses_fa4_hd256_kernel) with 128-token pages
    assert fa_version("0.28", B200, 256) == 2
    assert fa_version("0.29", B200, 256) == 4
    assert explain(get_profile("0.29"), cfg(256), SelectionContext(capability=B200, user_backend="FLASH_ATTN")).block_size == 128
    assert explain(get_profile("0.28"), cfg(256), SelectionContext(capability=B200, user_backend="FLASH_ATTN")).block_size == 16


def test_turboquant_kv_is_not_a_quantized_cache_for_flash_attention_before_033():
    # vllm/utils/torch_utils.py is_quantized_kv_cache (0.28-0.32): fp8*, *per_token_head, nvfp4*;
    # 0.33 asks get_kv_quant_mode, so FlashAttention adds its FP8 reason for TurboQuant too
    inputs, ctx = cfg(kv_cache_dtype="turboquant_4bit_nc"), SelectionContext(capability=(8, 0))
    reasons = {v: next(b for b in explain(get_profile(v), inputs, ctx).backends if b.name == "FLASH_ATTN").reasons
               for v in ("0.28", "0.33")}
    assert not any("FP8 KV cache" in r for r in reasons["0.28"])
    assert any("FP8 KV cache" in r for r in reasons["0.33"])


@pytest.mark.parametrize("version,expected", [("0.28", "UNIFORM_BATCH"), ("0.29", "UNIFORM_BATCH"), ("0.33", "ALWAYS")])
def test_flashinfer_mla_decode_graphs_cover_every_batch_only_from_031(version, expected):
    # mla/flashinfer_mla.py FlashInferMLAMetadataBuilder._cudagraph_support
    assert cudagraph.cudagraph_support(get_profile(version).cudagraph, "FLASHINFER_MLA", B200) == expected


@pytest.mark.parametrize("version,expected", [("0.28", "UNIFORM_SINGLE_TOKEN_DECODE"), ("0.33", "UNIFORM_BATCH")])
def test_triton_mla_captured_single_token_decode_only_before_031(version, expected):
    # mla/triton_mla.py TritonMLAMetadataBuilder._cudagraph_support
    assert cudagraph.cudagraph_support(get_profile(version).cudagraph, "TRITON_MLA", H100) == expected


def reasons(version, backend, inputs, ctx):
    return next(b for b in explain(get_profile(version), inputs, ctx).backends if b.name == backend).reasons


def test_flashinfer_sinks_on_hopper_came_with_xqa_in_030():
    # flashinfer.py FlashInferBackend.supports_sink: 0.28/0.29 SM12x and SM100 only; 0.30 adds SM90
    ctx = SelectionContext(capability=H100)
    assert "attention sinks not supported" in reasons("0.29", "FLASHINFER", cfg(has_sink=True), ctx)
    assert "attention sinks not supported" not in reasons("0.30", "FLASHINFER", cfg(has_sink=True), ctx)


def test_image_prefix_composites_lead_the_hopper_list_from_030():
    # cuda.py _get_backend_priorities(..., use_mm_prefix): TRITON_FLASH_ATTN first on SM90 from 0.30
    ctx = SelectionContext(capability=H100)
    assert get_profile("0.29").priority_list(cfg(256, use_mm_prefix=True), ctx)[0] == "FLASH_ATTN"
    assert get_profile("0.30").priority_list(cfg(256, use_mm_prefix=True), ctx)[0] == "TRITON_FLASH_ATTN"


def test_the_dcp_check_of_validate_configuration_arrived_in_030():
    # backend.py validate_configuration: "DCP not supported" (supports_dcp) is new in 0.30
    inputs, ctx = cfg(use_dcp=True), SelectionContext(capability=H100, decode_context_parallel_size=2)
    assert "DCP not supported" not in reasons("0.29", "TRITON_ATTN", inputs, ctx)
    assert "DCP not supported" in reasons("0.30", "TRITON_ATTN", inputs, ctx)


def test_fp8_kv_with_fa4_at_head_512_on_hopper_from_031():
    # fa_utils.flash_attn_supports_kv_cache_dtype: 0.31 accepts FA4 with head_size 512 on SM90
    inputs, ctx = cfg(512, kv_cache_dtype="fp8"), SelectionContext(capability=H100)
    fp8_reason = "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"
    assert fp8_reason in reasons("0.30", "FLASH_ATTN", inputs, ctx)
    assert not any(r.startswith("FP8 KV cache") for r in reasons("0.31", "FLASH_ATTN", inputs, ctx))


def test_flashinfer_nvfp4_kv_on_hopper_from_032():
    # flashinfer.py FlashInferBackend.supports_kv_cache_dtype: plain nvfp4 on the FA2 path (8.x/9.x/12.x) in 0.32
    inputs, ctx = cfg(kv_cache_dtype="nvfp4"), SelectionContext(capability=H100)
    assert "kv_cache_dtype not supported" in reasons("0.31", "FLASHINFER", inputs, ctx)
    assert "kv_cache_dtype not supported" not in reasons("0.32", "FLASHINFER", inputs, ctx)


def test_fp8_kv_with_flash_attention_on_blackwell_from_027():
    # flash_attn.py FlashAttentionBackend.supports_kv_cache_dtype: 0.26 FA3 on SM90 only; 0.27
    # asks fa_utils.flash_attn_supports_kv_cache_dtype (FA3 on SM90 or FA4 on SM100)
    inputs, ctx = cfg(kv_cache_dtype="fp8"), SelectionContext(capability=B200)
    assert "kv_cache_dtype not supported" in reasons("0.26", "FLASH_ATTN", inputs, ctx)
    assert "kv_cache_dtype not supported" not in reasons("0.27", "FLASH_ATTN", inputs, ctx)


def test_flashinfer_sinks_on_rtx_50_from_028():
    # flashinfer.py FlashInferBackend.supports_sink: 0.27 "only on the SM100 trtllm-gen path"; 0.28 adds SM12x XQA
    ctx = SelectionContext(capability=(12, 0))
    assert "attention sinks not supported" in reasons("0.27", "FLASHINFER", cfg(has_sink=True), ctx)
    assert "attention sinks not supported" not in reasons("0.28", "FLASHINFER", cfg(has_sink=True), ctx)
