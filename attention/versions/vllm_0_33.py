"""Rules that are code in vLLM 0.33.0 (4ba787ec9): what changed since 0.24 (docs/vllm-rules.md §9). Checked
against the real vLLM 0.33.0 with bench/tools/parity_live.py; each method names the file of vllm/
it follows (read in site-packages, restated here, not copied). The MLA backends' new
`supports_combination` texts are in vllm_0_33_mla.py.

Some rules read the model (head counts, MLA dims, index_topk) from vLLM's current VllmConfig;
here they come from the SelectionContext (`MODEL_HEADS_WHEN_UNKNOWN` where it gives no head count).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnsel.attention.rules import (
    BackendSpec,
    KernelBlockSize,
    MultipleOf,
    intersect_sizes,
)
from attnsel.attention.versions import vllm_0_24
from attnsel.attention.versions.vllm_0_33_mla import MlaRules

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext, SelectorInputs
    from attnsel.attention.versions.code import (
        CombinationRuleFn,
        FlagRuleFn,
        KernelSizesRuleFn,
        KvRuleFn,
    )

FA4_HD256_PAGE_SIZE = 128  # fa_utils.py: the hd256 kernel's 128-token page


class Rules(MlaRules, vllm_0_24.Rules):
    # --- rule names new in this release (code.py: each kind's table; MlaRules adds the MLA ones) ---
    def flag_rules(self) -> dict[str, FlagRuleFn]:
        return {**super().flag_rules(), "flashinfer_query_lens": self._flag_flashinfer_query_lens}

    def kv_rules(self) -> dict[str, KvRuleFn]:
        return {**super().kv_rules(), "flashinfer": self._kv_flashinfer}

    def kernel_sizes_rules(self) -> dict[str, KernelSizesRuleFn]:
        return {**super().kernel_sizes_rules(), "flash_attn": self._kernel_sizes_flash_attn}

    def combination_rules(self) -> dict[str, CombinationRuleFn]:
        return {**super().combination_rules(), "fa_causal_route": self._combination_fa_causal_route,
                "flashinfer": self._combination_flashinfer}

    # flash_attn.py FlashAttentionBackend.supports_combination: its FP8 KV text, and the SM90 rule
    # that sends FP8 KV with mm_prefix to Triton (both new in 0.31)
    FA_FP8_KV_REASON = "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100"
    FA_SM90_FP8_MM_PREFIX_NEEDS_TRITON = True

    # --- vllm/v1/attention/backends/fa_utils.py get_flash_attn_version ---------------------------
    def _fa4_kernel_fallbacks(self, version: int, ctx: SelectionContext, inputs: SelectorInputs | None, head_size: int | None, head_size_v: int | None, has_sinks: bool, block_size: int | None,
                              supports_fa4_hd256: bool, warnings: list[str]) -> int:
        # the FA4 head-256 kernel on 10.x/11.x (fa_utils.uses_fa4_hd256_kernel) and its fallbacks
        if version != 4 or not self._uses_fa4_hd256_kernel(ctx, head_size, head_size_v):
            return version
        if not supports_fa4_hd256:
            return 2
        reason = self._fa4_hd256_fallback_reason(ctx, inputs, has_sinks, block_size)
        if reason is not None:
            warnings.append(
                f"FA4's Blackwell head_size=256 kernel does not support {reason}, defaulting to FA version 2."
            )
            return 2
        return version

    @staticmethod
    def _fa4_tmem_exempt(head_size: int, head_size_v: int | None) -> bool:
        return (head_size == 256 and head_size_v in (None, 256)) or (head_size == 192 and head_size_v == 128)

    @staticmethod
    def _uses_fa4_hd256_kernel(ctx: SelectionContext, head_size: int | None, head_size_v: int | None) -> bool:
        if head_size != 256 or (head_size_v is not None and head_size_v != 256):
            return False
        return ctx.capability[0] in (10, 11)

    def _fa4_hd256_fallback_reason(self, ctx: SelectionContext, inputs: SelectorInputs | None, has_sinks: bool, block_size: int | None) -> str | None:
        # fa_utils._fa4_hd256_fallback_reason (soft-capping is not a selector input: never set)
        if has_sinks:
            return "attention sinks"
        if inputs is not None and self.quantized_kv(inputs.kv_cache_dtype):
            return f"quantized KV cache dtype {inputs.kv_cache_dtype}"
        if block_size is not None and block_size % FA4_HD256_PAGE_SIZE:
            return f"a KV cache block size of {block_size}"
        # the model-level reasons sit under `if model_config is not None` (fa_utils.py:257 @ v0.31.0/v0.33.0):
        # a bare shape (no --model: SelectionContext.model_dims_known) selects with no model config
        if inputs is not None and ctx.model_dims_known:
            if inputs.use_mm_prefix:
                return "mm_prefix bidirectional attention"
            if inputs.use_rswa:
                return "R-SWA"
        if ctx.decode_context_parallel_size > 1:
            return "decode context parallelism"
        return None

    def flash_attn_supports_kv_cache_dtype(self, ctx: SelectionContext, kv_cache_dtype: str, inputs: SelectorInputs | None = None,
                                           **version_args: Any) -> bool:
        # fa_utils.flash_attn_supports_kv_cache_dtype
        if kv_cache_dtype == "fp8_e5m2":
            return False
        version = self.fa_version(ctx, inputs, **version_args).version
        head_size = version_args.get("head_size")
        sm90_ok = version == 3 or (version == 4 and head_size in (None, 512))
        major = ctx.capability[0]
        return (sm90_ok and major == 9) or (version == 4 and major == 10)

    def flash_attn_supports_fp8(self, ctx: SelectionContext) -> bool:
        return self.flash_attn_supports_kv_cache_dtype(ctx, "fp8_e4m3")

    # --- vllm/platforms/cuda.py _get_backend_priorities ------------------------------------------
    def _mla_other_priorities(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        prio = self.profile.data["priorities"]
        sm90_sparse = prio["mla_other_sparse_head_512_first"]
        if inputs.head_size == 512:
            return [*list(prio["mla_other"]), sm90_sparse, *list(prio["mla_other_sparse"])]
        return list(prio["mla_other"]) + list(prio["mla_other_sparse"]) + [sm90_sparse]

    def _dense_priorities(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        prio = self.profile.data["priorities"]
        major = ctx.capability[0]
        if major == 10 and not inputs.use_non_causal:
            first = [prio["mm_prefix_blackwell"]] if inputs.use_mm_prefix else []
            return first + list(prio["blackwell"])
        first = [prio["mm_prefix_hopper"]] if major == 9 and inputs.use_mm_prefix else []
        return first + list(prio["other"])

    # --- vllm/utils/flashinfer.py supports_trtllm_attention / can_use_trtllm_attention -----------
    def trtllm_supported(self, ctx: SelectionContext, is_prefill: bool) -> bool:
        if ctx.batch_invariant or not self.has_nvidia_artifactory(ctx):
            return False
        cc = tuple(ctx.capability)
        if cc == (9, 0) or cc[0] == 12:
            return not is_prefill  # XQA decode only
        return cc[0] == 10

    def supports_trtllm_attention(self, ctx: SelectionContext) -> bool:
        return self.trtllm_supported(ctx, is_prefill=False)

    def _sink_flashinfer(self, rule: NamedRule, ctx: SelectionContext) -> bool:
        # flashinfer.py FlashInferBackend.supports_sink
        if ctx.use_trtllm_attention is False:
            return False
        cc = tuple(ctx.capability)
        if cc == (9, 0) or cc[0] == 12:
            return self.trtllm_supported(ctx, is_prefill=False)
        if cc[0] != 10:
            return False
        return self.trtllm_supported(ctx, False) and self.trtllm_supported(ctx, True)

    # --- flags named by rule in the data ------------------------------------------------------
    def _flag_flashinfer_query_lens(self, ctx: SelectionContext) -> bool:
        # FlashInferBackend.supports_device_cpu_query_lens_mismatch: trtllm-gen decode on 10.x
        if ctx.capability[0] != 10:
            return False
        if not ctx.model_dims_known:
            return True  # no model config (a bare shape): flashinfer.py:622 answers True
        return ctx.decode_context_parallel_size == 1 and self.can_use_trtllm_attention(ctx)

    # --- kv-cache dtypes --------------------------------------------------------------------------
    def _kv_flash_attn(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # FlashAttentionBackend.supports_kv_cache_dtype
        if kv_cache_dtype is None:
            return True
        if kv_cache_dtype not in rule["list"]:
            return False
        if self.quantized_kv(kv_cache_dtype):
            return self.flash_attn_supports_kv_cache_dtype(ctx, kv_cache_dtype)
        return True

    def _kv_flashinfer(self, rule: NamedRule, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        # FlashInferBackend.supports_kv_cache_dtype: nvfp4 on FA2-path GPUs (8.x/9.x/12.x) is
        # plain "nvfp4" only; on 10.x it needs TRT-LLM for prefill and decode
        if kv_cache_dtype is None:
            return True
        if kv_cache_dtype.startswith("nvfp4"):
            if ctx.capability[0] in (8, 9, 12):
                return kv_cache_dtype == "nvfp4"
            return (
                ctx.capability[0] == 10
                and self.trtllm_supported(ctx, is_prefill=True)
                and self.trtllm_supported(ctx, is_prefill=False)
            )
        return kv_cache_dtype in rule["list"]

    # --- kernel block sizes ------------------------------------------------------------------------
    def _kernel_sizes_flash_attn(self, ctx: SelectionContext, inputs: SelectorInputs | None) -> list[KernelBlockSize]:
        fixed = self._fa_fixed_block_size(ctx, inputs)
        return [fixed] if fixed is not None else [MultipleOf(16)]

    def _fa_fixed_block_size(self, ctx: SelectionContext, inputs: SelectorInputs | None) -> int | None:
        """FlashAttentionBackend: SM90 FP8 KV at head 512 on FA4 -> 64 (its TMA tile); the FA4
        head-256 kernel on 10.x/11.x -> 128 (FA4_HD256_PAGE_SIZE)."""
        if inputs is None or not ctx.model_dims_known:
            return None  # no model config: vLLM returns None from both helpers (flash_attn.py:333)
        head_size = inputs.head_size
        if (
            ctx.capability[0] == 9
            and inputs.kv_cache_dtype in ("fp8", "fp8_e4m3")
            and head_size == 512
            and self.fa_version(ctx, inputs, head_size=head_size).version == 4
        ):
            return 64
        if (
            self._uses_fa4_hd256_kernel(ctx, head_size, None)
            and self.fa_version(ctx, inputs, head_size=head_size, supports_fa4_hd256=True).version == 4
        ):
            return FA4_HD256_PAGE_SIZE
        return None

    def preferred_block_size_override(self, spec: BackendSpec, ctx: SelectionContext, inputs: SelectorInputs | None, default: int) -> int | None:
        if spec.kernel_block_sizes_rule == "flash_attn":
            fixed = self._fa_fixed_block_size(ctx, inputs)
            return max(default, fixed) if fixed is not None else None
        return None

    def composite_kernel_block_sizes(self, spec: BackendSpec, ctx: SelectionContext, inputs: SelectorInputs | None) -> list[KernelBlockSize]:
        # composite.py: the listed sizes both children accept, else the intersection of their lists
        composite = spec.composite
        assert composite is not None  # kernel_block_sizes asks this only for a composite backend
        general, causal = composite["general"], composite["causal"]
        profile = self.profile
        listed = composite.get("kernel_block_sizes") or []
        if listed:
            return [
                size for size in listed
                if profile.supports_block_size(general, size, ctx, inputs)
                and profile.supports_block_size(causal, size, ctx, inputs)
            ]
        result: list[KernelBlockSize] = []
        for lhs in profile.kernel_block_sizes(general, ctx, inputs):
            for rhs in profile.kernel_block_sizes(causal, ctx, inputs):
                candidate = intersect_sizes(lhs, rhs)
                if candidate is not None and candidate not in result:
                    result.append(candidate)
        return result

    # --- supports_combination texts ------------------------------------------------------------
    def combination_reason(self, spec: BackendSpec, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        if spec.composite is not None:
            return self._composite_combination(spec, inputs, ctx)
        return super().combination_reason(spec, inputs, ctx)

    def _composite_combination(self, spec: BackendSpec, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # composite.py supports_combination: each child, mm_prefix only for the general child
        composite = spec.composite
        assert composite is not None  # combination_reason asks this only for a composite backend
        for variant, name in enumerate((composite["general"], composite["causal"])):
            child = self.profile.backend(name)
            child_inputs = inputs if variant == 0 else inputs.replace(use_mm_prefix=False)
            reason = super().combination_reason(child, child_inputs, ctx)
            if reason is None and variant == 1 and composite.get("causal_combination"):
                reason = self.combination_rule(composite["causal_combination"])(child_inputs, ctx)
            if reason:
                return f"{child.vllm_name or child.name}: {reason}"
        return None

    def _combination_fa_causal_route(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # triton_flash_attn.py _FABackend.supports_combination
        version = self.fa_version(
            ctx, inputs, head_size=inputs.head_size, has_sinks=inputs.has_sink,
            block_size=inputs.block_size, supports_fa4_hd256=True,
        ).version
        if version not in (3, 4):
            return "causal route requires FlashAttention v3 or v4"
        return None

    def _combination_flash_attn(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # flash_attn.py FlashAttentionBackend.supports_combination
        kv = inputs.kv_cache_dtype
        quantized = kv is not None and self.quantized_kv(kv)
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        sm90_fp8_mm_prefix = inputs.use_mm_prefix and quantized and tuple(ctx.capability) == (9, 0)
        if self.FA_SM90_FP8_MM_PREFIX_NEEDS_TRITON and sm90_fp8_mm_prefix:
            return "SM90 FP8 KV with mm_prefix requires Triton"
        version_args: dict[str, Any] = dict(
            head_size=inputs.head_size, has_sinks=inputs.has_sink,
            block_size=inputs.block_size, supports_fa4_hd256=True,
        )
        if quantized and kv is not None and not self.flash_attn_supports_kv_cache_dtype(
            ctx, kv, inputs, head_size_v=inputs.head_size, **version_args
        ):
            return self.profile.params.get("flash_attn_fp8_kv_reason", self.FA_FP8_KV_REASON)
        if inputs.use_mm_prefix and self.fa_version(ctx, inputs, **version_args).version != 4:
            return (
                "mm_prefix (PrefixLM bidirectional attention) requires "
                "FlashAttention v4, which does not resolve for this head_size"
            )
        return None

    def _combination_flashinfer(self, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        # flashinfer.py FlashInferBackend.supports_combination (NVFP4 on the FA2 prefill path)
        kv = inputs.kv_cache_dtype
        if kv is not None and kv.startswith("nvfp4") and ctx.capability[0] in (8, 9, 12):
            if inputs.head_size == 64:
                return "fa2 prefill misreads an NVFP4 KV cache at head_size 64"
            if inputs.has_sink:
                return "the sink prefill wrapper cannot read an NVFP4 KV cache"
        return None
