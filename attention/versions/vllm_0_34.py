"""Rules that are code in vLLM 0.34.0 (62d4bc3c7) and new since 0.33. Checked against the real vLLM
0.34.0 with bench/tools/parity_live.py; each method names the file of vllm/ it follows (read in
site-packages, restated here, not copied). The texts and numbers are data (vllm_0_34.json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.versions import vllm_0_33

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs


class Rules(vllm_0_33.Rules):
    def _combination_flash_attn(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # flash_attn.py:474-483 @ 0.34.0 FlashAttentionBackend.supports_combination: FP8 KV at head 512
        # on SM90 (FA4's 64-token TMA tile) refuses blocks not a multiple of 64 and block sparsity,
        # before every older check
        rule = self.profile.data["flash_attn_sm90_d512_quantized_kv"]
        kv = inputs.kv_cache_dtype
        if (
            tuple(ctx.capability) == tuple(rule["capability"])
            and kv is not None
            and self.quantized_kv(kv)
            and inputs.head_size == rule["head_size"]
        ):
            if inputs.block_size is not None and inputs.block_size % rule["block_multiple"]:
                return rule["block_size_reason"]
            if inputs.use_sparse:
                return rule["sparse_reason"]
        return super()._combination_flash_attn(inputs, ctx)
