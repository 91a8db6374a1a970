"""Rules that are code in vLLM 0.19.0: what differs from 0.20 (this profile's base, the release after).
Read in the release's own source (bench/tools/selection_source.py), checked with
bench/tools/parity_live.py; each method names the file of vllm/ it follows (restated, not copied).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import UNQUANTIZED_KV_CACHE_DTYPES
from attnsel.attention.versions import vllm_0_20

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext


class Rules(vllm_0_20.Rules):
    # --- vllm/v1/attention/backends/fa_utils.py get_flash_attn_version ---------------------------
    @staticmethod
    def _fa3_upgrades_to_fa4(head_size: int | None, head_size_v: int | None, has_sinks: bool) -> bool:
        return False  # no FA3 -> FA4 upgrade on SM90 yet (0.20 adds Diff-KV with sinks)

    # --- vllm/platforms/cuda.py _get_backend_priorities ------------------------------------------
    @staticmethod
    def _sparse_kv_prefers_flashinfer(kv_cache_dtype: str) -> bool:
        return kv_cache_dtype.startswith("fp8")  # kv_cache_dtype.startswith("fp8") here

    # --- kv-cache dtypes --------------------------------------------------------------------------
    def _kv_flash_attn(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # flash_attn.py FlashAttentionBackend.supports_kv_cache_dtype: fp8* iff flash_attn_supports_fp8()
        if kv_cache_dtype is None:
            return True
        if kv_cache_dtype.startswith("fp8"):
            return self.flash_attn_supports_fp8(ctx)
        return kv_cache_dtype in UNQUANTIZED_KV_CACHE_DTYPES
