"""Rules that are code in vLLM 0.27.0, written as what it does differently from 0.28 (the profiles
of 0.26-0.32 are derived downward from 0.33, each module subclasses the next release's `Rules`).
Read in the release's wheel, checked with bench/tools/parity_live.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import FlashAttnResolution
from attnsel.attention.versions import vllm_0_28

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext, SelectorInputs


class Rules(vllm_0_28.Rules):
    @staticmethod
    def quantized_kv(kv_cache_dtype: str | None) -> bool:
        # vllm/utils/torch_utils.py is_quantized_kv_cache: fp8*, *per_token_head, "nvfp4" itself
        if kv_cache_dtype is None:
            return False
        return kv_cache_dtype.startswith("fp8") or kv_cache_dtype.endswith("per_token_head") or kv_cache_dtype == "nvfp4"

    # --- fa_utils.py get_flash_attn_version: FA4 head 256 runs on Blackwell (TMEM-exempt) ---------
    def _fa4_kernel_fallbacks(self, version: int, ctx: SelectionContext, inputs: SelectorInputs | None, head_size: int | None, head_size_v: int | None, has_sinks: bool, block_size: int | None,
                              supports_fa4_hd256: bool, warnings: list[str]) -> int:
        return version

    @staticmethod
    def _fa4_tmem_exempt(head_size: int, head_size_v: int | None) -> bool:
        return head_size == 256 or (head_size == 192 and head_size_v == 128)

    def flash_attn_version(self, ctx: SelectionContext, head_size: int | None = None, inputs: SelectorInputs | None=None) -> FlashAttnResolution:
        # flash_attn.py FlashAttentionImpl passes requires_local_attention (a sliding window): FA4's
        # head-256 path on Blackwell has none, so such a layer falls back to FA2
        resolution = super().flash_attn_version(ctx, head_size, inputs)
        local = inputs is not None and inputs.has_sliding_window
        if resolution.version == 4 and local and ctx.capability[0] >= 10 and head_size == 256:
            warning = "FA4 on Blackwell does not support local attention with head_size=256, defaulting to FA version 2."
            return FlashAttnResolution(2, (*resolution.warnings, warning))
        return resolution

    # --- flashinfer.py FlashInferBackend -----------------------------------------------------------
    def _sink_flashinfer(self, rule: NamedRule, ctx: SelectionContext) -> bool:
        # supports_sink: the SM100 trtllm-gen path only (SM12x XQA sinks are 0.28's)
        return ctx.capability[0] == 10 and super()._sink_flashinfer(rule, ctx)
