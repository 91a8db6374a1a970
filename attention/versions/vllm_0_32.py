"""Rules that are code in vLLM 0.32.0, written as what it does differently from 0.33 (the profiles
of 0.26-0.32 are derived downward from 0.33, each module subclasses the next release's `Rules`).
Read in the release's wheel, checked with bench/tools/parity_live.py.
"""

from __future__ import annotations

from attnsel.attention.versions import vllm_0_33


class Rules(vllm_0_33.Rules):
    @staticmethod
    def quantized_kv(kv_cache_dtype: str | None) -> bool:
        # vllm/utils/torch_utils.py is_quantized_kv_cache: fp8*, *per_token_head, nvfp4* (0.33 asks
        # kv_cache_interface.get_kv_quant_mode, which also counts TurboQuant and the other new caches)
        if kv_cache_dtype is None:
            return False
        return kv_cache_dtype.startswith(("fp8", "nvfp4")) or kv_cache_dtype.endswith("per_token_head")
