"""Rules that are code in vLLM 0.21.0: what differs from 0.22 (this profile's base, the release after).
Read in the release's own source (bench/tools/selection_source.py), checked with
bench/tools/parity_live.py; each method names the file of vllm/ it follows (restated, not copied).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import UNQUANTIZED_KV_CACHE_DTYPES
from attnsel.attention.versions import vllm_0_23

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext


class Rules(vllm_0_23.Rules):  # 0.22 brought no code of its own
    # --- kv-cache dtypes --------------------------------------------------------------------------
    def _kv_flash_attn(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # flash_attn.py FlashAttentionBackend.supports_kv_cache_dtype: every dtype that
        # utils/torch_utils.py is_quantized_kv_cache calls quantized (fp8*, *per_token_head, nvfp4)
        # runs iff flash_attn_supports_fp8() (FA3 on 9.x); 0.22 narrows it to fp8 / fp8_e4m3
        if kv_cache_dtype is None:
            return True
        if kv_cache_dtype.startswith("fp8") or kv_cache_dtype.endswith("per_token_head") or kv_cache_dtype == "nvfp4":
            return self.flash_attn_supports_fp8(ctx)
        return kv_cache_dtype in UNQUANTIZED_KV_CACHE_DTYPES
