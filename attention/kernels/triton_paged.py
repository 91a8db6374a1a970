"""TRITON_ATTN providers: attnsel's own Triton paged-attention kernels, and vLLM's when installed.

Our kernels (source in `_triton_kernels.py`) take vLLM's NHD per-block layout directly and walk
the block table; they run on GPU (Triton 3.6+) and on CPU under TRITON_INTERPRET=1.

Tuning knobs (all sweepable from bench/tools/kernel_check.py --triton-configs all):
- DecodeConfig: block_n (KV tokens per tile), num_splits (flash-decoding splits, 0 = heuristic),
  num_warps, num_stages.
- PrefillConfig: block_q (query tokens per tile; rows = block_q x padded group), block_n,
  num_warps, num_stages.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
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

    from attnsel.attention.kernels.base import Batch
    from attnsel.attention.kernels.paged import PagedBatch, Workload

# H100/H200 SXM count; only used when no GPU answers (CPU interpreter runs).
DEFAULT_SM_COUNT = 132


def next_pow2(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


@dataclass(frozen=True)
class DecodeConfig:
    block_n: int = 0  # 0: heuristic
    num_splits: int = 0  # 0: heuristic
    num_warps: int = 4
    num_stages: int = 3  # 3: the block-table read and the K/V tiles of the next tile are prefetched

    def label(self) -> str:
        return f"decode(block_n={self.block_n}, splits={self.num_splits or 'auto'}, warps={self.num_warps}, stages={self.num_stages})"


@dataclass(frozen=True)
class PrefillConfig:
    block_q: int = 0  # 0: heuristic (rows = block_q x padded group ≈ 64)
    block_n: int = 0  # 0: heuristic
    num_warps: int = 4
    num_stages: int = 2

    def label(self) -> str:
        return f"prefill(block_q={self.block_q or 'auto'}, block_n={self.block_n}, warps={self.num_warps}, stages={self.num_stages})"


def default_block_n(block_size: int, head_size: int) -> int:
    """KV tokens per tile: 64 (32 above head 128) so a K and a V tile stay <= 16 KiB each in bf16,
    leaving shared memory for 2-3 pipeline stages. That is several whole pages for pages of 16/32,
    exactly one page for 64, and an aligned slice of one page for 128/256 (one block-table read
    per tile whenever the page is a multiple of the tile)."""
    del block_size  # any page size works: the kernel gathers per token when tiles straddle pages
    return 64 if head_size <= 128 else 32


def heuristic_num_splits(batch: int, num_kv_heads: int, max_seq_len: int, block_n: int, num_sms: int) -> int:
    """Flash-decoding splits. A program holds ~39 KiB of shared memory at block_n 64, head 128
    (AOT-compiled for sm_90: 96-116 registers, no spills), so ~5 fit on an SM. With >= 3 programs
    per SM from batch x KV heads alone, each already keeps a K and a V tile in flight and splitting
    only adds the reduce pass; below that, split until ~4 programs per SM, never into pieces
    shorter than 4 tiles."""
    programs = max(1, batch * num_kv_heads)
    if programs >= 3 * num_sms:
        return 1
    wanted = math.ceil(4 * num_sms / programs)
    longest_useful = max(1, math.ceil(max_seq_len / (4 * block_n)))
    return int(max(1, min(wanted, longest_useful, 64)))


def resolve_decode_config(
    cfg: DecodeConfig, batch: int, num_kv_heads: int, max_seq_len: int, block_size: int, head_size: int, num_sms: int
) -> DecodeConfig:
    block_n = cfg.block_n or default_block_n(block_size, head_size)
    splits = cfg.num_splits or heuristic_num_splits(batch, num_kv_heads, max_seq_len, block_n, num_sms)
    return replace(cfg, block_n=block_n, num_splits=splits)


def resolve_prefill_config(cfg: PrefillConfig, group: int, block_size: int, head_size: int) -> PrefillConfig:
    group_pad = next_pow2(group)
    block_q = cfg.block_q or max(1, 64 // group_pad)
    if block_q * group_pad < 16:  # tl.dot needs >= 16 rows
        block_q = 16 // group_pad
    block_n = cfg.block_n or default_block_n(block_size, head_size)
    return replace(cfg, block_q=block_q, block_n=block_n)


def decode_config_grid(block_size: int) -> list[DecodeConfig]:
    """The sweep `--triton-configs all` runs for decode."""
    block_ns = sorted({32, 64, 128} | ({block_size} if 16 <= block_size <= 128 else set()))
    out = []
    for block_n in block_ns:
        for splits in (0, 1, 2, 4):
            for warps in (2, 4, 8):
                for stages in (2, 3, 4):
                    out.append(DecodeConfig(block_n, splits, warps, stages))
    return out


# the query's type an fp8 cache tile is widened to (the kernels' KV_CAST)
KV_CAST = {"float16": 1, "bfloat16": 2, "float32": 3}


def check_supported(num_q_heads: int, num_kv_heads: int, head_size: int, block_size: int, dtype: str,
                    kv_cache_dtype: str = "auto") -> str | None:
    from attnsel.attention.kernels.kv_quant import TIMED_KV_CACHE_DTYPES

    if kv_cache_dtype not in TIMED_KV_CACHE_DTYPES:
        return f"kv cache dtype {kv_cache_dtype} not supported"
    if dtype not in TORCH_DTYPES:
        return f"dtype {dtype} not supported (fp16, bf16, fp32)"
    if block_size % 16:
        # vLLM's TRITON_ATTN: kernel block sizes [MultipleOf(16)] (docs/vllm-rules.md §3a).
        return "Block size must be a multiple of 16."
    if head_size < 16 or head_size > 256:
        return f"head size {head_size} outside 16..256"
    if num_q_heads % num_kv_heads:
        return "num_q_heads must be a multiple of num_kv_heads"
    return None


def _num_sms(device: torch.device) -> int:
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return DEFAULT_SM_COUNT


class PagedAttentionLauncher:
    """Plans once (tile tables, scratch buffers, configs) and launches our kernels per run()."""

    def __init__(self, b: PagedBatch, decode_cfg: DecodeConfig | None = None,
                 prefill_cfg: PrefillConfig | None = None) -> None:
        import torch

        from attnsel.attention.kernels import _triton_kernels
        from attnsel.attention.kernels.kv_quant import is_fp8
        from attnsel.attention.kernels.paged import dtype_name

        self.kernels = _triton_kernels.jitted()
        # Triton 3.9's interpreter gets bf16 tl.dot wrong; see _triton_kernels' docstring.
        self.dot_in_fp32 = _triton_kernels.interpreting() and b.query.dtype == torch.bfloat16
        self.b = b
        q = b.query
        self.device = q.device
        self.group = b.num_q_heads // b.num_kv_heads
        self.head_pad = max(16, next_pow2(b.head_size))
        seq_lens, q_lens = b.host_lists()
        self.num_decodes = b.num_decodes
        # exp2 domain: scale * log2(e); an fp8 cache's k_scale folds into it, v_scale into the output
        self.scale_log2 = float(b.scale) * float(b.k_scale) * 1.4426950408889634
        self.v_scale = float(b.v_scale)
        self.kv_cast = KV_CAST[dtype_name(q)] if is_fp8(b.kv_cache_dtype) else 0
        self.out = torch.empty_like(q)
        self.decode_cfg: DecodeConfig | None = None
        self.prefill_cfg: PrefillConfig | None = None

        if self.num_decodes:
            dec_lens = seq_lens[: self.num_decodes]
            self.decode_cfg = resolve_decode_config(
                decode_cfg or DecodeConfig(), self.num_decodes, b.num_kv_heads, max(dec_lens),
                b.block_size, b.head_size, _num_sms(self.device),
            )
            splits = self.decode_cfg.num_splits
            if splits > 1:
                rows = self.num_decodes * b.num_q_heads * splits
                self.part_out = torch.empty((rows, self.head_pad), dtype=torch.float32, device=self.device)
                self.part_lse = torch.empty((rows,), dtype=torch.float32, device=self.device)
            else:
                self.part_out = torch.empty((1,), dtype=torch.float32, device=self.device)
                self.part_lse = self.part_out
        if self.num_decodes < b.batch:
            self.prefill_cfg = resolve_prefill_config(prefill_cfg or PrefillConfig(), self.group, b.block_size, b.head_size)
            tile_req: list[int] = []
            tile_q0: list[int] = []
            for r in range(self.num_decodes, b.batch):
                for q0 in range(0, q_lens[r], self.prefill_cfg.block_q):
                    tile_req.append(r)
                    tile_q0.append(q0)
            self.tile_req = torch.tensor(tile_req, dtype=torch.int32, device=self.device)
            self.tile_q0 = torch.tensor(tile_q0, dtype=torch.int32, device=self.device)

    def run(self) -> torch.Tensor:
        if self.num_decodes:
            self._decode()
        if self.prefill_cfg is not None:
            self._prefill()
        return self.out

    def _common_strides(self) -> tuple[int, ...]:
        b = self.b
        return (
            b.query.stride(0), b.query.stride(1),
            b.key_cache.stride(0), b.key_cache.stride(1), b.key_cache.stride(2),
            b.value_cache.stride(0), b.value_cache.stride(1), b.value_cache.stride(2),
            b.block_table.stride(0),
            self.out.stride(0), self.out.stride(1),
        )

    def _decode(self) -> None:
        b, cfg = self.b, self.decode_cfg
        assert cfg is not None  # run() decodes only with a decode config
        splits = cfg.num_splits
        group_pad = max(16, next_pow2(self.group))
        grid = (self.num_decodes, b.num_kv_heads, splits)
        self.kernels["paged_decode"][grid](
            b.query, b.key_cache, b.value_cache, b.block_table, b.seq_lens, b.cu_query_lens,
            self.out, self.part_out, self.part_lse,
            self.scale_log2, self.v_scale,
            *self._common_strides(),
            GROUP=self.group, GROUP_PAD=group_pad, HEAD=b.head_size, HEAD_PAD=self.head_pad,
            PAGE=b.block_size, BLOCK_N=cfg.block_n, NUM_SPLITS=splits, NUM_Q_HEADS=b.num_q_heads,
            DOT_IN_FP32=self.dot_in_fp32, KV_CAST=self.kv_cast,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
        if splits > 1:
            self.kernels["reduce_splits"][(self.num_decodes, b.num_q_heads)](
                self.part_out, self.part_lse, self.out, b.cu_query_lens,
                self.out.stride(0), self.out.stride(1),
                NUM_Q_HEADS=b.num_q_heads, HEAD=b.head_size, HEAD_PAD=self.head_pad,
                NUM_SPLITS=splits, SPLITS_PAD=max(2, next_pow2(splits)),
                num_warps=4,
            )

    def _prefill(self) -> None:
        b, cfg = self.b, self.prefill_cfg
        assert cfg is not None  # run() prefills only with a prefill config
        grid = (int(self.tile_req.shape[0]), b.num_kv_heads)
        self.kernels["paged_prefill"][grid](
            b.query, b.key_cache, b.value_cache, b.block_table, b.seq_lens, b.query_lens, b.cu_query_lens,
            self.tile_req, self.tile_q0, self.out,
            self.scale_log2, self.v_scale,
            *self._common_strides(),
            GROUP=self.group, GROUP_PAD=next_pow2(self.group), HEAD=b.head_size, HEAD_PAD=self.head_pad,
            PAGE=b.block_size, BLOCK_Q=cfg.block_q, BLOCK_N=cfg.block_n,
            DOT_IN_FP32=self.dot_in_fp32, KV_CAST=self.kv_cast,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )

    def describe(self) -> dict[str, object]:
        d: dict[str, object] = {}
        if self.decode_cfg:
            d["decode"] = self.decode_cfg.__dict__.copy()
        if self.prefill_cfg:
            d["prefill"] = self.prefill_cfg.__dict__.copy()
        return d


def paged_attention(b: PagedBatch, decode_cfg: DecodeConfig | None = None,
                    prefill_cfg: PrefillConfig | None = None) -> torch.Tensor:
    """One-shot convenience: plan and run our kernels over `b`, return the output."""
    return PagedAttentionLauncher(b, decode_cfg, prefill_cfg).run()


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _triton_provider() -> str:
    from attnsel.attention.kernels import _triton_kernels

    mode = " interpreter" if _triton_kernels.interpreting() else ""
    return f"attnsel triton (triton {installed_version('triton') or '?'}{mode})"


class AttnselTritonAdapter:
    """TRITON_ATTN through attnsel's own kernels (attention/kernels/_triton_kernels.py)."""

    backend = "TRITON_ATTN"
    name = "attnsel-triton"

    def __init__(self, decode_cfg: DecodeConfig | None = None, prefill_cfg: PrefillConfig | None = None) -> None:
        self.decode_cfg = decode_cfg
        self.prefill_cfg = prefill_cfg

    def availability(self) -> str | None:
        for module in ("torch", "triton"):
            reason = module_importable(module)
            if reason:
                return reason
        return None

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        reason = shape_kind_reason(w, fp8=True) or check_supported(w.num_q_heads, w.num_kv_heads, w.head_size, block_size, w.dtype,
                                 getattr(w, "kv_cache_dtype", "auto"))
        if reason:
            return reason
        from attnsel.attention.kernels import _triton_kernels

        if not str(device).startswith("cuda") and not _triton_kernels.interpreting():
            return "on CPU Triton runs only under TRITON_INTERPRET=1"
        return None

    def prepare(self, batch: Batch) -> PreparedKernel:
        from attnsel.attention.kernels.paged import dtype_name

        b = paged(batch)

        reason = check_supported(b.num_q_heads, b.num_kv_heads, b.head_size, b.block_size, dtype_name(b.query),
                                 b.kv_cache_dtype)
        if reason:
            raise ValueError(reason)
        t0 = time.perf_counter()
        launcher = PagedAttentionLauncher(b, self.decode_cfg, self.prefill_cfg)
        launcher.run()  # compiles
        _sync(launcher.device)
        setup = time.perf_counter() - t0

        def poison() -> None:
            launcher.out.fill_(float("nan"))

        poison()
        paths = "+".join(k for k in ("decode", "prefill") if k in launcher.describe())
        return PreparedKernel(
            run=launcher.run,
            output=lambda: launcher.out,
            provider=f"{_triton_provider()} ({paths})",
            kernel_block_size=b.block_size,
            setup_seconds=setup,
            notes=tuple(
                c.label() for c in (launcher.decode_cfg, launcher.prefill_cfg) if c is not None
            ),
            poison_output=poison,
            writes_into_given_output=True,
            details=launcher.describe(),
        )

