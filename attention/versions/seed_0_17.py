"""Rules that are code as of vLLM main in February 2026 (≈ 0.17.0): the oldest version attnsel models,
and the base every later release's `Rules` extends.

Facts: docs/vllm-rules.md §3 (backends), §3b (FlashMLA helper), §3c (FlashAttention
version), §5a (priorities); the seed's vllm/platforms/cuda.py and vllm/v1/attention/backend.py
(docs/vllm-rules.md §1). The data's
`flash_attn_version_rules` picks the fa_utils revision: "0.17.0" (FA4 default on Blackwell) or
"0.16.0" (none), the two revisions the seed may have carried (docs/vllm-rules.md §1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import FlashAttnResolution
from attnsel.attention.versions.code import RuleCode

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext, SelectorInputs
    from attnsel.attention.versions.code import (
        CombinationRuleFn,
        KvRuleFn,
        PerHeadRuleFn,
        SinkRuleFn,
    )

FA_RULES_WITHOUT_FA4_DEFAULT = "0.16.0"  # docs/vllm-rules.md §3c, v0.16.0 column


class Rules(RuleCode):
    # --- the rule names this release's data uses (code.py: each kind's table) ---------------------
    def sink_rules(self) -> dict[str, SinkRuleFn]:
        return {**super().sink_rules(), "flash_attn_version": self._sink_flash_attn_version,
                "flashinfer": self._sink_flashinfer}

    def per_head_rules(self) -> dict[str, PerHeadRuleFn]:
        return {**super().per_head_rules(), "flash_attn_version_at_least": self._per_head_flash_attn_version_at_least}

    def kv_rules(self) -> dict[str, KvRuleFn]:
        return {**super().kv_rules(), "flash_attn": self._kv_flash_attn}

    def combination_rules(self) -> dict[str, CombinationRuleFn]:
        return {**super().combination_rules(), "flash_attn": self._combination_flash_attn,
                "flash_attn_mla": self._combination_flash_attn_mla, "flashmla": self._combination_flashmla,
                "flashinfer_mla": self._combination_flashinfer_mla,
                "flashinfer_mla_sparse": self._combination_flashinfer_mla_sparse}

    # --- FlashAttention version (docs/vllm-rules.md §3c) -------------------------------------------
    def _fa_rules_without_fa4(self) -> bool:
        return self.profile.params["flash_attn_version_rules"] == FA_RULES_WITHOUT_FA4_DEFAULT

    def flash_attn_version_choices(self) -> tuple[int, ...]:
        # AttentionConfig.flash_attn_version: Literal[2, 3], or [2, 3, 4] with FA4 (docs/vllm-rules.md §3c)
        return (2, 3) if self._fa_rules_without_fa4() else (2, 3, 4)

    def fa_version_supported(self, version: int, ctx: SelectionContext) -> bool:
        major, _minor = ctx.capability
        mods = self.profile.data["flash_attn_modules"]
        if version == 2:
            return ctx.module_present(mods["fa2"]) and tuple(ctx.capability) >= (8, 0)
        if version == 3:
            # family 9.x in the later revision, major == 9 in the older: the same test for integer majors
            return ctx.module_present(mods["fa3"]) and major == 9
        if version == 4:
            if self._fa_rules_without_fa4():
                return ctx.module_present(mods["fa4_0_16"]) and major == 10
            return ctx.module_present(mods["fa4"]) and major in (9, 10, 11)
        return False

    def flash_attn_version(self, ctx: SelectionContext, head_size: int | None = None, inputs: SelectorInputs | None=None) -> FlashAttnResolution:
        without_fa4 = self._fa_rules_without_fa4()
        major = ctx.capability[0]
        warnings: list[str] = []
        if major == 9 and self.fa_version_supported(3, ctx):
            version = 3
        elif not without_fa4 and major == 10 and self.fa_version_supported(4, ctx):
            version = 4
        else:
            version = 2
        if ctx.flash_attn_version_override is not None:
            version = ctx.flash_attn_version_override
        if without_fa4:
            if major == 10 and version == 3:
                warnings.append("Cannot use FA version 3 on Blackwell platform, defaulting to FA version 2.")
                version = 2
        else:
            if major >= 10 and version == 3:
                warnings.append(
                    "Cannot use FA version 3 on Blackwell platform, "
                    "defaulting to FA version 4 if supported, otherwise FA2."
                )
                version = 4 if self.fa_version_supported(4, ctx) else 2
            if version == 4 and major >= 10 and head_size is not None and head_size > 128:
                warnings.append(
                    f"FA4 on Blackwell does not support head_size={head_size} due to TMEM "
                    "capacity limits, defaulting to FA version 2."
                )
                version = 2
        if not self.fa_version_supported(version, ctx):
            return FlashAttnResolution(None, tuple(warnings))
        return FlashAttnResolution(version, tuple(warnings))

    def flash_attn_supports_fp8(self, ctx: SelectionContext) -> bool:
        return self.flash_attn_version(ctx).version == 3 and ctx.capability[0] == 9

    def flash_attn_supports_mla(self, ctx: SelectionContext) -> bool:
        # fa_utils.flash_attn_supports_mla: FA3 supported and family 9.x, independent of overrides
        return self.fa_version_supported(3, ctx) and ctx.capability[0] == 9

    # --- §5a priorities (`_get_backend_priorities(use_mla, cc, num_heads)`) -------------------
    def priority_list(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        prio = self.profile.data["priorities"]
        blackwell = ctx.capability[0] == prio["blackwell_major"]
        if inputs.use_mla:
            if not blackwell:
                return list(prio["mla_other"])
            few_heads = ctx.num_heads is not None and ctx.num_heads <= prio["few_heads_max"]
            tail = prio["mla_blackwell_sparse_few_heads"] if few_heads else prio["mla_blackwell_sparse"]
            return list(prio["mla_blackwell"]) + list(tail)
        return list(prio["blackwell"] if blackwell else prio["other"])

    # --- FlashInfer sinks through TRT-LLM (docs/vllm-rules.md §3a, §7) ----------------------------
    def supports_trtllm_attention(self, ctx: SelectionContext) -> bool:
        if ctx.batch_invariant:
            return False
        return ctx.capability[0] == 10 and self.has_nvidia_artifactory(ctx)

    # --- rules named in the data ----------------------------------------------------------
    def _sink_flash_attn_version(self, rule: NamedRule, ctx: SelectionContext) -> bool:
        return self.flash_attn_version(ctx).version in tuple(rule["versions"])

    def _sink_flashinfer(self, rule: NamedRule, ctx: SelectionContext) -> bool:
        if ctx.use_trtllm_attention is False:
            return False
        return self.supports_trtllm_attention(ctx)

    def _per_head_flash_attn_version_at_least(self, rule: NamedRule, ctx: SelectionContext) -> bool:
        version = self.flash_attn_version(ctx).version
        return version is not None and version >= rule["version"]

    def _kv_flash_attn(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # FlashAttentionBackend.supports_kv_cache_dtype: None is fine; any "fp8*" iff FA3 on 9.x
        if kv_cache_dtype is None:
            return True
        if kv_cache_dtype.startswith("fp8"):
            return self.flash_attn_supports_fp8(ctx)
        return kv_cache_dtype in rule["list"]

    def _combination_flash_attn(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        return None

    def _combination_flash_attn_mla(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        if not self.flash_attn_supports_mla(ctx):
            return "FlashAttention MLA not supported on this device"
        return None

    # FlashMLABackend.supports_combination returns is_flashmla_{sparse,dense}_supported()[1]
    FLASHMLA_SPARSE_DEVICES = "Hopper and Blackwell devices"

    def _flashmla_available_reason(self, ctx: SelectionContext) -> str | None:
        flashmla_c, extension_c = self.profile.data["flashmla_modules"]
        if not ctx.module_present(flashmla_c):
            return (
                "vllm._flashmla_C is not available, likely was not compiled due to insufficient "
                "nvcc version or a supported arch was not in the list of target arches to compile for."
            )
        if not ctx.module_present(extension_c):
            return "vllm._flashmla_extension_C is not available, likely was not compiled due to a build error."
        return None

    def _combination_flashmla(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        """v1/attention/ops/flashmla.py is_flashmla_{sparse,dense}_supported (docs/vllm-rules.md §3b)."""
        unavailable = self._flashmla_available_reason(ctx)
        if unavailable is not None:
            return unavailable
        major = ctx.capability[0]
        if inputs.use_sparse:
            if major not in (9, 10):
                return f"FlashMLA Sparse is only supported on {self.FLASHMLA_SPARSE_DEVICES}."
            return None
        if major != 9:
            return "FlashMLA Dense is only supported on Hopper devices."
        return None

    def _combination_flashinfer_mla(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        if not ctx.model_dims_known:  # vLLM reads hf_text_config only when model_config is not None
            return None
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope != 128:
            return f"FlashInfer MLA kernel requires qk_nope_head_dim == 128, but got {qk_nope}"
        return None

    def _combination_flashinfer_mla_sparse(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        if not ctx.model_dims_known:
            return None
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope != 128:
            return f"FlashInfer MLA Sparse kernel requires qk_nope_head_dim == 128, but got {qk_nope}"
        if not ctx.has_index_topk:
            return "FlashInfer MLA Sparse requires model with index_topk config"
        return None
