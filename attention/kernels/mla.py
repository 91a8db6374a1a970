"""MLA decode batches the way vLLM runs them, and an fp32 reference for absorbed MLA.

vLLM's MLA layers (DeepSeek-V2/V3/R1, Kimi-K2, GLM-4.x-MoE-Lite...; vllm/model_executor/layers/
attention/mla_attention.py) cache one latent vector per token: kv_c (kv_lora_rank values, 512 for
DeepSeek-V3) followed by k_pe (qk_rope_head_dim, 64), a KV cache of shape (num_blocks, block_size,
kv_lora_rank + qk_rope_head_dim) with one "KV head". At decode, MLAAttention.forward_impl absorbs
W_UK into the query (q_nope @ W_UK_T -> ql_nope, kv_lora_rank wide), keeps q_pe, and calls the
backend's `forward_mqa(q, kv_cache, metadata, layer)`: multi-query attention of every query head
over the latent cache, scores over all kv_lora_rank + rope dims, values = the kv_c part. Its output
(num_heads x kv_lora_rank per token) is then up-projected with W_UV (a GEMM of the model, not the
attention backend). `forward_mqa` is what tune times for MLA.

    out[t, h] = softmax(scale * q[t, h] . cache[k]) . cache[k, :kv_lora_rank]   over visible k

The batch here holds q as (tokens, heads, kv_lora_rank + rope) = [ql_nope | q_pe], the latent
cache as (num_blocks, block_size, kv_lora_rank + rope) (fp8 with one per-tensor scale for an fp8
cache: vLLM's concat_and_cache_mla writes kv_c and k_pe with layer._k_scale), and the paged
metadata of paged.PagedBatch (shuffled block table, ragged lengths, block 0 left free).

Sparse MLA (an index_topk model: DeepSeek-V3.2, GLM-5): each query token attends only to the
positions its indexer chose. vLLM's indexer (vllm/model_executor/layers/sparse_attn_indexer.py,
decode path) writes, per token, up to index_topk positions of the token's own sequence (0 ..
seq_len-1) into the shared topk_indices_buffer and -1 after them (the buffer is filled with -1
first, :405-411); a sequence no longer than index_topk gets every position. The backends turn those
request-local positions into cache slots through the block table (sparse_utils.py
triton_convert_req_index_to_global_index, inside the timed forward_mqa). The batch here holds the
same (tokens, index_topk) int32 table: every position when seq_len <= index_topk, else index_topk
distinct positions drawn with the batch's seeded generator and sorted (a deterministic stand-in for
the indexer's scores: which positions are chosen changes which cache rows are read, not how many).

Prefill is not timed for MLA: vLLM runs it non-absorbed (forward_mha: the latent cache and the
new tokens up-projected with the model's kv_b_proj, then the MLA prefill backend), and that prefill
backend is chosen apart from --attention-backend (`--attention-config.mla_prefill_backend`,
vllm/v1/attention/backends/mla/prefill/selector.py), so --attention-backend and --block-size change
the decode kernels timed here. (FLASH_ATTN_MLA and FLASHMLA also send small prefill chunks, up to
their builder's reorder_batch_threshold of 512 / 128 tokens, down the decode path.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from attnsel.attention.kernels import kv_quant
from attnsel.attention.kernels.base import WorkloadKind
from attnsel.attention.kernels.paged import (
    Workload,
    _ragged_lengths,
    shuffled_block_table,
    torch_dtype,
)

DEEPSEEK_QK_NOPE_HEAD_DIM = 128  # DeepSeek-V2/V3/R1, Kimi-K2: the default when a workload names none


@dataclass
class MlaBatch:
    query: torch.Tensor  # (num_q_tokens, num_heads, kv_lora_rank + rope): [ql_nope | q_pe]
    latent_cache: torch.Tensor  # (num_blocks, block_size, kv_lora_rank + rope): [kv_c | k_pe]
    block_table: torch.Tensor  # (batch, max_blocks_per_seq) int32
    seq_lens: torch.Tensor  # (batch,) int32
    query_lens: torch.Tensor  # (batch,) int32
    cu_query_lens: torch.Tensor  # (batch+1,) int32
    block_size: int
    scale: float  # softmax scale: qk_head_dim ** -0.5 (qk_nope + rope), as the model passes it
    kind: str
    kv_lora_rank: int
    qk_nope_head_dim: int = DEEPSEEK_QK_NOPE_HEAD_DIM
    kv_cache_dtype: str = "auto"
    k_scale: float = 1.0  # the one scale of the latent cache (vLLM writes kv_c and k_pe with _k_scale)
    q_scale: float = 1.0
    topk_indices: torch.Tensor | None = None  # sparse MLA: (tokens, index_topk) int32 positions, -1 after

    def reference(self) -> torch.Tensor:
        """The fp32 answer a kernel is checked against (paged.reference_attention asks for it)."""
        return reference_mla(self)

    @property
    def index_topk(self) -> int | None:
        return None if self.topk_indices is None else int(self.topk_indices.shape[1])

    @property
    def batch(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def num_q_heads(self) -> int:
        return int(self.query.shape[1])

    @property
    def num_kv_heads(self) -> int:
        return 1

    @property
    def head_size(self) -> int:
        return int(self.latent_cache.shape[-1])

    @property
    def qk_rope_head_dim(self) -> int:
        return self.head_size - self.kv_lora_rank

    @property
    def num_blocks(self) -> int:
        return int(self.latent_cache.shape[0])

    @property
    def v_scale(self) -> float:
        return self.k_scale  # one latent cache, one scale (TritonMLA passes _k_scale for both)

    @property
    def num_decodes(self) -> int:
        lens = self.query_lens.tolist()
        n = 0
        while n < len(lens) and lens[n] == 1:
            n += 1
        return n

    def host_lists(self) -> tuple[list[int], list[int]]:
        return self.seq_lens.tolist(), self.query_lens.tolist()

    def bytes_moved(self) -> int:
        """Q read + the latent cache read once over the real lengths + O (kv_lora_rank wide) written:
        every query head reads the same latent rows (MQA), so the cache counts once."""
        q_tokens, heads = int(self.query.shape[0]), self.num_q_heads
        q_and_o = q_tokens * heads * (self.head_size + self.kv_lora_rank) * self.query.element_size()
        return q_and_o + sum(self.attended_lengths()) * self.head_size * self.latent_cache.element_size()

    def attended_lengths(self) -> list[int]:
        """Cache rows each request's decode token reads: its length, or the indexer's top-k of it."""
        lens = self.seq_lens.tolist()
        return lens if self.index_topk is None else [min(n, self.index_topk) for n in lens]

    def flops(self) -> float:
        """2 x visible keys x heads x (kv_lora_rank + rope) for QK^T + 2 x ... x kv_lora_rank for PV."""
        seq_lens, q_lens = self.host_lists()
        if self.index_topk is not None:  # sparse MLA: decode tokens, each over its top-k rows
            return 2.0 * sum(self.attended_lengths()) * self.num_q_heads * (self.head_size + self.kv_lora_rank)
        visible = sum(q * (kv - q) + q * (q + 1) // 2 for kv, q in zip(seq_lens, q_lens))
        return 2.0 * visible * self.num_q_heads * (self.head_size + self.kv_lora_rank)


def make_mla_batch(w: Workload, block_size: int, device: str | torch.device = "cuda", seed: int = 0,
                   ragged: bool = True) -> MlaBatch:
    """Random absorbed queries over a paged latent cache (decode rows; prefill is not timed for MLA,
    see the module docstring). fp8 caches are stored with vLLM's per-tensor scale (kv_quant.py)."""
    if w.kv_lora_rank is None:
        raise ValueError("an MLA batch needs a workload with kv_lora_rank")
    if w.kind != WorkloadKind.DECODE:
        raise ValueError("MLA batches are decode batches (vLLM runs MLA prefill non-absorbed; not timed)")
    qk_nope_head_dim = w.qk_nope_head_dim or DEEPSEEK_QK_NOPE_HEAD_DIM
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [_ragged_lengths(gen, 1, w.context_len, block_size, 1)[0] if ragged else w.context_len
                for _ in range(w.batch)]
    table, num_blocks = shuffled_block_table(seq_lens, block_size, gen)
    dev = torch.device(device)
    value_gen = gen if dev.type == "cpu" else torch.Generator(device=dev).manual_seed(seed)
    dtype = torch_dtype(w.dtype)
    randn = lambda *s: torch.randn(s, generator=value_gen, dtype=torch.float32, device=dev)  # noqa: E731
    cache = randn(num_blocks, block_size, w.head_size).to(dtype)
    query = randn(w.batch, w.num_q_heads, w.head_size).to(dtype)
    as_i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=dev)  # noqa: E731
    batch = MlaBatch(
        query=query, latent_cache=cache, block_table=table.to(dev), seq_lens=as_i32(seq_lens),
        query_lens=as_i32([1] * w.batch), cu_query_lens=as_i32(list(range(w.batch + 1))),
        block_size=block_size, scale=(qk_nope_head_dim + w.head_size - w.kv_lora_rank) ** -0.5, kind=w.kind,
        kv_lora_rank=w.kv_lora_rank, qk_nope_head_dim=qk_nope_head_dim,
        topk_indices=None if w.index_topk is None else indexer_topk(seq_lens, w.index_topk, gen).to(dev),
    )
    if kv_quant.is_fp8(w.kv_cache_dtype):
        k_scale = kv_quant.computed_scale(cache, "k")
        batch = replace(batch, latent_cache=kv_quant.quantize(cache, k_scale, w.kv_cache_dtype),
                        kv_cache_dtype=w.kv_cache_dtype, k_scale=k_scale,
                        q_scale=kv_quant.computed_scale(query, "q"))
    return batch


def indexer_topk(seq_lens: list[int], topk: int, gen: torch.Generator) -> torch.Tensor:
    """(decode tokens, topk) int32: what vLLM's indexer hands the sparse backends for one decode
    token per sequence (module docstring): positions of the token's own sequence, -1 after them.

    >>> indexer_topk([3, 5], 4, torch.Generator().manual_seed(0)).tolist()[0]
    [0, 1, 2, -1]
    """
    table = torch.full((len(seq_lens), topk), -1, dtype=torch.int32)
    for row, seq_len in enumerate(seq_lens):
        if seq_len <= topk:
            chosen = torch.arange(seq_len)
        else:
            chosen = torch.randperm(seq_len, generator=gen)[:topk].sort().values
        table[row, : chosen.numel()] = chosen.to(torch.int32)
    return table


def split_into_kernel_blocks(b: MlaBatch, kernel_block_size: int) -> MlaBatch:
    """The same latent cache seen as pages of `kernel_block_size` tokens (views, no copy)."""
    if kernel_block_size == b.block_size:
        return b
    if b.block_size % kernel_block_size:
        raise ValueError(f"kernel block size {kernel_block_size} does not divide block size {b.block_size}")
    k = b.block_size // kernel_block_size
    nb, _, d = b.latent_cache.shape
    table = (b.block_table.long()[:, :, None] * k + torch.arange(k, device=b.block_table.device)).reshape(b.batch, -1)
    return replace(b, latent_cache=b.latent_cache.reshape(nb * k, kernel_block_size, d),
                   block_table=table.to(torch.int32).contiguous(), block_size=kernel_block_size)


def reference_mla(b: MlaBatch) -> torch.Tensor:
    """fp32 absorbed-MLA decode from the (dequantized) latent cache: (tokens, heads, kv_lora_rank).
    The query is read as the model computed it (before any fp8 quantization of the query)."""
    seq_lens, q_lens = b.host_lists()
    cu = b.cu_query_lens.tolist()
    out = torch.empty((b.query.shape[0], b.num_q_heads, b.kv_lora_rank), dtype=torch.float32, device=b.query.device)
    for r, (kv_len, q_len) in enumerate(zip(seq_lens, q_lens)):
        pages = b.block_table[r, : math.ceil(kv_len / b.block_size)].long()
        latent = kv_quant.dequantize(b.latent_cache[pages].reshape(-1, b.head_size)[:kv_len], b.k_scale)
        q = b.query[cu[r]:cu[r + 1]].float()  # (q_len, heads, d)
        scores = torch.einsum("qhd,kd->hqk", q, latent) * b.scale
        q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
        scores = scores.masked_fill(torch.arange(kv_len, device=q.device)[None, :] > q_pos, float("-inf"))
        if b.topk_indices is not None:  # sparse MLA: only the positions the indexer chose
            chosen = torch.zeros(kv_len, dtype=torch.bool, device=q.device)
            rows = b.topk_indices[cu[r]:cu[r + 1]].long()
            chosen[rows[rows >= 0]] = True
            scores = scores.masked_fill(~chosen[None, None, :], float("-inf"))
        out[cu[r]:cu[r + 1]] = torch.einsum("hqk,kd->qhd", torch.softmax(scores, -1), latent[:, : b.kv_lora_rank])
    return out
