"""FLEX_ATTENTION: torch's FlexAttention over the paged KV cache, compiled, the way vLLM's
flex_attention backend (vllm/v1/attention/backends/flex_attention.py) drives it:

- The whole cache is one long key sequence: (num_blocks * block_size) tokens, (1, Hkv, N, D).
  All query tokens of the batch are one query sequence (1, Hq, T, D); enable_gqa=True.
- A mask_mod maps a physical KV index to its logical position through a physical-to-logical
  block table (per request), and a query index to its request (doc_ids) and logical position
  (decode_offset = seq_len - query_len): valid & causal.
- The BlockMask is built directly from the block table (vLLM's `_build_block_mask_direct`,
  torch >= 2.9): query tiles of q_block_size=16 tokens, kv tiles = one page, each query tile
  listing the deduplicated pages of the requests it holds.
- flex_attention is torch.compile'd (fullgraph); kernel_options pin BLOCK_M/BLOCK_N to the mask's
  tiles with FORCE_USE_FLEX_ATTENTION on GPU. vLLM copies the result into its output buffer; so
  does run() here.

vLLM's physical_to_logical resets physical block 0 to -1 ("block 0 is always empty"): PagedBatch
never hands block 0 to a request, so the same holds here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from attnsel.attention.kernels.base import (
    PreparedKernel,
    installed_version,
    module_importable,
    paged,
    shape_kind_reason,
)
from attnsel.attention.rules import TORCH_DTYPES

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    from attnsel.attention.kernels.base import Batch
    from attnsel.attention.kernels.paged import PagedBatch, Workload

    KernelOptions = dict[str, bool | int]
    """FlexAttention's kernel_options as vLLM passes them on GPU (None on CPU)."""
    MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    """FlexAttention's mask_mod(batch, head, q_idx, kv_idx) -> visible."""

Q_BLOCK_SIZE = 16  # vLLM's q_block_size when direct build is available (torch >= 2.9)
CPU_MAX_KV_TILE = 32
GPU_FALLBACK_KV_TILE = 64

_COMPILED: dict[str, Callable[..., torch.Tensor]] = {}


def _compiled_flex() -> Callable[..., torch.Tensor]:
    if "flex" not in _COMPILED:
        import torch
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention

        # Every batch shape/mask recompiles; past dynamo's recompile limit (8 by default; vLLM
        # raises it to 16) torch silently falls back to the unfused eager path. Sweeps need more,
        # and a silent fallback must never be timed as "FlexAttention".
        config = torch._dynamo.config
        for limit in ("recompile_limit", "cache_size_limit"):  # the name changed across torch releases
            if hasattr(config, limit):
                setattr(config, limit, max(getattr(config, limit), 256))
        if hasattr(config, "fail_on_recompile_limit_hit"):
            config.fail_on_recompile_limit_hit = True
        # dynamic=False: a sweep changes shapes between calls, and automatic dynamic shapes after
        # the first recompile broke the CPU template (index out of bounds); each shape compiles once.
        _COMPILED["flex"] = torch.compile(flex_attention, fullgraph=True, dynamic=False)
    return _COMPILED["flex"]


def inductor_cache_note() -> str:
    """Whether inductor's on-disk caches (FX graph, AOTAutograd, autotune) are on in this process:
    they are by default, and they are what keeps a warm sweep from recompiling every shape. attnsel
    leaves them as the user set them (TORCHINDUCTOR_FX_GRAPH_CACHE=0 etc. turn them off)."""
    try:
        from torch._inductor import config
    except Exception:
        return "inductor caches: unknown"
    flags = {"fx graph": getattr(config, "fx_graph_cache", None),
             "autotune": getattr(config, "autotune_local_cache", None)}
    functorch = None
    try:
        from torch._functorch import config as fconfig

        functorch = getattr(fconfig, "enable_autograd_cache", None)
    except Exception:
        pass
    if functorch is not None:
        flags["aot autograd"] = functorch
    shown = ", ".join(f"{k} {'on' if v else 'off'}" for k, v in flags.items() if v is not None)
    return f"inductor on-disk caches: {shown or 'unknown'} (a cold cache compiles every shape)"


def build_block_mask(b: PagedBatch, q_block_size: int = Q_BLOCK_SIZE) -> BlockMask:
    """BlockMask + mask_mod over the physical cache for batch `b` (plan step, outside timing)."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    dev = b.query.device
    seq_lens, q_lens = b.host_lists()
    page = b.block_size
    num_tokens = int(b.query.shape[0])
    pages_of, p2l = _physical_to_logical(b, seq_lens)
    doc_ids = torch.repeat_interleave(torch.arange(b.batch), torch.tensor(q_lens))
    kv_num, kv_indices = _kv_blocks_per_query_tile(b, doc_ids, pages_of, num_tokens, q_block_size)
    mask = BlockMask.from_kv_blocks(
        kv_num[None, None].to(dev),
        kv_indices[None, None].to(dev),
        BLOCK_SIZE=(q_block_size, page),
        mask_mod=_paged_mask_mod(b, doc_ids.to(dev), p2l.to(dev)),
        seq_lengths=(num_tokens, b.num_blocks * page),
        compute_q_blocks=False,
    )
    return mask


def _physical_to_logical(b: PagedBatch, seq_lens: list[int]) -> tuple[list[list[int]], torch.Tensor]:
    """(each request's pages in logical order, the (batch, num_blocks) physical-to-logical block
    table with -1 where a page is not the request's), on the CPU."""
    import torch

    table = b.block_table.cpu()
    pages_of: list[list[int]] = []
    p2l = torch.full((b.batch, b.num_blocks), -1, dtype=torch.int64)
    for r, seq_len in enumerate(seq_lens):
        n = -(-seq_len // b.block_size)
        pages = table[r, :n].long()
        p2l[r, pages] = torch.arange(n)
        pages_of.append(pages.tolist())
    return pages_of, p2l


def _kv_blocks_per_query_tile(b: PagedBatch, doc_ids: torch.Tensor, pages_of: list[list[int]], num_tokens: int,
                              q_block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kv_num, kv_indices): for each query tile, the deduplicated pages of the requests it holds."""
    import torch

    groups = -(-num_tokens // q_block_size)
    lists: list[list[int]] = []
    for g in range(groups):
        seen: dict[int, None] = {}
        for r in sorted(set(doc_ids[g * q_block_size : (g + 1) * q_block_size].tolist())):
            for p in pages_of[r]:
                seen.setdefault(p, None)
        lists.append(list(seen))
    width = max(len(x) for x in lists)
    if b.query.device.type == "cpu":
        # Inductor's CPU lowering asserts "KV seqlen must be smaller than the block_mask size in
        # the KV dimension": give the mask one column per physical page there.
        width = b.num_blocks
    kv_indices = torch.zeros((groups, width), dtype=torch.int32)
    kv_num = torch.zeros((groups,), dtype=torch.int32)
    for g, pages in enumerate(lists):
        kv_indices[g, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
        kv_num[g] = len(pages)
    return kv_num, kv_indices


def _paged_mask_mod(b: PagedBatch, doc_ids: torch.Tensor, p2l: torch.Tensor) -> MaskMod:
    """vLLM's mask_mod: a physical kv index is visible when its page belongs to the query's request,
    lies inside its sequence and is not after the query's position (causal)."""
    import torch

    dev, page = b.query.device, b.block_size
    seq_t = b.seq_lens.to(device=dev, dtype=torch.int64)
    cu_q = b.cu_query_lens.to(device=dev, dtype=torch.int64)
    offset = (b.seq_lens - b.query_lens).to(device=dev, dtype=torch.int64)

    def mask_mod(batch: torch.Tensor, head: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        req = doc_ids[q_idx]
        logical_block = p2l[req, kv_idx // page]
        logical_kv = logical_block * page + kv_idx % page
        q_pos = q_idx - cu_q[req] + offset[req]
        return (logical_block >= 0) & (logical_kv < seq_t[req]) & (logical_kv <= q_pos)

    return mask_mod


class FlexAttentionAdapter:
    backend = "FLEX_ATTENTION"
    name = "torch-flex"

    def __init__(self, compile: bool = True) -> None:
        self.compile = compile

    def availability(self) -> str | None:
        return module_importable("torch.nn.attention.flex_attention")

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        # vLLM FLEX_ATTENTION: fp16/bf16/fp32, any head size (docs/vllm-rules.md §3a); the direct
        # BlockMask build needs kv tiles of one page, and Triton tiles need >= 16 tokens.
        if w.dtype not in TORCH_DTYPES:
            return f"dtype {w.dtype} not supported (fp16, bf16, fp32)"
        kind = shape_kind_reason(w)  # vLLM's FLEX_ATTENTION takes kv auto/bfloat16 only (docs/vllm-rules.md §3a)
        if kind:
            return kind
        if block_size % 16 or block_size & (block_size - 1):
            return f"block size {block_size}: FlexAttention's kv tile (= one page) must be a power of two >= 16"
        return None

    def prepare(self, batch: Batch) -> PreparedKernel:
        import torch

        b, notes = _walkable_on_this_device(paged(batch), self.compile)
        t0 = time.perf_counter()
        mask = build_block_mask(b)
        on_gpu = b.query.device.type == "cuda"
        options: KernelOptions | None = (
            {"FORCE_USE_FLEX_ATTENTION": True, "BLOCK_M": Q_BLOCK_SIZE, "BLOCK_N": b.block_size} if on_gpu else None)
        out = torch.empty_like(b.query)
        run = _flex_run(b, mask, options, out, compiled=self.compile)
        notes += _first_run(run, b, options)
        setup = time.perf_counter() - t0
        out.fill_(float("nan"))
        mode = "compiled" if self.compile else "eager"
        return PreparedKernel(
            run=run,
            output=lambda: out,
            provider=f"torch {installed_version('torch') or torch.__version__} flex_attention ({mode})",
            kernel_block_size=b.block_size,
            setup_seconds=setup,
            notes=tuple([f"BlockMask direct build: q tiles {Q_BLOCK_SIZE}, kv tiles {b.block_size}"] + notes
                        + ([inductor_cache_note()] if self.compile else [])),
            poison_output=lambda: out.fill_(float("nan")),
            writes_into_given_output=True,
            details={"compiled": self.compile, "kernel_options": options},
        )


def _walkable_on_this_device(b: PagedBatch, compiled: bool) -> tuple[PagedBatch, list[str]]:
    """(the batch, notes): on CPU, compiled, large pages are walked as smaller kernel blocks."""
    from attnsel.attention.kernels.paged import split_into_kernel_blocks

    if b.query.device.type == "cpu" and compiled and b.block_size > CPU_MAX_KV_TILE:
        # torch 2.13's CPU flex template emits C++ that does not compile for kv tiles >= 64
        # ("'cur_kvSplitSize8' was not declared"); walk the pages as 32-token kernel blocks.
        note = f"CPU: cache block {b.block_size} walked as kernel blocks of {CPU_MAX_KV_TILE}"
        return split_into_kernel_blocks(b, CPU_MAX_KV_TILE), [note]
    return b, []


def _flex_run(b: PagedBatch, mask: BlockMask, options: KernelOptions | None, out: torch.Tensor, *,
              compiled: bool) -> Callable[[], torch.Tensor]:
    """One attention call over the whole batch, written into `out`: all query tokens as one
    sequence (1, Hq, T, D) against the cache as one long key sequence (1, Hkv, N, D). `options`
    is read at each call (_first_run may shrink its BLOCK_N)."""
    hkv, d = b.num_kv_heads, b.head_size
    query = b.query.permute(1, 0, 2)[None]  # (1, Hq, T, D)
    key = b.key_cache.view(-1, hkv, d).permute(1, 0, 2)[None]  # (1, Hkv, N, D)
    value = b.value_cache.view(-1, hkv, d).permute(1, 0, 2)[None]
    if compiled:
        flex = _compiled_flex()
    else:
        from torch.nn.attention.flex_attention import flex_attention as flex
    gqa = b.num_q_heads != hkv

    def run() -> torch.Tensor:
        o = flex(query, key, value, None, mask, b.scale, enable_gqa=gqa, kernel_options=options)
        out.copy_(o[0].permute(1, 0, 2))
        return out

    return run if compiled else _without_eager_warning(run)


def _without_eager_warning(run: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """Eager is asked for on purpose: no "use torch.compile" warning."""
    import warnings

    def quiet_run() -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return run()

    return quiet_run


def _first_run(run: Callable[[], torch.Tensor], b: PagedBatch, options: KernelOptions | None) -> list[str]:
    """Run once (compiles); on GPU, pages too big for vLLM's whole-page tile retry with a smaller
    one. Returns the notes saying so."""
    import torch

    on_gpu = b.query.device.type == "cuda"
    try:
        run()
        if on_gpu:
            torch.cuda.synchronize(b.query.device)
    except Exception as exc:
        if not (on_gpu and b.block_size > GPU_FALLBACK_KV_TILE):
            raise
        assert options is not None  # prepare() passes vLLM's options on GPU
        # vLLM's options tile the kernel by whole pages (BLOCK_N = page); big pages can exceed
        # shared memory. Record that, and run with a smaller tile inside each page instead.
        options["BLOCK_N"] = GPU_FALLBACK_KV_TILE
        run()
        torch.cuda.synchronize(b.query.device)
        return [f"BLOCK_N={b.block_size} (vLLM's choice) failed: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:160] if str(exc) else ''}; ran BLOCK_N={GPU_FALLBACK_KV_TILE}"]
    return []
