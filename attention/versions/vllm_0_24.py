"""Rules that are code in vLLM 0.24.0 (ee0da84ab): what changed against the February 2026 rules.
Read in the release's own source (bench/tools/selection_source.py dumps it), checked with
bench/tools/parity_live.py; each method names the file of vllm/ it follows (restated, not copied).

Some rules read the model (head counts, MLA dims, index_topk) from vLLM's current VllmConfig;
here they come from the SelectionContext (`MODEL_HEADS_WHEN_UNKNOWN` where it gives no head count).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import (
    DEFAULT_INDEX_TOPK,
    MODEL_HEADS_WHEN_UNKNOWN,
    FlashAttnResolution,
    KernelBlockSize,
    is_quantized_kv_cache,
)
from attnsel.attention.versions import seed_0_17

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext, SelectorInputs
    from attnsel.attention.versions.code import (
        CombinationRuleFn,
        FlagRuleFn,
        KernelSizesRuleFn,
        KvRuleFn,
    )


class Rules(seed_0_17.Rules):
    # --- rule names new in this release (code.py: each kind's table) ------------------------------
    def flag_rules(self) -> dict[str, FlagRuleFn]:
        return {**super().flag_rules(), "fa4_supported": self._flag_fa4_supported}

    def kv_rules(self) -> dict[str, KvRuleFn]:
        return {**super().kv_rules(), "turboquant": self._kv_turboquant}

    def kernel_sizes_rules(self) -> dict[str, KernelSizesRuleFn]:
        return {**super().kernel_sizes_rules(), "flashinfer": self._kernel_sizes_flashinfer}

    def combination_rules(self) -> dict[str, CombinationRuleFn]:
        return {**super().combination_rules(), "tokenspeed_mla": self._combination_tokenspeed_mla,
                "flashinfer_mla_sparse_sm120": self._combination_flashinfer_mla_sparse_sm120}

    FLASHMLA_SPARSE_DEVICES = "Hopper and Blackwell DC devices"  # ops/flashmla.py (docs/vllm-rules.md §9)

    # --- vllm/v1/attention/backends/fa_utils.py get_flash_attn_version ---------------------------
    def fa_version(
        self,
        ctx: SelectionContext,
        inputs: SelectorInputs | None = None,
        head_size: int | None = None,
        head_size_v: int | None = None,
        has_sinks: bool = False,
        block_size: int | None = None,
        supports_fa4_hd256: bool = False,
    ) -> FlashAttnResolution:
        """The FA version vLLM resolves; `inputs` stands for the model config it reads (cache dtype,
        mm_prefix, R-SWA) and ctx for the parallel config (DCP)."""
        major = ctx.capability[0]
        warnings: list[str] = []
        if major == 9 and self.fa_version_supported(3, ctx):
            version = 3
        elif major == 10 and self.fa_version_supported(4, ctx):
            version = 4
        else:
            version = 2
        if ctx.flash_attn_version_override is not None:
            version = ctx.flash_attn_version_override
        if major >= 10 and version == 3:
            warnings.append(
                "Cannot use FA version 3 on Blackwell platform, "
                "defaulting to FA version 4 if supported, otherwise FA2."
            )
            version = 4 if self.fa_version_supported(4, ctx) else 2
        if version == 3 and major == 9 and self.fa_version_supported(4, ctx):
            if self._fa3_upgrades_to_fa4(head_size, head_size_v, has_sinks):
                version = 4
        if ctx.batch_invariant and version == 4:
            warnings.append("Cannot use FA version 4 with batch invariance, defaulting to FA version 2.")
            version = 2
        version = self._fa4_kernel_fallbacks(version, ctx, inputs, head_size, head_size_v, has_sinks, block_size,
                                             supports_fa4_hd256, warnings)
        if version == 4 and major >= 10 and head_size is not None and head_size > 128:
            if not self._fa4_tmem_exempt(head_size, head_size_v):
                warnings.append(
                    f"FA4 on Blackwell does not support head_size={head_size} due to TMEM "
                    "capacity limits, defaulting to FA version 2."
                )
                version = 2
        if not self.fa_version_supported(version, ctx):
            return FlashAttnResolution(None, tuple(warnings))
        return FlashAttnResolution(version, tuple(warnings))

    @staticmethod
    def _fa3_upgrades_to_fa4(head_size: int | None, head_size_v: int | None, has_sinks: bool) -> bool:
        """SM90 cases FA3 cannot run that FA4 can ("...: upgrading FlashAttention 3 -> 4")."""
        if head_size is not None and head_size > 256:
            return True  # "FA3 does not support head_size=N on SM90"
        return has_sinks and head_size is not None and head_size_v is not None and head_size != head_size_v

    def _fa4_kernel_fallbacks(self, version: int, ctx: SelectionContext, inputs: SelectorInputs | None, head_size: int | None, head_size_v: int | None, has_sinks: bool, block_size: int | None,
                              supports_fa4_hd256: bool, warnings: list[str]) -> int:
        """FA4 kernels with their own limits, checked before the TMEM rule (none in this release)."""
        return version

    @staticmethod
    def _fa4_tmem_exempt(head_size: int, head_size_v: int | None) -> bool:
        # hdim 192 runs for MLA's diff-headdim case (qk=192, v=128)
        return head_size == 192

    def flash_attn_version(
        self, ctx: SelectionContext, head_size: int | None = None, inputs: SelectorInputs | None = None
    ) -> FlashAttnResolution:
        # FlashAttentionImpl's call at layer build: head size (and v size) known, hd256 kernel allowed
        if head_size is None:
            return self.fa_version(ctx, inputs)
        return self.fa_version(
            ctx, inputs, head_size=head_size, head_size_v=head_size,
            has_sinks=bool(inputs.has_sink) if inputs is not None else False,
            block_size=inputs.block_size if inputs is not None else None, supports_fa4_hd256=True,
        )

    @staticmethod
    def quantized_kv(kv_cache_dtype: str | None) -> bool:
        # the release's is_quantized_kv_cache (vllm/utils/torch_utils.py, later kv_cache_interface.py)
        return is_quantized_kv_cache(kv_cache_dtype)

    # --- vllm/platforms/cuda.py _get_backend_priorities ------------------------------------------
    def priority_list(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        prio = self.profile.data["priorities"]
        major = ctx.capability[0]
        if inputs.use_mla:
            if major == 10:
                if inputs.kv_cache_dtype is not None and self._sparse_kv_prefers_flashinfer(inputs.kv_cache_dtype):
                    tail = prio["mla_blackwell_sparse_quantized_kv"]
                elif ctx.num_heads is not None and ctx.num_heads <= prio["few_heads_max"]:
                    tail = prio["mla_blackwell_sparse_few_heads"]
                else:
                    tail = prio["mla_blackwell_sparse"]
                return list(prio["mla_blackwell"]) + list(tail)
            if major == 12:
                return list(prio["mla_sm12x"])
            return self._mla_other_priorities(inputs, ctx)
        return self._dense_priorities(inputs, ctx)

    def _sparse_kv_prefers_flashinfer(self, kv_cache_dtype: str) -> bool:
        # "Prefer FlashInfer for fp8 kv cache": the release's is_quantized_kv_cache
        return self.quantized_kv(kv_cache_dtype)

    def _mla_other_priorities(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        return list(self.profile.data["priorities"]["mla_other"])

    def _dense_priorities(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        prio = self.profile.data["priorities"]
        return list(prio["blackwell"] if ctx.capability[0] == 10 else prio["other"])

    # --- vllm/utils/flashinfer.py supports_trtllm_attention / can_use_trtllm_attention -----------
    def model_heads(self, ctx: SelectionContext) -> tuple[int, int]:
        heads = ctx.num_heads if ctx.num_heads is not None else MODEL_HEADS_WHEN_UNKNOWN
        kv_heads = ctx.num_kv_heads or heads
        return heads, kv_heads

    def can_use_trtllm_attention(self, ctx: SelectionContext, is_prefill: bool = False) -> bool:
        if ctx.use_trtllm_attention is False:
            return False
        heads, kv_heads = self.model_heads(ctx)
        return self.trtllm_supported(ctx, is_prefill) and heads % kv_heads == 0

    def trtllm_supported(self, ctx: SelectionContext, is_prefill: bool) -> bool:
        return self.supports_trtllm_attention(ctx)  # one answer for prefill and decode here

    # --- flags named by rule in the data ------------------------------------------------------
    def _flag_fa4_supported(self, ctx: SelectionContext) -> bool:
        return self.fa_version_supported(4, ctx)

    # --- kv-cache dtypes --------------------------------------------------------------------------
    def _kv_turboquant(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # TurboQuantAttentionBackend.supports_kv_cache_dtype: None is NOT accepted
        return kv_cache_dtype is not None and kv_cache_dtype.startswith("turboquant_")

    def _kv_flash_attn(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # flash_attn.py FlashAttentionBackend.supports_kv_cache_dtype: fp8/fp8_e4m3 iff FA3 on 9.x
        if kv_cache_dtype is None:
            return True
        if kv_cache_dtype not in rule["list"]:
            return False
        if self.quantized_kv(kv_cache_dtype):
            return self.flash_attn_supports_fp8(ctx)
        return True

    # --- kernel block sizes ------------------------------------------------------------------------
    def _kernel_sizes_flashinfer(self, ctx: SelectionContext, inputs: SelectorInputs | None) -> list[KernelBlockSize]:
        # FlashInferBackend.get_supported_kernel_block_sizes: pages >= 128 only for GQA on
        # 10.x when TRT-LLM attention can run
        large = False
        if inputs is not None:
            heads, kv_heads = self.model_heads(ctx)
            large = (
                kv_heads > 0 and heads // kv_heads > 1 and ctx.capability[0] == 10
                and self.can_use_trtllm_attention(ctx)
            )
        return [16, 32, 64, 128, 256, 512, 1024] if large else [16, 32, 64]

    # --- supports_combination texts ------------------------------------------------------------
    def _combination_flash_attn(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # flash_attn.py FlashAttentionBackend.supports_combination
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        if inputs.use_mm_prefix and self.fa_version(
            ctx, inputs, head_size=inputs.head_size, has_sinks=inputs.has_sink
        ).version != 4:
            return (
                "mm_prefix (PrefixLM bidirectional attention) requires "
                "FlashAttention v4, which does not resolve for this head_size"
            )
        return None

    def _combination_flashinfer_mla(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashinfer_mla.py: getattr(hf_text_config, "qk_nope_head_dim", 1), read only when
        # vLLM has a model config
        if not ctx.model_dims_known:
            return None
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope not in (64, 128, 192):
            return f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got {qk_nope}"
        return None

    def _combination_tokenspeed_mla(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/tokenspeed_mla.py: the package is imported here, not at module import
        if not ctx.module_present("tokenspeed_mla"):
            return "tokenspeed_mla package is not installed. Install it with: `uv pip install tokenspeed-mla`"
        if not ctx.model_dims_known:
            return None
        dims = tuple(0 if v is None else v for v in (ctx.qk_nope_head_dim, ctx.qk_rope_head_dim, ctx.v_head_dim))
        if dims != (128, 64, 128):
            return (
                "tokenspeed_mla requires DeepSeek R1 MLA dimensions "
                "(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128), "
                f"got ({dims[0]}, {dims[1]}, {dims[2]})"
            )
        return None

    def _index_topk(self, ctx: SelectionContext) -> int | None:
        if not ctx.has_index_topk:
            return None
        return ctx.index_topk if ctx.index_topk is not None else DEFAULT_INDEX_TOPK

    def _combination_flashinfer_mla_sparse(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashinfer_mla_sparse.py FlashInferMLASparseTRTLLMBackend.supports_combination
        if inputs.kv_cache_dtype == "fp8_ds_mla":
            return "FLASHINFER_MLA_SPARSE SM10 does not support fp8_ds_mla kv-cache dtype"
        return self._flashinfer_mla_sparse_model_reason(ctx)

    def _flashinfer_mla_sparse_model_reason(self, ctx: SelectionContext) -> str | None:
        # what FlashInfer's sparse MLA kernel needs of the model config (qk_nope_head_dim, index_topk),
        # read only when vLLM has one
        if not ctx.model_dims_known:
            return None
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope not in (128, 192):
            return f"FlashInfer MLA Sparse kernel requires qk_nope_head_dim in [128, 192], but got {qk_nope}"
        if not ctx.has_index_topk:
            return "FlashInfer MLA Sparse requires model with index_topk config"
        return None

    def _combination_flashinfer_mla_sparse_sm120(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashinfer_mla_sparse.py FlashInferMLASparseSM120Backend (sparse decode API assumed present)
        if inputs.dtype != "bfloat16":
            return "dtype not supported"
        if inputs.kv_cache_dtype not in (None, "auto", "fp8", "fp8_e4m3", "fp8_ds_mla"):
            return "kv_cache_dtype not supported"
        if not ctx.model_dims_known:
            return None
        topk = self._index_topk(ctx)
        if topk is None:
            return "FLASHINFER_MLA_SPARSE_SM120 requires a model with index_topk config"
        if int(topk) != 2048:
            return f"FLASHINFER_MLA_SPARSE_SM120 requires index_topk=2048; got {topk}"
        return None
