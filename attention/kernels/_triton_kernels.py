"""attnsel's Triton paged-attention kernels (source only; `jitted()` compiles them lazily).

The functions below are plain Python until `jitted()` wraps them with `triton.jit`, so importing
this module compiles nothing. Under TRITON_INTERPRET=1 (CPU) the variable must be set before
triton is first imported: triton decorates its own standard library (tl.cdiv...) at import time,
and the interpreter cannot call compiled-mode helpers.

Decode (flash-decoding): one program per (request, KV head, KV split). All query heads of the KV
head's group are packed into the rows of one tile (padded to >= 16 for tl.dot), so each K/V tile
is read once per group. With more than one split, partial outputs and their log2-sum-exp go to a
scratch buffer that `reduce_splits` combines.

Prefill / mixed: one program per (query tile, KV head); a query tile is BLOCK_Q tokens of one
request x the group's heads. Query token i of a request with KV length L and Q new tokens sits at
position L-Q+i and sees keys <= that position.

fp8 KV caches (KV_CAST > 0): K and V tiles are stored fp8 and widened to the query's 16-bit type
on load (exact: every e4m3/e5m2 value is a bf16 and an fp16 value); the per-tensor scales are
folded into the softmax scale (k_scale) and the output (v_scale), as FlashInfer applies them.

DOT_IN_FP32 exists for the CPU interpreter only: Triton 3.9's interpreter multiplies bf16 tiles
as raw 16-bit integers in tl.dot (garbage results), so there the bf16-rounded operands are widened
to fp32 before the dot. Same rounding as on the GPU (bf16 in, fp32 accumulate).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import triton
import triton.language as tl
import triton.language.standard as _tl_standard

if TYPE_CHECKING:  # pragma: no cover
    from triton.runtime.jit import JITFunction

# The kernels' parameters stay unannotated beyond tl.constexpr: triton.jit reads the annotations
# (triton/runtime/jit.py KernelParam.annotation_type) and specializes on them, so a type added for
# mypy would change what compiles. Hence the `type: ignore[no-untyped-def]` on each kernel.


def _widen(x, KV_CAST: tl.constexpr):  # type: ignore[no-untyped-def]
    """fp8 cache values in the query's type (KV_CAST 1: fp16, 2: bf16, 3: fp32; 0: as stored)."""
    if KV_CAST == 1:
        x = x.to(tl.float16)
    elif KV_CAST == 2:
        x = x.to(tl.bfloat16)
    elif KV_CAST == 3:
        x = x.to(tl.float32)
    return x


def _load_k_tile(  # type: ignore[no-untyped-def]
    bt_row, k_head, v_head, start, pos, ok, d, d_ok,
    stride_k_blk, stride_k_tok, stride_v_blk, stride_v_tok,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    DOT_IN_FP32: tl.constexpr, KV_CAST: tl.constexpr,
):
    """One K tile through the block table, plus the V pointers and mask for the same rows."""
    if PAGE % BLOCK_N == 0:  # the tile lies in one page: one block-table read
        page = tl.load(bt_row + start // PAGE).to(tl.int64)
        k_rows = page * stride_k_blk + (pos % PAGE) * stride_k_tok
        v_rows = page * stride_v_blk + (pos % PAGE) * stride_v_tok
    else:
        pages = tl.load(bt_row + pos // PAGE, mask=ok, other=0).to(tl.int64)
        k_rows = pages * stride_k_blk + (pos % PAGE) * stride_k_tok
        v_rows = pages * stride_v_blk + (pos % PAGE) * stride_v_tok
    if HEAD_PAD == HEAD:  # a row mask only: constant along d, so loads stay vectorised
        kv_mask = ok[:, None]
    else:
        kv_mask = ok[:, None] & d_ok[None, :]
    k = _widen(tl.load(k_head + k_rows[:, None] + d[None, :], mask=kv_mask, other=0.0), KV_CAST)
    if DOT_IN_FP32:
        k = k.to(tl.float32)
    return k, v_head + v_rows[:, None] + d[None, :], kv_mask


def _online_softmax_step(  # type: ignore[no-untyped-def]
    s, m_i, l_i, acc, v_ptrs, kv_mask, DOT_IN_FP32: tl.constexpr, KV_CAST: tl.constexpr,
):
    """Fold one tile of base-2 scores into the running max, denominator and output."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = _widen(tl.load(v_ptrs, mask=kv_mask, other=0.0), KV_CAST)
    p_in = p.to(v.dtype)
    if DOT_IN_FP32:
        p_in = p_in.to(tl.float32)
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p_in, v)
    return m_new, l_i, acc


# Helpers the kernels call; `jitted()` rebinds these names to their triton.jit versions.
_HELPERS = {"_widen": _widen, "_load_k_tile": _load_k_tile, "_online_softmax_step": _online_softmax_step}


def paged_decode(  # type: ignore[no-untyped-def]
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, q_start_ptr,
    out_ptr, part_out_ptr, part_lse_ptr,
    scale_log2, v_scale,
    stride_q_tok, stride_q_head,
    stride_k_blk, stride_k_tok, stride_k_head,
    stride_v_blk, stride_v_tok, stride_v_head,
    stride_bt,
    stride_o_tok, stride_o_head,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, NUM_Q_HEADS: tl.constexpr,
    DOT_IN_FP32: tl.constexpr, KV_CAST: tl.constexpr,
):
    req = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + req)
    q_tok = tl.load(q_start_ptr + req).to(tl.int64)

    # Splits cover whole BLOCK_N tiles so every tile starts BLOCK_N-aligned (one page per tile
    # when the page is a multiple of BLOCK_N).
    tiles = tl.cdiv(seq_len, BLOCK_N)
    tiles_per_split = tl.cdiv(tiles, NUM_SPLITS)
    lo = split * tiles_per_split * BLOCK_N
    hi = tl.minimum(lo + tiles_per_split * BLOCK_N, seq_len)

    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_PAD)
    n = tl.arange(0, BLOCK_N)
    g_ok = g < GROUP
    d_ok = d < HEAD
    heads = kvh * GROUP + g
    q = tl.load(
        q_ptr + q_tok * stride_q_tok + heads[:, None] * stride_q_head + d[None, :],
        mask=g_ok[:, None] & d_ok[None, :], other=0.0,
    )
    if DOT_IN_FP32:
        q = q.to(tl.float32)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_PAD], tl.float32)
    bt_row = block_table_ptr + req.to(tl.int64) * stride_bt
    k_head = k_ptr + kvh.to(tl.int64) * stride_k_head
    v_head = v_ptr + kvh.to(tl.int64) * stride_v_head

    for start in range(lo, hi, BLOCK_N):
        pos = start + n
        ok = pos < hi
        k, v_ptrs, kv_mask = _load_k_tile(bt_row, k_head, v_head, start, pos, ok, d, d_ok,
                                          stride_k_blk, stride_k_tok, stride_v_blk, stride_v_tok,
                                          PAGE, BLOCK_N, HEAD, HEAD_PAD, DOT_IN_FP32, KV_CAST)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        s = tl.where(ok[None, :], s, float("-inf"))
        m_i, l_i, acc = _online_softmax_step(s, m_i, l_i, acc, v_ptrs, kv_mask, DOT_IN_FP32, KV_CAST)

    if NUM_SPLITS == 1:
        o = acc / l_i[:, None] * v_scale
        tl.store(
            out_ptr + q_tok * stride_o_tok + heads[:, None] * stride_o_head + d[None, :],
            o.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :],
        )
    else:
        empty = l_i == 0.0  # a split past the end of a short request
        l_safe = tl.where(empty, 1.0, l_i)
        o = acc / l_safe[:, None] * v_scale
        lse = tl.where(empty, float("-inf"), m_i + tl.log2(l_safe))
        row = (req.to(tl.int64) * NUM_Q_HEADS + heads) * NUM_SPLITS + split
        tl.store(part_out_ptr + row[:, None] * HEAD_PAD + d[None, :], o, mask=g_ok[:, None])
        tl.store(part_lse_ptr + row, lse, mask=g_ok)


def reduce_splits(  # type: ignore[no-untyped-def]
    part_out_ptr, part_lse_ptr, out_ptr, q_start_ptr,
    stride_o_tok, stride_o_head,
    NUM_Q_HEADS: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    req = tl.program_id(0)
    h = tl.program_id(1)
    q_tok = tl.load(q_start_ptr + req).to(tl.int64)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_PAD)
    s_ok = s < NUM_SPLITS
    row = (req.to(tl.int64) * NUM_Q_HEADS + h) * NUM_SPLITS + s
    lse = tl.load(part_lse_ptr + row, mask=s_ok, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, 0))
    w = w / tl.sum(w, 0)
    parts = tl.load(part_out_ptr + row[:, None] * HEAD_PAD + d[None, :], mask=s_ok[:, None], other=0.0)
    o = tl.sum(parts * w[:, None], 0)
    tl.store(out_ptr + q_tok * stride_o_tok + h * stride_o_head + d, o.to(out_ptr.dtype.element_ty), mask=d < HEAD)


def paged_prefill(  # type: ignore[no-untyped-def]
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, q_lens_ptr, cu_q_ptr,
    tile_req_ptr, tile_q0_ptr, out_ptr,
    scale_log2, v_scale,
    stride_q_tok, stride_q_head,
    stride_k_blk, stride_k_tok, stride_k_head,
    stride_v_blk, stride_v_tok, stride_v_head,
    stride_bt,
    stride_o_tok, stride_o_head,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_IN_FP32: tl.constexpr, KV_CAST: tl.constexpr,
):
    tile = tl.program_id(0)
    kvh = tl.program_id(1)
    req = tl.load(tile_req_ptr + tile)
    q0 = tl.load(tile_q0_ptr + tile)
    seq_len = tl.load(seq_lens_ptr + req)
    q_len = tl.load(q_lens_ptr + req)
    q_base = tl.load(cu_q_ptr + req).to(tl.int64)

    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
    r = tl.arange(0, BLOCK_M)
    t = q0 + r // GROUP_PAD
    g = r % GROUP_PAD
    d = tl.arange(0, HEAD_PAD)
    n = tl.arange(0, BLOCK_N)
    d_ok = d < HEAD
    row_ok = (t < q_len) & (g < GROUP)
    q_pos = seq_len - q_len + t
    heads = kvh * GROUP + g
    tok = q_base + t
    q = tl.load(
        q_ptr + tok[:, None] * stride_q_tok + heads[:, None] * stride_q_head + d[None, :],
        mask=row_ok[:, None] & d_ok[None, :], other=0.0,
    )
    if DOT_IN_FP32:
        q = q.to(tl.float32)

    # The last key this tile's last query token may see, +1.
    kv_end = tl.minimum(seq_len, seq_len - q_len + tl.minimum(q0 + BLOCK_Q, q_len))
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], tl.float32)
    bt_row = block_table_ptr + req.to(tl.int64) * stride_bt
    k_head = k_ptr + kvh.to(tl.int64) * stride_k_head
    v_head = v_ptr + kvh.to(tl.int64) * stride_v_head

    # The first tile holds position 0, visible to every row, so m_i is finite from then on and
    # fully masked rows in later tiles contribute exp2(-inf) = 0 without NaNs.
    for start in range(0, kv_end, BLOCK_N):
        pos = start + n
        ok = pos < kv_end
        k, v_ptrs, kv_mask = _load_k_tile(bt_row, k_head, v_head, start, pos, ok, d, d_ok,
                                          stride_k_blk, stride_k_tok, stride_v_blk, stride_v_tok,
                                          PAGE, BLOCK_N, HEAD, HEAD_PAD, DOT_IN_FP32, KV_CAST)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        visible = ok[None, :] & (pos[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_i, l_i, acc = _online_softmax_step(s, m_i, l_i, acc, v_ptrs, kv_mask, DOT_IN_FP32, KV_CAST)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None] * v_scale
    tl.store(
        out_ptr + tok[:, None] * stride_o_tok + heads[:, None] * stride_o_head + d[None, :],
        o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :],
    )


_JITTED: dict[bool, dict[str, JITFunction]] = {}


def interpreting() -> bool:
    """True when Triton runs in its CPU interpreter. Triton decides that for its own standard
    library (tl.cdiv, ...) when it is first imported, so that is what counts, not the current
    value of TRITON_INTERPRET."""
    return not isinstance(_tl_standard.cdiv, triton.runtime.jit.JITFunction)


def interpreter_requested_too_late() -> bool:
    return not interpreting() and os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def jitted() -> dict[str, JITFunction]:
    """The three kernels wrapped with triton.jit in the mode triton was imported in."""
    if interpreter_requested_too_late():
        raise RuntimeError("TRITON_INTERPRET=1 must be set before triton is first imported")
    mode = interpreting()
    if mode not in _JITTED:
        # Kernels resolve helper names in this module's globals when they compile.
        for name, fn in _HELPERS.items():
            globals()[name] = triton.jit(fn)
        _JITTED[mode] = {
            "paged_decode": triton.jit(paged_decode),
            "reduce_splits": triton.jit(reduce_splits),
            "paged_prefill": triton.jit(paged_prefill),
        }
    return _JITTED[mode]
