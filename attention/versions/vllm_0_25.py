"""Rules that are code in vLLM 0.25.0 (dd10e03f9): what changed since 0.24. Read in the release's own
source (bench/tools/selection_source.py), checked with bench/tools/parity_live.py; each method names
the file of vllm/ it follows (restated, not copied).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.versions import vllm_0_24
from attnsel.attention.versions.vllm_0_33_mla import MlaRules

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext
    from attnsel.attention.versions.code import CombinationRuleFn, KvRuleFn


class Rules(vllm_0_24.Rules):
    def kv_rules(self) -> dict[str, KvRuleFn]:
        return {**super().kv_rules(), "flashinfer": self._kv_flashinfer}

    def combination_rules(self) -> dict[str, CombinationRuleFn]:
        return {**super().combination_rules(), "flash_attn_mla_sparse": self._combination_flash_attn_mla_sparse}

    # mla/flashattn_mla_sparse.py FlashAttnMLASparseBackend is back in the MLA priorities, with the
    # supports_combination that 0.33 still has
    _combination_flash_attn_mla_sparse = MlaRules._combination_flash_attn_mla_sparse

    # --- vllm/utils/flashinfer.py supports_trtllm_attention(is_prefill) ---------------------------
    def trtllm_supported(self, ctx: SelectionContext, is_prefill: bool) -> bool:
        # SM90 gains the XQA decode kernel (no TRT-LLM prefill); SM100 family has both phases
        if ctx.batch_invariant or not self.has_nvidia_artifactory(ctx):
            return False
        if tuple(ctx.capability) == (9, 0):
            return not is_prefill
        return ctx.capability[0] == 10

    # --- kv-cache dtypes --------------------------------------------------------------------------
    def _kv_flashinfer(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # flashinfer.py FlashInferBackend.supports_kv_cache_dtype: nvfp4 only on the SM100 family
        # with TRT-LLM prefill and decode
        if kv_cache_dtype == "nvfp4":
            return (
                ctx.capability[0] == 10
                and self.trtllm_supported(ctx, is_prefill=True)
                and self.trtllm_supported(ctx, is_prefill=False)
            )
        return kv_cache_dtype is None or kv_cache_dtype in rule["list"]
