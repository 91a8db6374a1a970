"""Rules that are code in vLLM 0.18.0 (the first release with the block size settled after the
layers chose, docs/vllm-rules.md §9): what differs from 0.19 (this profile's base, the release after). Read in
the release's own source (bench/tools/selection_source.py), checked with bench/tools/parity_live.py;
each method names the file of vllm/ it follows (restated, not copied).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.versions import seed_0_17, vllm_0_19

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs


class Rules(vllm_0_19.Rules):
    # mla/flashinfer_mla_sparse.py FlashInferMLASparseBackend.supports_combination: qk_nope_head_dim
    # must be 128, in the seed's words (0.19 accepts 128 and 192)
    _combination_flashinfer_mla_sparse = seed_0_17.Rules._combination_flashinfer_mla_sparse

    # --- vllm/platforms/cuda.py _get_backend_priorities ------------------------------------------
    @staticmethod
    def _sparse_kv_prefers_flashinfer(kv_cache_dtype: str) -> bool:
        return False  # no KV-dtype branch yet: only the head count orders the sparse backends

    # --- supports_combination texts ------------------------------------------------------------
    def _combination_flashinfer_mla(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashinfer_mla.py: getattr(hf_text_config, "qk_nope_head_dim", 1) in [64, 128]
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope not in (64, 128):
            return f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128], but got {qk_nope}"
        return None
