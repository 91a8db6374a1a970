"""Rules that are code in vLLM 0.29.0, written as what it does differently from the newer releases'
(the profiles of 0.26-0.32 are derived downward from 0.33, each module subclasses the next
release's `Rules`). Read in the release's wheel, checked with bench/tools/parity_live.py.
"""

from __future__ import annotations

from typing import Optional

from attnsel.attention.versions import vllm_0_24, vllm_0_33
from attnsel.attention.versions.vllm_0_33 import FA4_HD256_PAGE_SIZE


class Rules(vllm_0_33.Rules):
    @staticmethod
    def quantized_kv(kv_cache_dtype: str) -> bool:
        # vllm/utils/torch_utils.py is_quantized_kv_cache: fp8*, *per_token_head, nvfp4*
        return kv_cache_dtype.startswith(("fp8", "nvfp4")) or kv_cache_dtype.endswith("per_token_head")

    # --- fa_utils.py: FP8 KV is FA3 on 9.x or FA4 on 10.x (no SM90 FA4 head-512 path yet) -------
    def flash_attn_supports_kv_cache_dtype(self, ctx, kv_cache_dtype: str, inputs=None, **version_args) -> bool:
        if kv_cache_dtype == "fp8_e5m2":
            return False
        version = self.fa_version(ctx, inputs, **version_args).version
        return (version == 3 and ctx.capability[0] == 9) or (version == 4 and ctx.capability[0] == 10)

    def _fa_fixed_block_size(self, ctx, inputs) -> Optional[int]:
        # flash_attn.py _get_fa4_hd256_block_size: the FA4 head-256 kernel's page only
        if inputs is None or not self._uses_fa4_hd256_kernel(ctx, inputs.head_size, None):
            return None
        version = self.fa_version(ctx, inputs, head_size=inputs.head_size, supports_fa4_hd256=True).version
        return FA4_HD256_PAGE_SIZE if version == 4 else None

    def _combination_flash_attn(self, inputs, ctx) -> Optional[str]:
        # flash_attn.py FlashAttentionBackend.supports_combination
        kv = inputs.kv_cache_dtype
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        version_args = dict(head_size=inputs.head_size, has_sinks=inputs.has_sink,
                            block_size=inputs.block_size, supports_fa4_hd256=True)
        if kv is not None and self.quantized_kv(kv) and not self.flash_attn_supports_kv_cache_dtype(
            ctx, kv, inputs, head_size_v=inputs.head_size, **version_args
        ):
            return "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"
        if inputs.use_mm_prefix and self.fa_version(ctx, inputs, **version_args).version != 4:
            return (
                "mm_prefix (PrefixLM bidirectional attention) requires "
                "FlashAttention v4, which does not resolve for this head_size"
            )
        return None

    # --- vllm/platforms/cuda.py _get_backend_priorities: no head-size or mm-prefix lists yet ------
    _mla_other_priorities = vllm_0_24.Rules._mla_other_priorities

    def _dense_priorities(self, inputs, ctx) -> list[str]:
        prio = self.profile.data["priorities"]
        blackwell = ctx.capability[0] == 10 and not inputs.use_non_causal
        return list(prio["blackwell"] if blackwell else prio["other"])

    # --- flashinfer.py FlashInferBackend -----------------------------------------------------------
    def _sink_flashinfer(self, rule: dict, ctx) -> bool:
        # supports_sink: SM12x XQA and SM100 trtllm-gen (not yet SM90's XQA)
        return tuple(ctx.capability) != (9, 0) and super()._sink_flashinfer(rule, ctx)

    def _kv_flashinfer(self, rule: dict, kv_cache_dtype: Optional[str], ctx) -> bool:
        # supports_kv_cache_dtype: NVFP4 only on 10.x with TRT-LLM prefill and decode
        if kv_cache_dtype is not None and kv_cache_dtype.startswith("nvfp4") and ctx.capability[0] != 10:
            return False
        return super()._kv_flashinfer(rule, kv_cache_dtype, ctx)

    # --- mla/flashinfer_mla_sparse.py: no PCP+DCP or no-rope checks yet -------------------------
    _combination_flashinfer_mla_sparse = vllm_0_24.Rules._combination_flashinfer_mla_sparse
