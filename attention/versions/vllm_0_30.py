"""Rules that are code in vLLM 0.30.0, written as what it does differently from 0.31
(the profiles of 0.26-0.32 are derived downward from 0.33, each module subclasses the next
release's `Rules`). Read in the release's wheel, checked with bench/tools/parity_live.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnsel.attention.versions import vllm_0_31
from attnsel.attention.versions.vllm_0_33 import FA4_HD256_PAGE_SIZE

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs


class Rules(vllm_0_31.Rules):
    # flash_attn.py FlashAttentionBackend.supports_combination
    FA_FP8_KV_REASON = "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"
    FA_SM90_FP8_MM_PREFIX_NEEDS_TRITON = False

    # --- fa_utils.py: FP8 KV is FA3 on 9.x or FA4 on 10.x (no SM90 FA4 head-512 path yet) -------
    def flash_attn_supports_kv_cache_dtype(self, ctx: SelectionContext, kv_cache_dtype: str, inputs: SelectorInputs | None = None,
                                           **version_args: Any) -> bool:
        if kv_cache_dtype == "fp8_e5m2":
            return False
        version = self.fa_version(ctx, inputs, **version_args).version
        return (version == 3 and ctx.capability[0] == 9) or (version == 4 and ctx.capability[0] == 10)

    def _fa_fixed_block_size(self, ctx: SelectionContext, inputs: SelectorInputs | None) -> int | None:
        # flash_attn.py _get_fa4_hd256_block_size: the FA4 head-256 kernel's page only
        if inputs is None or not ctx.model_dims_known:
            return None  # no model config: flash_attn.py:297 @ v0.30.0 returns None
        if not self._uses_fa4_hd256_kernel(ctx, inputs.head_size, None):
            return None
        version = self.fa_version(ctx, inputs, head_size=inputs.head_size, supports_fa4_hd256=True).version
        return FA4_HD256_PAGE_SIZE if version == 4 else None

    def _combination_fa_causal_route(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # triton_flash_attn.py _FA4Backend.supports_combination: FA4 only
        version = self.fa_version(
            ctx, inputs, head_size=inputs.head_size, has_sinks=inputs.has_sink,
            block_size=inputs.block_size, supports_fa4_hd256=True,
        ).version
        return None if version == 4 else "causal route requires FlashAttention v4"

    # --- mla/flashmla_sparse.py: no head-512 (NoPE) rule yet ----------------------------------------
    def _combination_flashmla_sparse(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        return self._flashmla_sparse_nvfp4_reason(inputs.kv_cache_dtype, ctx.capability[0])
