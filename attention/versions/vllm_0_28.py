"""Rules that are code in vLLM 0.28.0 (2cf0a6915), written as what it does differently from 0.29
(the profiles of 0.26-0.32 are derived downward from 0.33). Read in the release's wheel, checked
with bench/tools/parity_live.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.versions import vllm_0_29

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs


class Rules(vllm_0_29.Rules):
    # --- vllm/v1/attention/backends/fa_utils.py get_flash_attn_version ---------------------------
    def _fa4_kernel_fallbacks(self, version: int, ctx: SelectionContext, inputs: SelectorInputs | None, head_size: int | None, head_size_v: int | None, has_sinks: bool, block_size: int | None,
                              supports_fa4_hd256: bool, warnings: list[str]) -> int:
        # no head-256 kernel yet: FA4 at head size 256 is switched off on Blackwell
        if version == 4 and ctx.capability[0] >= 10 and head_size == 256:
            warnings.append("FA4 on Blackwell is temporarily disabled for head_size=256, defaulting to FA version 2.")
            return 2
        return version

    @staticmethod
    def _fa4_tmem_exempt(head_size: int, head_size_v: int | None) -> bool:
        return head_size == 192 and head_size_v == 128

    def _fa_fixed_block_size(self, ctx: SelectionContext, inputs: SelectorInputs | None) -> int | None:
        return None  # FlashAttentionBackend.get_supported_kernel_block_sizes: [MultipleOf(16)] only
