"""Paged KV-cache batches the way vLLM lays them out, and an fp32 reference to check kernels against.

Layout (vLLM §3a): per block, K and V are (block_size, num_kv_heads, head_size) ("NHD"); a request's
tokens live in the physical blocks its block-table row lists, in logical order. An fp8 KV cache
(`--kv-cache-dtype fp8`) holds fp8 values with per-tensor scales (kv_quant.py); the reference reads
it dequantized. MLA batches (latent cache, absorbed query) live in mla.py. Block 0 is kept
free as vLLM's null block, and unused table slots point at it (vLLM's FlexAttention backend even
masks physical block 0 out), so a kernel that reads past a request's length reads zeros-or-garbage
that the reference never sees.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import torch

from attnsel.attention.kernels import kv_quant
from attnsel.attention.kernels.base import WorkloadKind

if TYPE_CHECKING:  # pragma: no cover
    from attnsel.attention.kernels.base import Batch
    from attnsel.attention.kernels.mla import MlaBatch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
KINDS = tuple(str(kind) for kind in WorkloadKind)  # the words, as Workload's error message lists them


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}") from None


@dataclass(frozen=True)
class Workload:
    """What to build.

    kind="decode": `batch` requests with one new token each; KV length ≈ context_len.
    kind="prefill": `batch` requests with `query_len` new tokens each (a chunked-prefill chunk);
      KV length ≈ context_len (cached context + the chunk itself; context_len == query_len is a
      prefill from scratch).
    kind="mixed": what vLLM's scheduler mixes into one step: `mixed_prefill_count(batch)` requests
      are prefill chunks of `query_len` tokens, the rest are decodes; decodes come first, as vLLM
      reorders them (split_decodes_and_prefills). Every request's KV length ≈ context_len.
    """

    kind: str  # a WorkloadKind word
    batch: int
    context_len: int
    query_len: int
    num_q_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str
    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype: auto/bfloat16/float16, or fp8 (kv_quant.py)
    kv_lora_rank: int | None = None  # MLA: the latent width; head_size = kv_lora_rank + qk_rope_head_dim
    qk_nope_head_dim: int | None = None  # MLA: sets the softmax scale (qk_nope + rope) ** -0.5 (mla.py)
    index_topk: int | None = None  # sparse MLA: the indexer's top-k positions each token attends to (mla.py)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.batch < 1 or self.context_len < 1 or self.query_len < 1:
            raise ValueError("batch, context_len and query_len must be >= 1")
        if self.kind == WorkloadKind.DECODE and self.query_len != 1:
            raise ValueError("decode workloads have query_len=1")
        if self.kind == WorkloadKind.MIXED and self.query_len < 2:
            raise ValueError("mixed workloads need query_len >= 2 for their prefill chunks")
        if self.query_len > self.context_len:
            raise ValueError("query_len cannot exceed context_len (the KV length includes the new tokens)")
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError("num_q_heads must be a multiple of num_kv_heads")
        torch_dtype(self.dtype)
        if self.kv_cache_dtype not in kv_quant.TIMED_KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype {self.kv_cache_dtype!r} is not timed "
                             f"({', '.join(kv_quant.TIMED_KV_CACHE_DTYPES)})")
        if self.kv_lora_rank is not None and not (0 < self.kv_lora_rank <= self.head_size and self.num_kv_heads == 1):
            raise ValueError("MLA workloads have one KV head and kv_lora_rank <= head_size")
        if self.index_topk is not None and (self.kv_lora_rank is None or self.index_topk < 1):
            raise ValueError("index_topk (sparse MLA) needs an MLA workload and a positive top-k")

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def group_size(self) -> int:
        return self.num_q_heads // self.num_kv_heads

    def label(self) -> str:
        q = "" if self.kind == WorkloadKind.DECODE else f" q{self.query_len}"
        kv = "" if self.kv_cache_dtype == "auto" else f" kv {self.kv_cache_dtype}"
        mla = f" mla{self.kv_lora_rank}" if self.is_mla else ""
        mla += f" top{self.index_topk}" if self.index_topk else ""
        return (
            f"{self.kind} b{self.batch} ctx{self.context_len}{q} "
            f"h{self.num_q_heads}/{self.num_kv_heads} d{self.head_size}{mla} {self.dtype}{kv}"
        )


def mixed_prefill_count(batch: int) -> int:
    """Prefill chunks in a mixed batch: one in eight requests, at least one, never all (batch > 1)."""
    if batch == 1:
        return 1
    return min(batch - 1, max(1, batch // 8))


@dataclass
class PagedBatch:
    query: torch.Tensor  # (num_q_tokens, num_q_heads, head_size)
    key_cache: torch.Tensor  # (num_blocks, block_size, num_kv_heads, head_size)
    value_cache: torch.Tensor  # same shape
    block_table: torch.Tensor  # (batch, max_blocks_per_seq) int32
    seq_lens: torch.Tensor  # (batch,) int32, KV length including the new query tokens
    query_lens: torch.Tensor  # (batch,) int32
    cu_query_lens: torch.Tensor  # (batch+1,) int32
    block_size: int
    scale: float
    kind: str
    # fp8 caches (kv_quant.py): key/value_cache hold fp8 values; value = stored x scale
    kv_cache_dtype: str = "auto"
    k_scale: float = 1.0
    v_scale: float = 1.0
    q_scale: float = 1.0  # what vLLM divides the query by where it quantizes it (calc_kv_scales)

    @property
    def batch(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def num_q_heads(self) -> int:
        return int(self.query.shape[1])

    @property
    def num_kv_heads(self) -> int:
        return int(self.key_cache.shape[2])

    @property
    def head_size(self) -> int:
        return int(self.query.shape[2])

    @property
    def num_blocks(self) -> int:
        return int(self.key_cache.shape[0])

    @property
    def num_decodes(self) -> int:
        """Requests with one query token, all at the front (vLLM's order)."""
        lens = self.query_lens.tolist()
        n = 0
        while n < len(lens) and lens[n] == 1:
            n += 1
        return n

    def host_lists(self) -> tuple[list[int], list[int]]:
        """(seq_lens, query_lens) as Python lists (one device sync)."""
        return self.seq_lens.tolist(), self.query_lens.tolist()

    def bytes_moved(self) -> int:
        """Q read + K,V read over the real lengths + O written (FlashInfer's attention_tb_per_sec)."""
        elem = self.query.element_size()
        q_tokens = int(self.query.shape[0])
        q_and_o = 2 * q_tokens * self.num_q_heads * self.head_size * elem
        kv_elem = self.key_cache.element_size()
        kv = 2 * int(self.seq_lens.sum()) * self.num_kv_heads * self.head_size * kv_elem
        return q_and_o + kv

    def flops(self) -> float:
        """4 * sum(visible keys per query token) * heads * head_size (QK^T and PV, causal-aware)."""
        seq_lens, q_lens = self.host_lists()
        visible = 0
        for kv_len, q_len in zip(seq_lens, q_lens):
            cached = kv_len - q_len
            visible += q_len * cached + q_len * (q_len + 1) // 2
        return 4.0 * visible * self.num_q_heads * self.head_size


def _ragged_lengths(gen: torch.Generator, batch: int, target: int, block_size: int, minimum: int) -> list[int]:
    """Lengths spread ±1/16 around `target`, none a multiple of block_size, none below `minimum`."""
    spread = max(1, target // 16)
    lens = []
    for _ in range(batch):
        length = target + int(torch.randint(-spread, spread + 1, (1,), generator=gen))
        length = max(minimum, length)
        if length % block_size == 0:
            length = length - 1 if length - 1 >= minimum else length + 1
        lens.append(length)
    return lens


def make_paged_batch(
    w: Workload,
    block_size: int,
    device: str | torch.device = "cuda",
    seed: int = 0,
    ragged: bool = True,
) -> PagedBatch:
    """Random Q/K/V in a paged cache with a shuffled, non-contiguous block table.

    ragged=True: KV lengths vary around context_len and are not multiples of block_size.
    ragged=False: every KV length is exactly context_len (comparable to published figures).
    """
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    gen = torch.Generator().manual_seed(seed)
    q_lens = _query_lengths(w)
    seq_lens = _kv_lengths(w, q_lens, block_size, gen, ragged)
    table, num_blocks = shuffled_block_table(seq_lens, block_size, gen)

    dev = torch.device(device)
    # Values are drawn where they will live (GPU batches are ~1 GB at the bar shape).
    value_gen = gen if dev.type == "cpu" else torch.Generator(device=dev).manual_seed(seed)
    dtype = torch_dtype(w.dtype)
    shape = (num_blocks, block_size, w.num_kv_heads, w.head_size)
    randn = lambda *s: torch.randn(s, generator=value_gen, dtype=torch.float32, device=dev).to(dtype)  # noqa: E731
    key_cache = randn(*shape)
    value_cache = randn(*shape)
    query = randn(sum(q_lens), w.num_q_heads, w.head_size)

    as_i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=dev)  # noqa: E731
    batch = PagedBatch(
        query=query,
        key_cache=key_cache,
        value_cache=value_cache,
        block_table=table.to(dev),
        seq_lens=as_i32(seq_lens),
        query_lens=as_i32(q_lens),
        cu_query_lens=as_i32([0, *itertools.accumulate(q_lens)]),
        block_size=block_size,
        scale=1.0 / math.sqrt(w.head_size),
        kind=w.kind,
    )
    return quantized_kv(batch, w.kv_cache_dtype) if kv_quant.is_fp8(w.kv_cache_dtype) else batch


def _query_lengths(w: Workload) -> list[int]:
    """New tokens per request: 1 for a decode, query_len for a prefill chunk; a mixed step puts its
    decodes first (vLLM's split_decodes_and_prefills order)."""
    if w.kind == WorkloadKind.DECODE:
        return [1] * w.batch
    if w.kind == WorkloadKind.PREFILL:
        return [w.query_len] * w.batch
    n_prefill = mixed_prefill_count(w.batch)
    return [1] * (w.batch - n_prefill) + [w.query_len] * n_prefill


def _kv_lengths(w: Workload, q_lens: list[int], block_size: int, gen: torch.Generator, ragged: bool) -> list[int]:
    """Each request's KV length: context_len, or ragged around it (never shorter than its query)."""
    if not ragged:
        return [w.context_len] * w.batch
    return [_ragged_lengths(gen, 1, w.context_len, block_size, minimum=q)[0] for q in q_lens]


def shuffled_block_table(seq_lens: list[int], block_size: int, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """(block table, number of physical blocks): each request's blocks drawn at random from the cache,
    with spare blocks left free among them (the cache is never dense) and block 0 kept free as
    vLLM's null block; unused table slots point at it."""
    blocks_per_seq = [math.ceil(s / block_size) for s in seq_lens]
    used = sum(blocks_per_seq)
    spare = max(1, used // 16)
    num_blocks = 1 + used + spare  # + block 0, vLLM's null block
    physical = (torch.randperm(num_blocks - 1, generator=gen) + 1)[:used]
    table = torch.zeros(len(seq_lens), max(blocks_per_seq), dtype=torch.int32)
    pos = 0
    for i, n in enumerate(blocks_per_seq):
        table[i, :n] = physical[pos : pos + n].to(torch.int32)
        pos += n
    return table, num_blocks


def quantized_kv(b: PagedBatch, kv_cache_dtype: str) -> PagedBatch:
    """The batch with an fp8 cache: K and V stored as fp8 with per-tensor scales computed the way
    vLLM's --calculate-kv-scales does (kv_quant.py); q_scale likewise, for backends that quantize
    the query. The model-dtype query stays as it is."""
    k_scale = kv_quant.computed_scale(b.key_cache, "k")
    v_scale = kv_quant.computed_scale(b.value_cache, "v")
    return replace(
        b, key_cache=kv_quant.quantize(b.key_cache, k_scale, kv_cache_dtype),
        value_cache=kv_quant.quantize(b.value_cache, v_scale, kv_cache_dtype),
        kv_cache_dtype=kv_cache_dtype, k_scale=k_scale, v_scale=v_scale,
        q_scale=kv_quant.computed_scale(b.query, "q"),
    )


def gather_request_kv(b: PagedBatch, request: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(seq_len, num_kv_heads, head_size) K and V of one request, in logical order."""
    n_blocks = math.ceil(seq_len / b.block_size)
    pages = b.block_table[request, :n_blocks].long()
    k = b.key_cache[pages].reshape(-1, b.num_kv_heads, b.head_size)[:seq_len]
    v = b.value_cache[pages].reshape(-1, b.num_kv_heads, b.head_size)[:seq_len]
    return k, v


def split_into_kernel_blocks(b: PagedBatch, kernel_block_size: int) -> PagedBatch:
    """The same cache seen as pages of `kernel_block_size` tokens (views, no copy): cache block p
    becomes kernel blocks p*k .. p*k+k-1 with k = block_size // kernel_block_size."""
    if kernel_block_size == b.block_size:
        return b
    if b.block_size % kernel_block_size:
        raise ValueError(f"kernel block size {kernel_block_size} does not divide block size {b.block_size}")
    k = b.block_size // kernel_block_size
    nb, _, hkv, d = b.key_cache.shape
    view = lambda c: c.reshape(nb * k, kernel_block_size, hkv, d)  # noqa: E731
    table = (b.block_table.long()[:, :, None] * k + torch.arange(k, device=b.block_table.device)).reshape(b.batch, -1)
    return replace(b, key_cache=view(b.key_cache), value_cache=view(b.value_cache),
                   block_table=table.to(torch.int32).contiguous(), block_size=kernel_block_size)


def reference_attention(b: Batch) -> torch.Tensor:
    """fp32 attention from gathered K/V (dequantized for an fp8 cache). Query token i of a request
    with KV length L and Q new tokens sits at position L-Q+i and sees keys at positions <= L-Q+i.
    An MLA batch (mla.MlaBatch) brings its own reference (absorbed MLA, mla.reference_mla): mla.py
    builds on this module, not the other way."""
    if getattr(b, "kv_lora_rank", None) is not None:
        return cast("MlaBatch", b).reference()
    b = cast(PagedBatch, b)
    seq_lens, q_lens = b.host_lists()
    cu = b.cu_query_lens.tolist()
    hkv, group, d = b.num_kv_heads, b.num_q_heads // b.num_kv_heads, b.head_size
    out = torch.empty(b.query.shape, dtype=torch.float32, device=b.query.device)
    for r, (kv_len, q_len) in enumerate(zip(seq_lens, q_lens)):
        k, v = gather_request_kv(b, r, kv_len)
        k, v = kv_quant.dequantize(k, b.k_scale), kv_quant.dequantize(v, b.v_scale)
        q = b.query[cu[r] : cu[r + 1]].float().reshape(q_len, hkv, group, d)
        scores = torch.einsum("qhgd,khd->hgqk", q, k) * b.scale
        q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
        k_pos = torch.arange(kv_len, device=q.device)[None, :]
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        o = torch.einsum("hgqk,khd->qhgd", probs, v)
        out[cu[r] : cu[r + 1]] = o.reshape(q_len, hkv * group, d)
    return out


def relative_error(out: torch.Tensor | None, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64; any NaN/inf in out (or a shape mismatch) gives inf."""
    if out is None or tuple(out.shape) != tuple(ref.shape):
        return float("inf")
    o = out.detach().to(torch.float64)
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    if not bool(torch.isfinite(o).all()):
        return float("inf")
    denom = float(torch.linalg.vector_norm(r))
    num = float(torch.linalg.vector_norm(o - r))
    if denom == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    err = num / denom
    return err if math.isfinite(err) else float("inf")


def tolerance_for(dtype: str | torch.dtype) -> float:
    if isinstance(dtype, torch.dtype):
        dtype = {v: k for k, v in DTYPES.items()}[dtype]
    return kv_quant.TOLERANCE[dtype]


def passes(err: float, dtype: str | torch.dtype) -> bool:
    return math.isfinite(err) and err < tolerance_for(dtype)


def new_poisoned_output(b: PagedBatch) -> torch.Tensor:
    out = torch.empty_like(b.query)
    out.fill_(float("nan"))
    return out


def dtype_name(t: torch.Tensor) -> str:
    return {v: k for k, v in DTYPES.items()}[t.dtype]


def workload_of(b: Batch, context_len: int | None = None) -> Workload:
    """A Workload describing `b` (context_len = the longest KV length unless given)."""
    seq_lens, q_lens = b.host_lists()
    return Workload(
        kind=b.kind,
        batch=b.batch,
        context_len=context_len or max(seq_lens),
        query_len=max(q_lens),
        num_q_heads=b.num_q_heads,
        num_kv_heads=b.num_kv_heads,
        head_size=b.head_size,
        dtype=dtype_name(b.query),
        kv_cache_dtype=b.kv_cache_dtype,
        kv_lora_rank=getattr(b, "kv_lora_rank", None),
        qk_nope_head_dim=getattr(b, "qk_nope_head_dim", None),
        index_topk=getattr(b, "index_topk", None),
    )
