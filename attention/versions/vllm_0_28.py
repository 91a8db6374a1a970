"""Rules that are code in vLLM 0.28.0 (2cf0a6915), written as what it does differently from the
newer release's (the profiles of 0.26-0.32 are derived downward from 0.33). Read in the release's
wheel, checked with bench/tools/parity_live.py.
"""

from __future__ import annotations

from typing import Optional

from attnsel.attention.versions import vllm_0_24, vllm_0_33


class Rules(vllm_0_33.Rules):
    @staticmethod
    def quantized_kv(kv_cache_dtype: str) -> bool:
        # vllm/utils/torch_utils.py is_quantized_kv_cache: fp8*, *per_token_head, nvfp4*
        return kv_cache_dtype.startswith(("fp8", "nvfp4")) or kv_cache_dtype.endswith("per_token_head")

    # --- vllm/v1/attention/backends/fa_utils.py get_flash_attn_version ---------------------------
    def _fa4_kernel_fallbacks(self, version: int, ctx, inputs, head_size, head_size_v, has_sinks, block_size,
                              supports_fa4_hd256: bool, warnings: list[str]) -> int:
        # no head-256 kernel yet: FA4 at head size 256 is switched off on Blackwell
        if version == 4 and ctx.capability[0] >= 10 and head_size == 256:
            warnings.append("FA4 on Blackwell is temporarily disabled for head_size=256, defaulting to FA version 2.")
            return 2
        return version

    @staticmethod
    def _fa4_tmem_exempt(head_size: int, head_size_v: Optional[int]) -> bool:
        return head_size == 192 and head_size_v == 128

    def _fa_fixed_block_size(self, ctx, inputs) -> Optional[int]:
        return None  # FlashAttentionBackend.get_supported_kernel_block_sizes: [MultipleOf(16)] only

    # --- supports_combination texts ------------------------------------------------------------
    def _combination_flash_attn(self, inputs, ctx) -> Optional[str]:
        # flash_attn.py FlashAttentionBackend.supports_combination
        kv = inputs.kv_cache_dtype
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        if kv is not None and self.quantized_kv(kv) and not self.flash_attn_supports_kv_cache_dtype(
            ctx, kv, inputs, head_size=inputs.head_size, head_size_v=inputs.head_size, has_sinks=inputs.has_sink
        ):
            return "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"
        return vllm_0_24.Rules._combination_flash_attn(self, inputs, ctx)

    def flash_attn_supports_kv_cache_dtype(self, ctx, kv_cache_dtype: str, inputs=None, **version_args) -> bool:
        # fa_utils.flash_attn_supports_kv_cache_dtype: FA3 on 9.x or FA4 on 10.x
        if kv_cache_dtype == "fp8_e5m2":
            return False
        version = self.fa_version(ctx, inputs, **version_args).version
        return (version == 3 and ctx.capability[0] == 9) or (version == 4 and ctx.capability[0] == 10)

    # --- vllm/platforms/cuda.py _get_backend_priorities: no head-size or mm-prefix lists yet ------
    _mla_other_priorities = vllm_0_24.Rules._mla_other_priorities

    def _dense_priorities(self, inputs, ctx) -> list[str]:
        prio = self.profile.data["priorities"]
        blackwell = ctx.capability[0] == 10 and not inputs.use_non_causal
        return list(prio["blackwell"] if blackwell else prio["other"])

    # --- mla/flashinfer_mla_sparse.py: no PCP+DCP or no-rope checks yet -------------------------
    _combination_flashinfer_mla_sparse = vllm_0_24.Rules._combination_flashinfer_mla_sparse

    # --- flashinfer.py FlashInferBackend -----------------------------------------------------------
    def _sink_flashinfer(self, rule: dict, ctx) -> bool:
        # supports_sink: SM12x XQA and SM100 trtllm-gen (not yet SM90's XQA)
        return tuple(ctx.capability) != (9, 0) and super()._sink_flashinfer(rule, ctx)

    def _kv_flashinfer(self, rule: dict, kv_cache_dtype: Optional[str], ctx) -> bool:
        # supports_kv_cache_dtype: NVFP4 only on 10.x with TRT-LLM prefill and decode
        if kv_cache_dtype is not None and kv_cache_dtype.startswith("nvfp4") and ctx.capability[0] != 10:
            return False
        return super()._kv_flashinfer(rule, kv_cache_dtype, ctx)
