"""The reference math behind fp8 KV caches and MLA decode (CPU, small shapes).

fp8: the cache holds fp8 values with per-tensor scales computed as vLLM's calc_kv_scales does
(amax / 200 for K, / 100 for V, / 200 for the query); the fp32 reference reads the dequantized
cache. MLA: vLLM's decode attends with the absorbed query [q_nope @ W_UK | q_pe] over the latent
cache [kv_c | k_pe] and returns heads x kv_lora_rank, which W_UV then up-projects; that must equal
ordinary multi-head attention over the up-projected keys and values (the identity MLA's "absorb"
trick rests on), which is what the first MLA test checks with random weights."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from attnsel.attention.kernels import kv_quant, mla, paged  # noqa: E402


def test_fp8_scales_follow_vllms_calc_kv_scales_rule_and_round_trip_within_e4m3_precision():
    x = torch.randn(4096) * 3
    scale = kv_quant.computed_scale(x, "k")
    assert scale == pytest.approx(float(x.abs().max()) / 200)
    assert kv_quant.computed_scale(x, "v") == pytest.approx(2 * scale)  # V_SCALE_CONSTANT is 100
    stored = kv_quant.quantize(x, scale, "fp8")
    assert stored.dtype == torch.float8_e4m3fn and float(stored.float().abs().max()) == pytest.approx(200, rel=0.07)
    back = kv_quant.dequantize(stored, scale)
    assert float(((back - x).abs() / x.abs().clamp(min=scale * 16)).max()) <= 2 ** -4  # 3 mantissa bits
    assert kv_quant.quantize(x, scale / 10, "fp8").float().abs().max() == 448  # saturates, never inf
    assert kv_quant.quantize(x, scale, "fp8_e5m2").dtype == torch.float8_e5m2


def test_an_fp8_paged_batch_holds_fp8_values_and_the_reference_reads_them_dequantized():
    w = paged.Workload("mixed", 4, 96, 40, 8, 2, 64, "bfloat16", "fp8")
    b = paged.make_paged_batch(w, 16, device="cpu", seed=2)
    assert b.key_cache.dtype == b.value_cache.dtype == torch.float8_e4m3fn and b.query.dtype == torch.bfloat16
    assert b.k_scale > 0 and b.v_scale > 0 and b.q_scale > 0
    dequantized = dataclasses.replace(b, key_cache=b.key_cache.float() * b.k_scale,
                                      value_cache=b.value_cache.float() * b.v_scale, k_scale=1.0, v_scale=1.0,
                                      kv_cache_dtype="auto")
    assert torch.equal(paged.reference_attention(b), paged.reference_attention(dequantized))
    assert b.bytes_moved() < paged.make_paged_batch(dataclasses.replace(w, kv_cache_dtype="auto"), 16,
                                                    device="cpu", seed=2).bytes_moved()  # fp8 halves the KV bytes
    # the same cache seen as kernel blocks keeps its scales
    split = paged.split_into_kernel_blocks(paged.make_paged_batch(w, 64, device="cpu", seed=2), 16)
    assert split.k_scale == paged.make_paged_batch(w, 64, device="cpu", seed=2).k_scale


def test_kv_cache_dtypes_tune_cannot_build_are_refused():
    with pytest.raises(ValueError, match="fp8_ds_mla"):
        paged.Workload("decode", 1, 64, 1, 8, 2, 64, "bfloat16", "fp8_ds_mla")


def _mla_workload(kv="auto", heads=4, batch=3, context=150):
    return paged.Workload("decode", batch, context, 1, heads, 1, 48 + 16, "float32", kv, kv_lora_rank=48,
                          qk_nope_head_dim=24)


def test_absorbed_mla_reference_equals_multi_head_attention_over_up_projected_keys_and_values():
    heads, lora, rope, nope, v_dim = 4, 48, 16, 24, 20
    b = mla.make_mla_batch(_mla_workload(heads=heads), 16, device="cpu", seed=9)
    gen = torch.Generator().manual_seed(1)
    w_uk = torch.randn(heads, nope, lora, generator=gen) / math.sqrt(lora)  # kv_c -> k_nope, per head
    w_uv = torch.randn(heads, v_dim, lora, generator=gen) / math.sqrt(lora)  # kv_c -> v, per head
    q_nope = torch.randn(b.batch, heads, nope, generator=gen)
    q_pe = torch.randn(b.batch, heads, rope, generator=gen)
    # the absorbed query vLLM hands forward_mqa: [q_nope @ W_UK | q_pe]
    absorbed = dataclasses.replace(b, query=torch.cat([torch.einsum("bhn,hnl->bhl", q_nope, w_uk), q_pe], -1))
    up_projected = torch.einsum("bhl,hvl->bhv", paged.reference_attention(absorbed), w_uv)
    seq_lens = b.seq_lens.tolist()
    for r, kv_len in enumerate(seq_lens):
        pages = b.block_table[r, : math.ceil(kv_len / 16)].long()
        latent = b.latent_cache[pages].reshape(-1, lora + rope)[:kv_len].float()
        kv_c, k_pe = latent[:, :lora], latent[:, lora:]
        k = torch.cat([torch.einsum("hnl,kl->khn", w_uk, kv_c), k_pe[:, None].expand(-1, heads, -1)], -1)
        v = torch.einsum("hvl,kl->khv", w_uv, kv_c)
        q = torch.cat([q_nope[r], q_pe[r]], -1)  # (heads, nope + rope): the model's query, not absorbed
        probs = torch.softmax(torch.einsum("hd,khd->hk", q, k) * b.scale, -1)
        expected = torch.einsum("hk,khv->hv", probs, v)
        assert torch.allclose(up_projected[r], expected, atol=1e-4, rtol=1e-4)
    assert b.scale == pytest.approx((nope + rope) ** -0.5)


def test_mla_batches_page_the_latent_cache_like_vllm_and_count_it_once():
    b = mla.make_mla_batch(_mla_workload(), 64, device="cpu", seed=3)
    assert b.latent_cache.shape[1:] == (64, 64) and b.num_kv_heads == 1 and b.head_size == 64
    used = [p for r, s in enumerate(b.seq_lens.tolist()) for p in b.block_table[r, : math.ceil(s / 64)].tolist()]
    assert 0 not in used and len(set(used)) == len(used)  # block 0 stays vLLM's free null block; no page shared
    assert all(s % 64 for s in b.seq_lens.tolist())  # ragged, never a multiple of the block size
    split = mla.split_into_kernel_blocks(b, 16)
    assert torch.equal(paged.reference_attention(split), paged.reference_attention(b))
    # every query head reads the same latent rows (MQA): the cache counts once, not once per head
    kv_bytes = int(b.seq_lens.sum()) * 64 * 4
    assert b.bytes_moved() == kv_bytes + b.batch * 4 * (64 + 48) * 4


def test_an_fp8_latent_cache_has_one_scale_for_kv_c_and_k_pe():
    b = mla.make_mla_batch(_mla_workload("fp8"), 16, device="cpu", seed=4)
    assert b.latent_cache.dtype == torch.float8_e4m3fn and b.v_scale == b.k_scale  # concat_and_cache_mla: _k_scale
    exact = dataclasses.replace(b, latent_cache=b.latent_cache.float() * b.k_scale, k_scale=1.0, kv_cache_dtype="auto")
    assert torch.equal(paged.reference_attention(b), paged.reference_attention(exact))


def test_mla_batches_are_decode_batches():
    with pytest.raises(ValueError, match="decode"):
        mla.make_mla_batch(dataclasses.replace(_mla_workload(), kind="prefill", query_len=4, context_len=40), 16,
                           device="cpu")
    with pytest.raises(ValueError, match="one KV head"):
        paged.Workload("decode", 1, 64, 1, 8, 2, 64, "bfloat16", kv_lora_rank=48)
