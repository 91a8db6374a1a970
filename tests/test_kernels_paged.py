"""Paged batches (the inputs every kernel is timed on), their byte/FLOP counts, and the reference.

Expectations come from the issue "attnsel tune" (realistic inputs: random K/V, shuffled
non-contiguous block tables, lengths not multiples of the block size; bytes counted like
FlashInfer's attention_tb_per_sec: Q + K + V over the real lengths + O, docs/measuring.md §6)
and vLLM's KV layout per block (docs/vllm-rules.md §3a).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import itertools

from attnsel.attention.kernels.paged import (
    Workload,
    make_paged_batch,
    mixed_prefill_count,
    reference_attention,
    relative_error,
    split_into_kernel_blocks,
)
from attnsel.attention.rules import MultipleOf, kernel_block_size_for


def decode_workload(**kw):
    base = dict(kind="decode", batch=6, context_len=100, query_len=1, num_q_heads=4, num_kv_heads=2,
                head_size=32, dtype="bfloat16")
    base.update(kw)
    return Workload(**base)


def test_ragged_lengths_are_never_multiples_of_the_block_size():
    b = make_paged_batch(decode_workload(batch=16, context_len=64), 16, device="cpu", seed=1)
    lens = b.seq_lens.tolist()
    assert all(n % 16 for n in lens)
    assert len(set(lens)) > 1  # they vary
    assert all(abs(n - 64) <= 64 // 16 + 1 for n in lens)  # around context_len


def test_uniform_lengths_when_not_ragged():
    b = make_paged_batch(decode_workload(context_len=96), 16, device="cpu", ragged=False)
    assert b.seq_lens.tolist() == [96] * 6


def test_block_table_is_shuffled_disjoint_and_never_uses_null_block():
    b = make_paged_batch(decode_workload(batch=8, context_len=200), 16, device="cpu", seed=2)
    used = []
    for row, n in zip(b.block_table.tolist(), b.seq_lens.tolist()):
        pages = row[: math.ceil(n / 16)]
        used.extend(pages)
        assert row[math.ceil(n / 16):] == [0] * (len(row) - math.ceil(n / 16))  # unused slots -> null block
    assert len(used) == len(set(used)), "two requests share a physical block"
    assert 0 not in used, "block 0 is vLLM's null block"
    assert used != sorted(used), "table is in allocation order, not shuffled"
    steps = {b2 - a for a, b2 in itertools.pairwise(used)}
    assert steps != {1}, "pages are contiguous"
    assert b.num_blocks > len(used) + 1, "the cache should hold free blocks among used ones"


def test_cache_layout_is_vllm_nhd_per_block():
    b = make_paged_batch(decode_workload(), 32, device="cpu")
    assert b.key_cache.shape[1:] == (32, 2, 32)  # (block_size, num_kv_heads, head_size)
    assert b.value_cache.shape == b.key_cache.shape
    assert b.block_table.dtype == torch.int32 and b.seq_lens.dtype == torch.int32
    assert b.query.shape == (6, 4, 32)
    assert b.scale == pytest.approx(1 / math.sqrt(32))


def test_mixed_batch_puts_decodes_first_like_vllm():
    w = Workload("mixed", 16, 80, 12, 4, 2, 32, "float16")
    b = make_paged_batch(w, 16, device="cpu")
    q_lens = b.query_lens.tolist()
    n_prefill = mixed_prefill_count(16)
    assert q_lens == [1] * (16 - n_prefill) + [12] * n_prefill
    assert b.num_decodes == 16 - n_prefill
    assert b.cu_query_lens.tolist()[-1] == sum(q_lens) == b.query.shape[0]


def test_bytes_moved_counts_q_kv_over_real_lengths_and_o():
    w = Workload("prefill", 2, 40, 8, 4, 2, 32, "bfloat16")
    b = make_paged_batch(w, 16, device="cpu", ragged=False)
    # By hand: 16 query tokens x 4 heads x 32 x 2 bytes, read once and written once;
    # K and V: 2 requests x 40 tokens x 2 heads x 32 x 2 bytes each.
    q = 16 * 4 * 32 * 2
    kv = 2 * 40 * 2 * 32 * 2
    assert b.bytes_moved() == 2 * q + 2 * kv


def test_flops_count_only_causally_visible_keys():
    w = Workload("prefill", 1, 10, 4, 2, 1, 16, "float32")
    b = make_paged_batch(w, 16, device="cpu", ragged=False)
    # Tokens at positions 6, 7, 8, 9 see 7, 8, 9, 10 keys.
    assert b.flops() == 4.0 * (7 + 8 + 9 + 10) * 2 * 16


def test_reference_matches_plain_softmax_attention_for_one_request():
    w = Workload("prefill", 1, 37, 5, 4, 2, 16, "float32")
    b = make_paged_batch(w, 16, device="cpu", seed=4)
    ref = reference_attention(b)
    # Contiguous K/V rebuilt token by token through the block table.
    L = int(b.seq_lens[0])
    k = torch.stack([b.key_cache[b.block_table[0, t // 16], t % 16] for t in range(L)])
    v = torch.stack([b.value_cache[b.block_table[0, t // 16], t % 16] for t in range(L)])
    for h in range(4):
        kv_head = h // 2
        for i in range(5):
            pos = L - 5 + i
            s = (k[: pos + 1, kv_head] @ b.query[i, h]) * b.scale
            expected = torch.softmax(s, 0) @ v[: pos + 1, kv_head]
            assert torch.allclose(ref[i, h], expected, atol=1e-5)


def test_relative_error_never_lets_nan_or_wrong_shapes_pass():
    ref = torch.ones(3, 4, 8)
    assert relative_error(ref.clone(), ref) == 0.0
    bad = ref.clone()
    bad[0, 0, 0] = float("nan")
    assert relative_error(bad, ref) == float("inf")
    assert relative_error(torch.ones(3, 4, 7), ref) == float("inf")
    assert relative_error(ref * 1.01, ref) == pytest.approx(0.01, rel=1e-6)


def test_reference_detects_a_kernel_that_ignores_the_block_table():
    w = decode_workload(dtype="float32")
    b = make_paged_batch(w, 16, device="cpu", seed=5)
    wrong = make_paged_batch(w, 16, device="cpu", seed=5)
    wrong.block_table = torch.roll(b.block_table, 1, dims=1)
    assert relative_error(reference_attention(wrong), reference_attention(b)) > 0.1


def test_cache_blocks_split_into_kernel_blocks_like_vllm():
    # FLASHINFER supports kernel blocks [16, 32, 64] (docs/vllm-rules.md §3a): a 128-token cache block
    # runs as two 64-token kernel blocks; 8 has no supported divisor.
    assert kernel_block_size_for(128, (16, 32, 64)) == 64
    assert kernel_block_size_for(32, (16, 32, 64)) == 32
    assert kernel_block_size_for(8, (16, 32, 64)) is None
    # FLASH_ATTN's MultipleOf(16) takes a 128-token cache block whole, as vLLM does
    assert kernel_block_size_for(128, [MultipleOf(16)]) == 128
    w = decode_workload(dtype="float32", context_len=300)
    b = make_paged_batch(w, 128, device="cpu", seed=6)
    split = split_into_kernel_blocks(b, 64)
    assert split.block_size == 64 and split.key_cache.data_ptr() == b.key_cache.data_ptr()
    assert relative_error(reference_attention(split), reference_attention(b)) < 1e-6


@pytest.mark.parametrize(
    "kw",
    [dict(kind="decode", query_len=2), dict(kind="prefill", query_len=200), dict(num_kv_heads=3),
     dict(dtype="int8"), dict(kind="mixed", query_len=1), dict(kind="append")],
)
def test_workload_rejects_impossible_shapes(kw):
    with pytest.raises(ValueError):
        decode_workload(**kw)


def test_workload_label_names_the_shape():
    assert decode_workload().label() == "decode b6 ctx100 h4/2 d32 bfloat16"
    w = Workload("prefill", 2, 4096, 512, 32, 8, 128, "float16")
    assert w.label() == "prefill b2 ctx4096 q512 h32/8 d128 float16"
