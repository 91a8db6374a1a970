"""Rules that are code in vLLM 0.31.0, written as what it does differently from 0.32 (the profiles
of 0.26-0.32 are derived downward from 0.33, each module subclasses the next release's `Rules`).
Read in the release's wheel, checked with bench/tools/parity_live.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.versions import vllm_0_32

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext


class Rules(vllm_0_32.Rules):
    # --- flashinfer.py FlashInferBackend.supports_kv_cache_dtype ------------------------------------
    def _kv_flashinfer(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # NVFP4 only on 10.x with TRT-LLM prefill and decode (the FA2-path NVFP4 cache is 0.32's)
        if kv_cache_dtype is not None and kv_cache_dtype.startswith("nvfp4") and ctx.capability[0] != 10:
            return False
        return super()._kv_flashinfer(rule, kv_cache_dtype, ctx)

    # --- mla/flashmla_sparse.py: head 512 (NoPE) only from a bf16 cache (fp8_ds_mla is 0.32's) -----
    FLASHMLA_SPARSE_NOPE_KV: tuple[str | None, ...] = (None, "auto", "bfloat16", "float16")
    FLASHMLA_SPARSE_NOPE_KV_TEXT = "bf16"
