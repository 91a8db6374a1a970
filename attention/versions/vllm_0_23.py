"""Rules that are code in vLLM 0.23.0: what differs from 0.24 (this profile's base, the release after).
Read in the release's own source (bench/tools/selection_source.py), checked with
bench/tools/parity_live.py; each method names the file of vllm/ it follows (restated, not copied).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.versions import vllm_0_24

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs


class Rules(vllm_0_24.Rules):
    # ops/flashmla.py is_flashmla_sparse_supported: "Hopper and Blackwell devices" (0.24 adds "DC")
    FLASHMLA_SPARSE_DEVICES = "Hopper and Blackwell devices"

    # --- vllm/platforms/cuda.py _get_backend_priorities ------------------------------------------
    def priority_list(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        # no SM12x MLA branch yet: 12.x takes the list of every other non-Blackwell GPU
        if inputs.use_mla and ctx.capability[0] == 12:
            return self._mla_other_priorities(inputs, ctx)
        return super().priority_list(inputs, ctx)

    # --- supports_combination texts ------------------------------------------------------------
    def _combination_flash_attn(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # flash_attn.py FlashAttentionBackend.supports_combination: no mm_prefix argument yet
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        return None

    def _combination_flashinfer_mla_sparse(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashinfer_mla_sparse.py FlashInferMLASparseBackend: one class for 10.x, no fp8_ds_mla text
        return self._flashinfer_mla_sparse_model_reason(ctx)
