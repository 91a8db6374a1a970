"""Rules that are code in vLLM 0.26.0 (ffd46bfab), written as what it does differently from 0.27
(the profiles of 0.26-0.32 are derived downward from 0.33, each module subclasses the next
release's `Rules`). Its FlashAttention rules are still 0.24's. Read in the release's wheel, checked
with bench/tools/parity_live.py.
"""

from __future__ import annotations

from attnsel.attention.versions import seed_0_17, vllm_0_24, vllm_0_27


class Rules(vllm_0_27.Rules):
    # fa_utils.py get_flash_attn_version: no head-256 rule, TMEM exemption for head 192 only
    flash_attn_version = vllm_0_24.Rules.flash_attn_version
    _fa4_tmem_exempt = staticmethod(vllm_0_24.Rules._fa4_tmem_exempt)
    # flash_attn.py FlashAttentionBackend: FP8 KV only with FA3 on 9.x; no FP8 combination check
    flash_attn_supports_fp8 = seed_0_17.Rules.flash_attn_supports_fp8
    _kv_flash_attn = vllm_0_24.Rules._kv_flash_attn
    _combination_flash_attn = vllm_0_24.Rules._combination_flash_attn
