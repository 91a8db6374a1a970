"""vLLM 0.33.0's MLA backends: the `supports_combination` texts that changed or are new since 0.24
(vllm/v1/attention/backends/mla/*.py), a mixin of vllm_0_33.Rules (docs/vllm-rules.md §9: the sparse MLA
backends)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.versions.code import CombinationRuleFn
    from attnsel.attention.versions.vllm_0_24 import (
        Rules as _Release,  # what the mixin is mixed into
    )
else:
    _Release = object


class MlaRules(_Release):
    def combination_rules(self) -> dict[str, CombinationRuleFn]:
        return {**super().combination_rules(), "flashinfer_mla_sparse": self._combination_flashinfer_mla_sparse,
                "flash_attn_mla_sparse_fa4": self._combination_flash_attn_mla_sparse_fa4,
                "flash_attn_mla_sparse": self._combination_flash_attn_mla_sparse,
                "flashinfer_mla_sparse_sm90": self._combination_flashinfer_mla_sparse_sm90,
                "flashmla_sparse": self._combination_flashmla_sparse}

    # mla/flashmla_sparse.py: the caches FLASHMLA_SPARSE serves head size 512 (NoPE) from on SM90
    FLASHMLA_SPARSE_NOPE_KV: tuple[str | None, ...] = (None, "auto", "bfloat16", "float16", "fp8_ds_mla")
    FLASHMLA_SPARSE_NOPE_KV_TEXT = "bf16 or fp8_ds_mla"

    def _combination_flashinfer_mla_sparse(self, inputs: SelectorInputs, ctx: SelectionContext, name: str = "FLASHINFER_MLA_SPARSE") -> str | None:
        # mla/flashinfer_mla_sparse.py FlashInferMLASparseTRTLLMBackend.supports_combination
        if ctx.prefill_context_parallel_size > 1 and ctx.decode_context_parallel_size > 1:
            return (
                f"{name} does not support combined PCP+DCP; "
                "use FLASHMLA_SPARSE, which gathers each DCP KV shard before "
                "running the rank-local PCP prefill queries"
            )
        if inputs.kv_cache_dtype == "fp8_ds_mla":
            return f"{name} SM10 does not support fp8_ds_mla kv-cache dtype"
        if not ctx.model_dims_known:  # read from hf_text_config only when vLLM has a model config
            return None
        qk_nope, qk_rope, kv_lora = ctx.qk_nope_head_dim, ctx.qk_rope_head_dim, ctx.kv_lora_rank
        if qk_rope == 0:
            if qk_nope != 256 or kv_lora != 512:
                return (
                    "FlashInfer native no-rope MLA requires qk_nope_head_dim=256 and kv_lora_rank=512, "
                    f"but got qk_nope_head_dim={qk_nope}, kv_lora_rank={kv_lora}"
                )
        elif qk_nope not in (128, 192):
            return f"FlashInfer MLA Sparse kernel requires qk_nope_head_dim in [128, 192], but got {qk_nope}"
        if not ctx.has_index_topk:
            return "FlashInfer MLA Sparse requires model with index_topk config"
        return None

    def _combination_flash_attn_mla_sparse_fa4(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashattn_mla_sparse.py FlashAttnMLASparseFA4Backend.supports_combination
        if not self.fa_version_supported(4, ctx):
            return f"FA4 unavailable: {self._fa4_unsupported_reason(ctx)}"
        if not ctx.model_dims_known:
            return None
        topk = self._index_topk(ctx)
        if topk is None or topk % 128 != 0:
            return f"FA4 sparse MLA requires index_topk % 128 == 0, got {topk}"
        dims = (ctx.kv_lora_rank, ctx.qk_rope_head_dim)
        if dims != (512, 64):
            return f"FA4 sparse MLA requires (kv_lora_rank, qk_rope_head_dim) == (512, 64), got {dims}"
        dcp = ctx.decode_context_parallel_size
        heads, _kv_heads = self.model_heads(ctx)
        head_counts = (8, 16, 32, 64) if dcp > 1 else (8, 16, 32, 64, 128)
        if heads * dcp not in head_counts:
            return f"FA4 sparse MLA requires {head_counts} gathered query heads, got num_heads={heads} * dcp_size={dcp}"
        return self._combination_flashinfer_mla_sparse(inputs, ctx, name="FLASH_ATTN_MLA_SPARSE_FA4")

    def _fa4_unsupported_reason(self, ctx: SelectionContext) -> str:
        # vllm_flash_attn/flash_attn_interface.py _is_fa4_supported
        if not ctx.module_present(self.profile.data["flash_attn_modules"]["fa4"]):
            return "FA4 is unavailable due to: vllm.vllm_flash_attn.cute.interface not found"
        return "FA4 is only supported on devices with compute capability 9.x, 10.x, or 11.x"

    def _combination_flash_attn_mla_sparse(self: _Release, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # (self: any release's Rules -- vllm_0_25 takes this check as it is)
        # mla/flashattn_mla_sparse.py FlashAttnMLASparseBackend.supports_combination
        if inputs.kv_cache_dtype not in (None, "auto", "float16", "bfloat16"):
            return "FlashAttention MLA Sparse currently supports only FP16/BF16 KV cache"
        if not self.flash_attn_supports_mla(ctx):
            return "FlashAttention MLA not supported on this device"
        if not ctx.model_dims_known:  # the DCP and index_topk checks sit under `model_config is not None`
            return None
        if ctx.decode_context_parallel_size > 1:
            return "FlashAttention MLA Sparse does not support DCP for now"
        if not ctx.has_index_topk:
            return "FlashAttention MLA Sparse requires model with index_topk"
        return None

    def _combination_flashinfer_mla_sparse_sm90(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashinfer_mla_sparse_sm90.py (FlashInfer's SM90 NoPE MLA API assumed present)
        if not inputs.use_sparse:
            return "FLASHINFER_MLA_SPARSE_SM90 requires sparse MLA"
        if not ctx.model_dims_known:
            return None
        if ctx.kv_lora_rank != 512:
            return "FLASHINFER_MLA_SPARSE_SM90 requires kv_lora_rank=512"
        if ctx.qk_rope_head_dim not in (0, 64):
            return "FLASHINFER_MLA_SPARSE_SM90 requires qk_rope_head_dim in (0, 64)"
        return None

    def _combination_flashmla_sparse(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # mla/flashmla_sparse.py FlashMLASparseBackend.supports_combination
        kv = inputs.kv_cache_dtype
        major, minor = ctx.capability
        if inputs.head_size == 512:
            if kv in self.FLASHMLA_SPARSE_NOPE_KV and major == 9:
                # read from hf_text_config only when vLLM has a model config
                rope = 64 if ctx.qk_rope_head_dim is None else ctx.qk_rope_head_dim
                if ctx.model_dims_known and rope != 0:
                    return "FLASHMLA_SPARSE supports head_size 512 only for rope-free (NoPE) models"
            else:
                return (
                    f"FLASHMLA_SPARSE supports head_size 512 only with {self.FLASHMLA_SPARSE_NOPE_KV_TEXT} "
                    f"kv-cache on SM90 (NoPE), got kv_cache_dtype={kv}, "
                    f"capability=DeviceCapability(major={major}, minor={minor})"
                )
        return self._flashmla_sparse_nvfp4_reason(kv, major)

    @staticmethod
    def _flashmla_sparse_nvfp4_reason(kv: str | None, major: int) -> str | None:
        if kv == "nvfp4_ds_mla" and major != 10:
            return f"FLASHMLA_SPARSE only supports the {kv} kv-cache dtype on SM100 (Blackwell)"
        return None
