"""FLASH_ATTN providers, best first: vLLM's own build, FA3, FA4 (CuTe DSL), flash-attn 2.x.

vLLM's FLASH_ATTN backend keeps K and V as kv_cache[0] / kv_cache[1], each
(num_blocks, block_size, num_kv_heads, head_size) (docs/vllm-rules.md §3a: (2, nb, bs, kvh, hs)), which is
PagedBatch's layout already, so no provider needs a copy. Its kernel block sizes are
[MultipleOf(16)] and head sizes hs % 8 == 0 and hs <= 256 (§3a).

Paged entry points read from each library's source (Dao-AILab/flash-attention, vllm-project/
flash-attention):
- vllm.vllm_flash_attn.flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k,
  seqused_k=, softmax_scale=, causal=, block_table=, out=, fa_version=)
- FA3 hopper/flash_attn_interface.py: flash_attn_with_kvcache(q, k_cache, v_cache,
  cache_seqlens=, page_table=, cu_seqlens_q=, max_seqlen_q=, softmax_scale=, causal=)
- FA4 flash_attn/cute/interface.py: flash_attn_varlen_func(q, k, v, cu_seqlens_q=, max_seqlen_q=,
  seqused_k=, page_table=, softmax_scale=, causal=); decode as q (B, 1, Hq, D) (docs/gpu-facts.md §3).
- flash-attn 2.x flash_attn/flash_attn_interface.py: flash_attn_varlen_func(q, k, v, cu_seqlens_q,
  cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=, causal=, block_table=); its C++ checks
  "Paged KV cache block size must be divisible by 256".
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING

from attnsel.attention.kernels.base import (
    PreparedKernel,
    compute_capability,
    cuda_device_reason,
    installed_version,
    module_importable,
    module_missing,
    paged,
    shape_kind_reason,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnsel.attention.kernels.base import Batch
    from attnsel.attention.kernels.paged import PagedBatch, Workload

FA2_PAGED_MESSAGE = "Paged KV cache block size must be divisible by 256"


def vllm_flash_attn_shape_reason(w: Workload, block_size: int) -> str | None:
    """vLLM FLASH_ATTN's own limits (docs/vllm-rules.md §3a), shared by every provider below."""
    if w.dtype not in ("bfloat16", "float16"):
        return f"dtype {w.dtype} not supported by FLASH_ATTN (fp16, bf16)"
    if block_size % 16:
        return "Block size must be a multiple of 16."
    if not (w.head_size % 8 == 0 and w.head_size <= 256):
        return f"head size {w.head_size} not supported (needs hs % 8 == 0 and hs <= 256)"
    return None


def _timed_first_call(run: Callable[[], object], dev: torch.device) -> float:
    """Seconds for the first call (JIT compile included), synchronised."""
    import torch

    t0 = time.perf_counter()
    run()
    torch.cuda.synchronize(dev)
    return time.perf_counter() - t0


def _max_lens(b: PagedBatch) -> tuple[int, int]:
    seq_lens, q_lens = b.host_lists()
    return max(q_lens), max(seq_lens)


class _FlashAttnBase:
    backend = "FLASH_ATTN"
    name = "?"
    module = "?"

    def availability(self) -> str | None:
        return module_missing(self.module) or cuda_device_reason("cuda") or module_importable(self.module)

    def cc_reason(self, cc: tuple[int, int] | None) -> str | None:
        return None if cc is None or cc >= (8, 0) else f"needs compute capability >= 8.0, got {cc[0]}.{cc[1]}"

    def extra_reason(self, w: Workload, block_size: int) -> str | None:
        return None

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        # Shape rules first: they hold on every machine, so a CPU dry run reports them too.
        # fp8 KV: vLLM's FlashAttentionImpl quantizes the query and passes q/k/v descales; only the
        # vLLM-driven adapter (vllm_backend.py) does that (FA4 runs fp8 on SM100 only, FA2 not at all).
        return (
            shape_kind_reason(w)
            or vllm_flash_attn_shape_reason(w, block_size)
            or self.extra_reason(w, block_size)
            or cuda_device_reason(device)
            or self.cc_reason(compute_capability(device))
        )


class VllmFlashAttnAdapter(_FlashAttnBase):
    """vLLM's vendored build (FA2/FA3, FA4 on Blackwell) called as a bare op: the fallback when
    vLLM's FlashAttentionImpl + builder cannot be driven (vllm_backend.py), which adds the AOT
    scheduler metadata and, under full CUDA graphs, a capped split count."""

    name = "vllm-flash-attn"
    module = "vllm.vllm_flash_attn"

    def availability(self) -> str | None:
        import os

        from attnsel.attention.kernels.vllm import STANDINS_ENV

        if os.environ.get(STANDINS_ENV) == "1":
            return f"skipped: {STANDINS_ENV}=1 asks for the stand-ins"
        return super().availability()

    def fa_version(self) -> int:
        try:  # seed era location, then older ones
            from vllm.v1.attention.backends.fa_utils import get_flash_attn_version  # type: ignore
        except Exception:
            try:
                from vllm.attention.utils.fa_utils import get_flash_attn_version  # type: ignore
            except Exception:
                get_flash_attn_version = None
        if get_flash_attn_version is not None:
            try:
                version = get_flash_attn_version()
                if version:
                    return int(version)
            except Exception:
                pass
        from vllm.vllm_flash_attn import is_fa_version_supported  # type: ignore

        cc = compute_capability("cuda") or (0, 0)
        # docs/vllm-rules.md §3c: 3 on CC 9.x when FA3 is supported, 4 on CC 10.x when FA4 is (0.17), else 2.
        if cc[0] == 9 and is_fa_version_supported(3):
            return 3
        if cc[0] == 10 and is_fa_version_supported(4):
            return 4
        return 2

    def prepare(self, batch: Batch) -> PreparedKernel:
        import torch
        from vllm.vllm_flash_attn import flash_attn_varlen_func  # type: ignore

        b = paged(batch)
        version = self.fa_version()
        max_q, max_k = _max_lens(b)
        out = torch.empty_like(b.query)

        def run() -> torch.Tensor:
            flash_attn_varlen_func(
                b.query, b.key_cache, b.value_cache, max_q, b.cu_query_lens, max_k,
                seqused_k=b.seq_lens, softmax_scale=b.scale, causal=True,
                block_table=b.block_table, out=out, fa_version=version,
            )
            return out

        setup = _timed_first_call(run, b.query.device)
        out.fill_(float("nan"))
        return PreparedKernel(
            run=run, output=lambda: out,
            provider=f"vllm.vllm_flash_attn bare op (vllm {installed_version('vllm')}, FA{version}; no metadata builder)",
            kernel_block_size=b.block_size, setup_seconds=setup,
            poison_output=lambda: out.fill_(float("nan")), writes_into_given_output=True,
            details={"fa_version": version},
        )


class FA3Adapter(_FlashAttnBase):
    """FlashAttention 3 (hopper/ build, module flash_attn_interface): Hopper only."""

    name = "fa3"
    module = "flash_attn_interface"

    def cc_reason(self, cc: tuple[int, int] | None) -> str | None:
        if cc is not None and cc[0] != 9:
            return f"FA3 runs on Hopper (CC 9.x) only, got {cc[0]}.{cc[1]}"
        return None

    def prepare(self, batch: Batch) -> PreparedKernel:
        from flash_attn_interface import flash_attn_with_kvcache  # type: ignore

        b = paged(batch)
        max_q, _ = _max_lens(b)
        holder: dict[str, torch.Tensor] = {}

        def run() -> torch.Tensor:
            holder["out"] = flash_attn_with_kvcache(
                b.query, b.key_cache, b.value_cache,
                cache_seqlens=b.seq_lens, page_table=b.block_table,
                cu_seqlens_q=b.cu_query_lens, max_seqlen_q=max_q,
                softmax_scale=b.scale, causal=True,
            )
            return holder["out"]

        setup = _timed_first_call(run, b.query.device)
        version = installed_version("flash_attn_3", "flash-attn-3", "flash_attn_interface") or "?"
        return PreparedKernel(
            run=run, output=lambda: holder["out"],
            provider=f"flash_attn_interface (FA3 {version})",
            kernel_block_size=b.block_size, setup_seconds=setup,
            notes=("returns a fresh output tensor each call",),
        )


# FA4 keeps its compiled CuTe kernels in memory only unless FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
# (flash_attn/cute/cache_utils.py, read once when the module is imported): then each compiled
# kernel is exported as an object file under FLASH_ATTENTION_CUTE_DSL_CACHE_DIR (default
# /tmp/$USER/flash_attention_cute_dsl_cache), keyed by the compile key and a fingerprint of FA4's
# sources + cutlass/tvm_ffi versions, and loaded by later processes instead of compiling again
# (measured without it on an H200: up to 3.6 s per new block size/shape, in every worker).
FA4_CACHE_ENABLE_ENV = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"
FA4_CACHE_DIR_ENV = "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"


def enable_fa4_compile_cache(env: MutableMapping[str, str] | None = None) -> None:
    """Turns FA4's persistent compile cache on unless the user set it; call before importing
    flash_attn.cute (the flag is read at import). The kernels are the same, only not recompiled."""
    import os

    env = os.environ if env is None else env
    env.setdefault(FA4_CACHE_ENABLE_ENV, "1")
    if env.get(FA4_CACHE_ENABLE_ENV) == "1" and not env.get(FA4_CACHE_DIR_ENV):
        base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        env[FA4_CACHE_DIR_ENV] = os.path.join(base, "flash_attention_cute_dsl_cache")


def fa4_compile_cache_note() -> str:
    """What this process's FA4 does with compiled kernels (for the row notes)."""
    try:
        from flash_attn.cute import cache_utils  # type: ignore
    except Exception:
        return "FA4 compiles its kernels in every process (this flash_attn.cute has no persistent compile cache)"
    if getattr(cache_utils, "CUTE_DSL_CACHE_ENABLED", False):
        try:
            where = str(cache_utils.get_cache_path())
        except Exception:
            where = "?"
        return f"FA4 persistent compile cache on ({FA4_CACHE_ENABLE_ENV}=1, {where})"
    return f"FA4 persistent compile cache off ({FA4_CACHE_ENABLE_ENV} is not 1): compiles in every process"


def _fa4_version() -> str:
    version = installed_version("flash-attn-4", "flash_attn_4", "fa4")
    if version:
        return version
    try:
        import flash_attn.cute as cute  # type: ignore

        return getattr(cute, "__version__", "?")
    except Exception:
        return "?"


class FA4Adapter(_FlashAttnBase):
    """FlashAttention 4 (CuTe DSL, flash_attn.cute). vLLM runs it on Blackwell; on Hopper it is a
    stand-in for FLASH_ATTN when vLLM's own build is absent (docs/gpu-facts.md §3)."""

    name = "fa4-cute"
    module = "flash_attn.cute.interface"

    def before_import(self) -> None:
        enable_fa4_compile_cache()

    def availability(self) -> str | None:
        self.before_import()
        return super().availability()

    def cc_reason(self, cc: tuple[int, int] | None) -> str | None:
        # docs/vllm-rules.md §3c (0.17): FA4 supported on CC families 9.x, 10.x, 11.x.
        if cc is not None and cc[0] not in (9, 10, 11):
            return f"FA4 (CuTe) needs CC 9.x/10.x/11.x in vLLM, got {cc[0]}.{cc[1]}"
        return None

    def prepare(self, batch: Batch) -> PreparedKernel:
        from flash_attn.cute.interface import flash_attn_varlen_func  # type: ignore

        b = paged(batch)
        max_q, _ = _max_lens(b)
        holder: dict[str, torch.Tensor] = {}
        decode_only = b.num_decodes == b.batch
        if decode_only:
            q4 = b.query.view(b.batch, 1, b.num_q_heads, b.head_size)

            def call() -> torch.Tensor | tuple[torch.Tensor, ...]:
                return flash_attn_varlen_func(
                    q4, b.key_cache, b.value_cache, seqused_k=b.seq_lens, page_table=b.block_table,
                    softmax_scale=b.scale, causal=True,
                )
        else:

            def call() -> torch.Tensor | tuple[torch.Tensor, ...]:
                return flash_attn_varlen_func(
                    b.query, b.key_cache, b.value_cache, cu_seqlens_q=b.cu_query_lens, max_seqlen_q=max_q,
                    seqused_k=b.seq_lens, page_table=b.block_table, softmax_scale=b.scale, causal=True,
                )

        def run() -> torch.Tensor:
            res = call()
            out = res[0] if isinstance(res, (tuple, list)) else res
            holder["out"] = out.view(b.query.shape)
            return holder["out"]

        setup = _timed_first_call(run, b.query.device)
        cc = compute_capability(str(b.query.device))
        notes = ["returns a fresh output tensor each call", fa4_compile_cache_note()]
        if cc is not None and cc[0] == 9:
            notes.append("vLLM runs FA3 on Hopper; FA4 stands in for FLASH_ATTN here")
        return PreparedKernel(
            run=run, output=lambda: holder["out"],
            provider=f"flash_attn.cute (FA4 {_fa4_version()})",
            kernel_block_size=b.block_size, setup_seconds=setup, notes=tuple(notes),
        )


class FA2Adapter(_FlashAttnBase):
    """flash-attn 2.x: its paged path needs block sizes that are multiples of 256."""

    name = "flash-attn-2"
    module = "flash_attn.flash_attn_interface"

    def availability(self) -> str | None:
        version = installed_version("flash-attn", "flash_attn")
        if version is None:
            return "flash-attn (2.x) is not installed"
        if not version.startswith("2."):
            return f"flash-attn {version} is not a 2.x release"
        return super().availability()

    def extra_reason(self, w: Workload, block_size: int) -> str | None:
        if block_size % 256:
            return f"{FA2_PAGED_MESSAGE} (flash-attn 2.x), got {block_size}"
        return None

    def prepare(self, batch: Batch) -> PreparedKernel:
        import torch
        from flash_attn.flash_attn_interface import flash_attn_varlen_func  # type: ignore

        b = paged(batch)
        if b.block_size % 256:
            raise ValueError(f"{FA2_PAGED_MESSAGE} (flash-attn 2.x), got {b.block_size}")
        max_q, max_k = _max_lens(b)
        cu_k = torch.zeros(b.batch + 1, dtype=torch.int32, device=b.query.device)
        cu_k[1:] = torch.cumsum(b.seq_lens, 0)
        holder: dict[str, torch.Tensor] = {}

        def run() -> torch.Tensor:
            holder["out"] = flash_attn_varlen_func(
                b.query, b.key_cache, b.value_cache, b.cu_query_lens, cu_k, max_q, max_k,
                softmax_scale=b.scale, causal=True, block_table=b.block_table,
            )
            return holder["out"]

        setup = _timed_first_call(run, b.query.device)
        return PreparedKernel(
            run=run, output=lambda: holder["out"],
            provider=f"flash_attn {installed_version('flash-attn', 'flash_attn')} (FA2)",
            kernel_block_size=b.block_size, setup_seconds=setup,
            notes=("returns a fresh output tensor each call",),
        )
