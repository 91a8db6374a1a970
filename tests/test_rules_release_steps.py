"""What changed from one vLLM release to the next between 0.26 and 0.33, as a user of `--vllm-version`
sees it: each test pins one step, read in the releases' wheels (file and function cited) and
checked against the real releases (tests/fixtures/parity/parity_0XX.json)."""

import pytest

from attnsel.attention import cudagraph
from attnsel.attention.rules import get_profile
from attnsel.attention.selector import SelectionContext, SelectorInputs, explain

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
