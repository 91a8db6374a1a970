"""vLLM's attention-backend rules for one vLLM version ("rule profile"): data + small pure functions.

A profile is a JSON file in `attention/profiles/` (backends and their attributes, priority lists,
literals) plus a `RuleCode` class for the rules that are code (FlashAttention version resolution,
`supports_combination` texts, sinks through TRT-LLM). A second profile (e.g. vLLM 0.33) is a new
JSON file and a `RuleCode` subclass registered in `_RULE_CODE`, not a rewrite.

Facts: shared/reference/vllm-rules.md (§2 validation, §3 backends, §3c FA version, §4 literals,
§5a priorities); shared/seeds/000 (cuda.py) and 002 (backend.py). No torch is imported here.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.machinery
import importlib.util
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from attnsel.errors import UserInputError
from attnsel.files import shown_path

if TYPE_CHECKING:  # the dataclasses live in selector.py; rules only read their attributes
    from attnsel.attention.selector import SelectionContext, SelectorInputs

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
DEFAULT_PROFILE = "seed_0_17"
IMPORT_ERROR_REASON = "ImportError"  # vllm-rules §5b: the literal reason for a missing package


@dataclass(frozen=True)
class MultipleOf:
    """vLLM's `MultipleOf(base)` kernel block size: any multiple of `base` (seeds/002)."""

    base: int

    def __str__(self) -> str:
        return f"MultipleOf({self.base})"

    def vllm_repr(self) -> str:
        # vLLM's MultipleOf has no __repr__, so its messages print the default object repr, whose
        # address differs per process; we print it with an elided address.
        return "<vllm.v1.attention.backend.MultipleOf object at 0x...>"

    def to_dict(self) -> dict:
        return {"multiple_of": self.base}


KernelBlockSize = Union[int, MultipleOf]


def kernel_sizes_repr(sizes: Optional[list[KernelBlockSize]]) -> str:
    """The Python list repr vLLM prints for `get_supported_kernel_block_sizes()`."""
    if sizes is None:
        return "None"
    return "[" + ", ".join(s.vllm_repr() if isinstance(s, MultipleOf) else repr(s) for s in sizes) + "]"


def kernel_sizes_display(sizes: list[KernelBlockSize]) -> str:
    return "[" + ", ".join(str(s) for s in sizes) + "]"


def _parse_kernel_sizes(raw: list) -> tuple[KernelBlockSize, ...]:
    return tuple(MultipleOf(int(x["multiple_of"])) if isinstance(x, dict) else int(x) for x in raw)


@dataclass(frozen=True)
class BackendSpec:
    """One backend's attributes, as data (vllm-rules §3a/§3b)."""

    name: str
    class_path: str
    dtypes: tuple[str, ...]
    kv_cache_dtypes: Any  # list of names, or {"rule": ..., "plain": [...]}
    kernel_block_sizes: tuple[KernelBlockSize, ...]
    kernel_block_sizes_hybrid_float32_mamba: Optional[tuple[KernelBlockSize, ...]]
    head_sizes: Any  # "any" | {"list": [...]} | {"multiple_of": n, "max": m} | {"min": n}
    capability: Any  # "any" | {"min": [M, m], "max": [M, m]} | {"majors": [...]}
    sink: Any  # bool | {"rule": ...}
    mm_prefix: Any  # bool | {"rule": ...}
    mla: bool
    sparse: bool
    attn_types: tuple[str, ...]
    per_head_quant_scales: Any
    combination: Optional[str]
    imports: tuple[str, ...]
    required_layout: Any
    # 0.33 selector inputs (vllm-rules §9 "New validation reasons"); the seed has none of them.
    sliding_window: Any = False
    rswa: Any = False
    non_causal: Any = False
    non_causal_dcp: Any = False
    batch_invariance: Any = False
    kv_connector: Any = True
    pcp: Any = False
    dcp: Any = False
    device_cpu_query_lens_mismatch: Any = True
    # 0.33: kernel block sizes computed by a rule (FLASH_ATTN, FLASHINFER); a composite backend
    # (TRITON_FLASH_ATTN, TRITON_FLASHINFER: vllm/v1/attention/backends/composite.py)
    kernel_block_sizes_rule: Optional[str] = None
    composite: Optional[dict] = None
    vllm_name: Optional[str] = None  # get_name(), when it differs from the enum name

    @property
    def module(self) -> str:
        return self.class_path.rsplit(".", 1)[0]


@dataclass(frozen=True)
class FlashAttnResolution:
    """`fa_utils.get_flash_attn_version()` as the `supports_*` helpers call it (no head size)."""

    version: Optional[int]  # None: vLLM's function returns None (the chosen version is unsupported)
    warnings: tuple[str, ...] = ()


class RuleCode:
    """The rules of the seed-era profile that are code rather than data (vllm-rules §3, §3c).

    Subclass and register in `_RULE_CODE` for another vLLM version.
    """

    def __init__(self, profile: "RuleProfile"):
        self.profile = profile

    # --- FlashAttention version (vllm-rules §3c) -------------------------------------------
    def fa_version_supported(self, version: int, ctx: "SelectionContext") -> bool:
        major, _minor = ctx.capability
        mods = self.profile.data["flash_attn_modules"]
        rules = self.profile.params["flash_attn_version_rules"]
        if version == 2:
            return ctx.module_present(mods["fa2"]) and tuple(ctx.capability) >= (8, 0)
        if version == 3:
            # 0.17.0: family 9.x; 0.16.0: major == 9 (the same test for integer majors)
            return ctx.module_present(mods["fa3"]) and major == 9
        if version == 4:
            if rules == "0.16.0":
                return ctx.module_present(mods["fa4_0_16"]) and major == 10
            return ctx.module_present(mods["fa4"]) and major in (9, 10, 11)
        return False

    def flash_attn_version(
        self, ctx: "SelectionContext", head_size: Optional[int] = None, inputs: Optional["SelectorInputs"] = None
    ) -> FlashAttnResolution:
        rules = self.profile.params["flash_attn_version_rules"]
        major = ctx.capability[0]
        warnings: list[str] = []
        if major == 9 and self.fa_version_supported(3, ctx):
            version = 3
        elif rules != "0.16.0" and major == 10 and self.fa_version_supported(4, ctx):
            version = 4
        else:
            version = 2
        if ctx.flash_attn_version_override is not None:
            version = ctx.flash_attn_version_override
        if rules == "0.16.0":
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

    def flash_attn_supports_fp8(self, ctx: "SelectionContext") -> bool:
        return self.flash_attn_version(ctx).version == 3 and ctx.capability[0] == 9

    def flash_attn_supports_mla(self, ctx: "SelectionContext") -> bool:
        # fa_utils.flash_attn_supports_mla: FA3 supported and family 9.x, independent of overrides
        return self.fa_version_supported(3, ctx) and ctx.capability[0] == 9

    # --- §5a priorities (seed `_get_backend_priorities(use_mla, cc, num_heads)`) -------------
    def priority_list(self, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        prio = self.profile.data["priorities"]
        blackwell = ctx.capability[0] == prio["blackwell_major"]
        if inputs.use_mla:
            if not blackwell:
                return list(prio["mla_other"])
            few_heads = ctx.num_heads is not None and ctx.num_heads <= prio["few_heads_max"]
            tail = prio["mla_blackwell_sparse_few_heads"] if few_heads else prio["mla_blackwell_sparse"]
            return list(prio["mla_blackwell"]) + list(tail)
        return list(prio["blackwell"] if blackwell else prio["other"])

    # --- import failures (§5b) ----------------------------------------------------------------
    def import_failure_reason(self, module: str) -> str:
        return IMPORT_ERROR_REASON

    # --- flags that are data, or rules named in the data ----------------------------------------
    def supports_mm_prefix(self, spec: BackendSpec, ctx: "SelectionContext") -> bool:
        return self.supports_flag(spec, "mm_prefix", ctx)

    def supports_flag(self, spec: BackendSpec, attr: str, ctx: "SelectionContext") -> bool:
        rule = getattr(spec, attr)
        if isinstance(rule, bool):
            return rule
        return self.flag_rule(rule, ctx)

    def flag_rule(self, rule: dict, ctx: "SelectionContext") -> bool:
        raise ValueError(f"unknown rule {rule!r} in profile {self.profile.name}")

    # --- kernel block sizes that are code (0.33 only) --------------------------------------------
    def kernel_block_sizes_rule(self, spec: BackendSpec, ctx: "SelectionContext", inputs) -> list[KernelBlockSize]:
        raise ValueError(f"unknown kernel block size rule {spec.kernel_block_sizes_rule!r}")

    def composite_kernel_block_sizes(self, spec: BackendSpec, ctx: "SelectionContext", inputs) -> list[KernelBlockSize]:
        raise ValueError(f"profile {self.profile.name} has no composite backends")

    def preferred_block_size_override(self, spec: BackendSpec, ctx: "SelectionContext", inputs, default: int) -> Optional[int]:
        return None

    # --- FlashInfer sinks through TRT-LLM (vllm-rules §3a, §7) ----------------------------
    def supports_trtllm_attention(self, ctx: "SelectionContext") -> bool:
        if ctx.batch_invariant:
            return False
        return ctx.capability[0] == 10 and self.has_nvidia_artifactory(ctx)

    def has_nvidia_artifactory(self, ctx: "SelectionContext") -> bool:
        return bool(ctx.has_flashinfer_cubin)

    # --- rules named in the profile data --------------------------------------------------
    def supports_sink(self, spec: BackendSpec, ctx: "SelectionContext") -> bool:
        rule = spec.sink
        if isinstance(rule, bool):
            return rule
        if rule["rule"] == "flash_attn_version":
            return self.flash_attn_version(ctx).version in tuple(rule["versions"])
        if rule["rule"] == "trtllm":
            if ctx.use_trtllm_attention is False:
                return False
            return self.supports_trtllm_attention(ctx)
        raise ValueError(f"unknown sink rule {rule!r} in profile {self.profile.name}")

    def supports_per_head_quant_scales(self, spec: BackendSpec, ctx: "SelectionContext") -> bool:
        rule = spec.per_head_quant_scales
        if isinstance(rule, bool):
            return rule
        if rule["rule"] == "flash_attn_version_at_least":
            version = self.flash_attn_version(ctx).version
            return version is not None and version >= rule["version"]
        raise ValueError(f"unknown per-head-scales rule {rule!r}")

    def supports_kv_cache_dtype(self, spec: BackendSpec, kv_cache_dtype: Optional[str], ctx) -> bool:
        if kv_cache_dtype is None:
            return True
        rule = spec.kv_cache_dtypes
        if isinstance(rule, dict):
            if rule["rule"] == "flash_attn_fp8":
                # FlashAttentionBackend.supports_kv_cache_dtype: any "fp8*" iff FA3 on 9.x
                if kv_cache_dtype.startswith("fp8"):
                    return self.flash_attn_supports_fp8(ctx)
                return kv_cache_dtype in rule["plain"]
            raise ValueError(f"unknown kv-cache rule {rule!r}")
        return (not rule) or kv_cache_dtype in rule

    def combination_reason(self, spec: BackendSpec, inputs: "SelectorInputs", ctx) -> Optional[str]:
        if spec.combination is None:
            return None
        return getattr(self, f"_combination_{spec.combination}")(inputs, ctx)

    def _combination_flash_attn_sink_capability(self, inputs, ctx) -> Optional[str]:
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        return None

    def _combination_flash_attn_mla(self, inputs, ctx) -> Optional[str]:
        if not self.flash_attn_supports_mla(ctx):
            return "FlashAttention MLA not supported on this device"
        return None

    def _flashmla_available_reason(self, ctx) -> Optional[str]:
        flashmla_c, extension_c = self.profile.data["flashmla_modules"]
        if not ctx.module_present(flashmla_c):
            return (
                "vllm._flashmla_C is not available, likely was not compiled due to insufficient "
                "nvcc version or a supported arch was not in the list of target arches to compile for."
            )
        if not ctx.module_present(extension_c):
            return "vllm._flashmla_extension_C is not available, likely was not compiled due to a build error."
        return None

    def _combination_flashmla(self, inputs, ctx) -> Optional[str]:
        # FlashMLABackend.supports_combination returns is_flashmla_{sparse,dense}_supported()[1]
        return self._flashmla_support_reason(inputs, ctx, sparse_devices="Hopper and Blackwell devices")

    def _flashmla_support_reason(self, inputs, ctx, *, sparse_devices: str) -> Optional[str]:
        """v1/attention/ops/flashmla.py is_flashmla_{sparse,dense}_supported (vllm-rules §3b);
        0.33 words the sparse message "Hopper and Blackwell DC devices" (§9)."""
        unavailable = self._flashmla_available_reason(ctx)
        if unavailable is not None:
            return unavailable
        major = ctx.capability[0]
        if inputs.use_sparse:
            if major not in (9, 10):
                return f"FlashMLA Sparse is only supported on {sparse_devices}."
            return None
        if major != 9:
            return "FlashMLA Dense is only supported on Hopper devices."
        return None

    def _combination_flashinfer_mla(self, inputs, ctx) -> Optional[str]:
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope != 128:
            return f"FlashInfer MLA kernel requires qk_nope_head_dim == 128, but got {qk_nope}"
        return None

    def _combination_flashinfer_mla_sparse(self, inputs, ctx) -> Optional[str]:
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope != 128:
            return f"FlashInfer MLA Sparse kernel requires qk_nope_head_dim == 128, but got {qk_nope}"
        if not ctx.has_index_topk:
            return "FlashInfer MLA Sparse requires model with index_topk config"
        return None


UNQUANTIZED_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16")


def is_quantized_kv_cache(kv_cache_dtype: Optional[str]) -> bool:
    """`is_quantized_kv_cache` as the 0.33 priority list uses it (vllm-rules §9 MLA priorities)."""
    return kv_cache_dtype is not None and kv_cache_dtype not in UNQUANTIZED_KV_CACHE_DTYPES


class RuleCode033(RuleCode):
    """vLLM 0.33.0 rules that are code. Checked against the installed vLLM 0.33.0 (4ba787ec9) with
    bench/parity_live.py; each method names the file of vllm/ it follows (read in site-packages,
    restated here, not copied).

    Some rules read the model (head counts, MLA dims, index_topk) from vLLM's current VllmConfig;
    here they come from the SelectionContext, and `MODEL_HEADS_WHEN_UNKNOWN` stands in for a head
    count the context does not give (the parity harness's model stand-in uses the same value).
    """

    MODEL_HEADS_WHEN_UNKNOWN = 8
    DEFAULT_INDEX_TOPK = 2048  # DeepSeek V3.2's index_topk: used when only has_index_topk is known

    # --- vllm/v1/attention/backends/fa_utils.py get_flash_attn_version ---------------------------
    def fa_version(
        self,
        ctx: "SelectionContext",
        inputs: Optional["SelectorInputs"] = None,
        head_size: Optional[int] = None,
        head_size_v: Optional[int] = None,
        has_sinks: bool = False,
        block_size: Optional[int] = None,
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
            if head_size is not None and head_size > 256:
                version = 4  # "FA3 does not support head_size=N on SM90: upgrading FlashAttention 3 -> 4"
            elif has_sinks and head_size is not None and head_size_v is not None and head_size != head_size_v:
                version = 4
        if ctx.batch_invariant and version == 4:
            warnings.append("Cannot use FA version 4 with batch invariance, defaulting to FA version 2.")
            version = 2
        if version == 4 and self._uses_fa4_hd256_kernel(ctx, head_size, head_size_v):
            if not supports_fa4_hd256:
                version = 2
            else:
                reason = self._fa4_hd256_fallback_reason(ctx, inputs, has_sinks, block_size)
                if reason is not None:
                    warnings.append(
                        f"FA4's Blackwell head_size=256 kernel does not support {reason}, "
                        "defaulting to FA version 2."
                    )
                    version = 2
        if (
            version == 4
            and major >= 10
            and head_size is not None
            and head_size > 128
            and not ((head_size == 256 and head_size_v in (None, 256)) or (head_size == 192 and head_size_v == 128))
        ):
            warnings.append(
                f"FA4 on Blackwell does not support head_size={head_size} due to TMEM "
                "capacity limits, defaulting to FA version 2."
            )
            version = 2
        if not self.fa_version_supported(version, ctx):
            return FlashAttnResolution(None, tuple(warnings))
        return FlashAttnResolution(version, tuple(warnings))

    def flash_attn_version(
        self, ctx: "SelectionContext", head_size: Optional[int] = None, inputs: Optional["SelectorInputs"] = None
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
    def _uses_fa4_hd256_kernel(ctx: "SelectionContext", head_size: Optional[int], head_size_v: Optional[int]) -> bool:
        if head_size != 256 or (head_size_v is not None and head_size_v != 256):
            return False
        return ctx.capability[0] in (10, 11)

    @staticmethod
    def _fa4_hd256_fallback_reason(ctx, inputs, has_sinks: bool, block_size: Optional[int]) -> Optional[str]:
        # fa_utils._fa4_hd256_fallback_reason (soft-capping is not a selector input: never set)
        if has_sinks:
            return "attention sinks"
        if inputs is not None and is_quantized_kv_cache(inputs.kv_cache_dtype):
            return f"quantized KV cache dtype {inputs.kv_cache_dtype}"
        if block_size is not None and block_size % FA4_HD256_PAGE_SIZE:
            return f"a KV cache block size of {block_size}"
        if inputs is not None:
            if inputs.use_mm_prefix:
                return "mm_prefix bidirectional attention"
            if inputs.use_rswa:
                return "R-SWA"
        if ctx.decode_context_parallel_size > 1:
            return "decode context parallelism"
        return None

    def flash_attn_supports_kv_cache_dtype(self, ctx, kv_cache_dtype: str, inputs=None, **version_args) -> bool:
        # fa_utils.flash_attn_supports_kv_cache_dtype
        if kv_cache_dtype == "fp8_e5m2":
            return False
        version = self.fa_version(ctx, inputs, **version_args).version
        head_size = version_args.get("head_size")
        sm90_ok = version == 3 or (version == 4 and head_size in (None, 512))
        major = ctx.capability[0]
        return (sm90_ok and major == 9) or (version == 4 and major == 10)

    def flash_attn_supports_fp8(self, ctx: "SelectionContext") -> bool:
        return self.flash_attn_supports_kv_cache_dtype(ctx, "fp8_e4m3")

    # --- vllm/platforms/cuda.py _get_backend_priorities ------------------------------------------
    def priority_list(self, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        prio = self.profile.data["priorities"]
        major = ctx.capability[0]
        if inputs.use_mla:
            if major == 10:
                if inputs.kv_cache_dtype is not None and is_quantized_kv_cache(inputs.kv_cache_dtype):
                    tail = prio["mla_blackwell_sparse_quantized_kv"]
                elif ctx.num_heads is not None and ctx.num_heads <= prio["few_heads_max"]:
                    tail = prio["mla_blackwell_sparse_few_heads"]
                else:
                    tail = prio["mla_blackwell_sparse"]
                return list(prio["mla_blackwell"]) + list(tail)
            if major == 12:
                return list(prio["mla_sm12x"])
            sm90_sparse = prio["mla_other_sparse_head_512_first"]
            if inputs.head_size == 512:
                return list(prio["mla_other"]) + [sm90_sparse] + list(prio["mla_other_sparse"])
            return list(prio["mla_other"]) + list(prio["mla_other_sparse"]) + [sm90_sparse]
        if major == 10 and not inputs.use_non_causal:
            first = [prio["mm_prefix_blackwell"]] if inputs.use_mm_prefix else []
            return first + list(prio["blackwell"])
        first = [prio["mm_prefix_hopper"]] if major == 9 and inputs.use_mm_prefix else []
        return first + list(prio["other"])

    # --- cuda.py get_valid_backends: `{type(e).__name__}: {e}` ---------------------------------
    def import_failure_reason(self, module: str) -> str:
        return f"ModuleNotFoundError: No module named '{module}'"

    # --- vllm/utils/flashinfer.py supports_trtllm_attention / can_use_trtllm_attention -----------
    def trtllm_supported(self, ctx: "SelectionContext", is_prefill: bool) -> bool:
        if ctx.batch_invariant or not self.has_nvidia_artifactory(ctx):
            return False
        cc = tuple(ctx.capability)
        if cc == (9, 0) or cc[0] == 12:
            return not is_prefill  # XQA decode only
        return cc[0] == 10

    def supports_trtllm_attention(self, ctx: "SelectionContext") -> bool:
        return self.trtllm_supported(ctx, is_prefill=False)

    def model_heads(self, ctx: "SelectionContext") -> tuple[int, int]:
        heads = ctx.num_heads if ctx.num_heads is not None else self.MODEL_HEADS_WHEN_UNKNOWN
        kv_heads = ctx.num_kv_heads or heads
        return heads, kv_heads

    def can_use_trtllm_attention(self, ctx: "SelectionContext", is_prefill: bool = False) -> bool:
        if ctx.use_trtllm_attention is False:
            return False
        heads, kv_heads = self.model_heads(ctx)
        return self.trtllm_supported(ctx, is_prefill) and heads % kv_heads == 0

    def supports_sink(self, spec: BackendSpec, ctx: "SelectionContext") -> bool:
        if isinstance(spec.sink, dict) and spec.sink.get("rule") == "flashinfer_033":
            # flashinfer.py FlashInferBackend.supports_sink
            if ctx.use_trtllm_attention is False:
                return False
            cc = tuple(ctx.capability)
            if cc == (9, 0) or cc[0] == 12:
                return self.trtllm_supported(ctx, is_prefill=False)
            if cc[0] != 10:
                return False
            return self.trtllm_supported(ctx, False) and self.trtllm_supported(ctx, True)
        if isinstance(spec.sink, dict) and spec.sink.get("rule") == "flash_attn_version":
            return self.fa_version(ctx).version in tuple(spec.sink["versions"])
        return super().supports_sink(spec, ctx)

    def supports_per_head_quant_scales(self, spec: BackendSpec, ctx: "SelectionContext") -> bool:
        rule = spec.per_head_quant_scales
        if isinstance(rule, dict) and rule.get("rule") == "flash_attn_version_at_least":
            version = self.fa_version(ctx).version
            return version is not None and version >= rule["version"]
        return super().supports_per_head_quant_scales(spec, ctx)

    # --- flags named by rule in the 0.33 data ---------------------------------------------------
    def flag_rule(self, rule: dict, ctx: "SelectionContext") -> bool:
        if rule.get("rule") == "fa4_supported":
            return self.fa_version_supported(4, ctx)
        if rule.get("rule") == "flashinfer_query_lens":
            # FlashInferBackend.supports_device_cpu_query_lens_mismatch: trtllm-gen decode on 10.x
            if ctx.capability[0] != 10:
                return False
            return ctx.decode_context_parallel_size == 1 and self.can_use_trtllm_attention(ctx)
        return super().flag_rule(rule, ctx)

    # --- kv-cache dtypes --------------------------------------------------------------------------
    def supports_kv_cache_dtype(self, spec: BackendSpec, kv_cache_dtype: Optional[str], ctx) -> bool:
        rule = spec.kv_cache_dtypes
        if not isinstance(rule, dict):
            return super().supports_kv_cache_dtype(spec, kv_cache_dtype, ctx)
        listed = rule.get("list", [])
        if rule["rule"] == "turboquant":
            # TurboQuantAttentionBackend.supports_kv_cache_dtype: None is NOT accepted
            return kv_cache_dtype is not None and kv_cache_dtype.startswith("turboquant_")
        if kv_cache_dtype is None:
            return True
        if rule["rule"] == "flash_attn_033":
            # FlashAttentionBackend.supports_kv_cache_dtype
            if kv_cache_dtype not in listed:
                return False
            if is_quantized_kv_cache(kv_cache_dtype):
                return self.flash_attn_supports_kv_cache_dtype(ctx, kv_cache_dtype)
            return True
        if rule["rule"] == "flashinfer_033":
            # FlashInferBackend.supports_kv_cache_dtype: nvfp4 on FA2-path GPUs (8.x/9.x/12.x) is
            # plain "nvfp4" only; on 10.x it needs TRT-LLM for prefill and decode
            if kv_cache_dtype.startswith("nvfp4"):
                if ctx.capability[0] in (8, 9, 12):
                    return kv_cache_dtype == "nvfp4"
                return (
                    ctx.capability[0] == 10
                    and self.trtllm_supported(ctx, is_prefill=True)
                    and self.trtllm_supported(ctx, is_prefill=False)
                )
            return kv_cache_dtype in listed
        return super().supports_kv_cache_dtype(spec, kv_cache_dtype, ctx)

    # --- kernel block sizes ------------------------------------------------------------------------
    def kernel_block_sizes_rule(self, spec: BackendSpec, ctx: "SelectionContext", inputs) -> list[KernelBlockSize]:
        if spec.kernel_block_sizes_rule == "flash_attn_033":
            fixed = self._fa_fixed_block_size(ctx, inputs)
            return [fixed] if fixed is not None else [MultipleOf(16)]
        if spec.kernel_block_sizes_rule == "flashinfer_033":
            # FlashInferBackend.get_supported_kernel_block_sizes: pages >= 128 only for GQA on
            # 10.x when TRT-LLM attention can run
            large = False
            if inputs is not None:
                heads, kv_heads = self.model_heads(ctx)
                large = kv_heads > 0 and heads // kv_heads > 1 and ctx.capability[0] == 10 and self.can_use_trtllm_attention(ctx)
            return [16, 32, 64, 128, 256, 512, 1024] if large else [16, 32, 64]
        return super().kernel_block_sizes_rule(spec, ctx, inputs)

    def _fa_fixed_block_size(self, ctx, inputs) -> Optional[int]:
        """FlashAttentionBackend: SM90 FP8 KV at head 512 on FA4 -> 64 (its TMA tile); the FA4
        head-256 kernel on 10.x/11.x -> 128 (FA4_HD256_PAGE_SIZE)."""
        if inputs is None:
            return None  # no model config: vLLM returns None from both helpers
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

    def preferred_block_size_override(self, spec: BackendSpec, ctx, inputs, default: int) -> Optional[int]:
        if spec.kernel_block_sizes_rule == "flash_attn_033":
            fixed = self._fa_fixed_block_size(ctx, inputs)
            return max(default, fixed) if fixed is not None else None
        return None

    def composite_kernel_block_sizes(self, spec: BackendSpec, ctx, inputs) -> list[KernelBlockSize]:
        # composite.py: the listed sizes both children accept, else the intersection of their lists
        general, causal = spec.composite["general"], spec.composite["causal"]
        profile = self.profile
        listed = spec.composite.get("kernel_block_sizes") or []
        if listed:
            return [
                size for size in listed
                if profile.supports_block_size(general, size, ctx, inputs)
                and profile.supports_block_size(causal, size, ctx, inputs)
            ]
        result: list[KernelBlockSize] = []
        for lhs in profile.kernel_block_sizes(general, ctx, inputs):
            for rhs in profile.kernel_block_sizes(causal, ctx, inputs):
                candidate = _intersect_sizes(lhs, rhs)
                if candidate is not None and candidate not in result:
                    result.append(candidate)
        return result

    # --- supports_combination texts ------------------------------------------------------------
    def combination_reason(self, spec: BackendSpec, inputs: "SelectorInputs", ctx) -> Optional[str]:
        if spec.composite is not None:
            return self._composite_combination(spec, inputs, ctx)
        return super().combination_reason(spec, inputs, ctx)

    def _composite_combination(self, spec: BackendSpec, inputs, ctx) -> Optional[str]:
        # composite.py supports_combination: each child, mm_prefix only for the general child
        for variant, name in enumerate((spec.composite["general"], spec.composite["causal"])):
            child = self.profile.backend(name)
            child_inputs = inputs if variant == 0 else inputs.replace(use_mm_prefix=False)
            reason = super().combination_reason(child, child_inputs, ctx)
            if reason is None and variant == 1 and spec.composite.get("causal_combination"):
                reason = getattr(self, f"_combination_{spec.composite['causal_combination']}")(child_inputs, ctx)
            if reason:
                return f"{child.vllm_name or child.name}: {reason}"
        return None

    def _combination_fa_causal_route(self, inputs, ctx) -> Optional[str]:
        # triton_flash_attn.py _FABackend.supports_combination
        version = self.fa_version(
            ctx, inputs, head_size=inputs.head_size, has_sinks=inputs.has_sink,
            block_size=inputs.block_size, supports_fa4_hd256=True,
        ).version
        if version not in (3, 4):
            return "causal route requires FlashAttention v3 or v4"
        return None

    def _combination_flash_attn_033(self, inputs, ctx) -> Optional[str]:
        # flash_attn.py FlashAttentionBackend.supports_combination
        kv = inputs.kv_cache_dtype
        quantized = kv is not None and is_quantized_kv_cache(kv)
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        if inputs.use_mm_prefix and quantized and tuple(ctx.capability) == (9, 0):
            return "SM90 FP8 KV with mm_prefix requires Triton"
        version_args = dict(
            head_size=inputs.head_size, has_sinks=inputs.has_sink,
            block_size=inputs.block_size, supports_fa4_hd256=True,
        )
        if quantized and not self.flash_attn_supports_kv_cache_dtype(
            ctx, kv, inputs, head_size_v=inputs.head_size, **version_args
        ):
            return "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100"
        if inputs.use_mm_prefix and self.fa_version(ctx, inputs, **version_args).version != 4:
            return (
                "mm_prefix (PrefixLM bidirectional attention) requires "
                "FlashAttention v4, which does not resolve for this head_size"
            )
        return None

    def _combination_flashinfer_033(self, inputs, ctx) -> Optional[str]:
        # flashinfer.py FlashInferBackend.supports_combination (NVFP4 on the FA2 prefill path)
        kv = inputs.kv_cache_dtype
        if kv is not None and kv.startswith("nvfp4") and ctx.capability[0] in (8, 9, 12):
            if inputs.head_size == 64:
                return "fa2 prefill misreads an NVFP4 KV cache at head_size 64"
            if inputs.has_sink:
                return "the sink prefill wrapper cannot read an NVFP4 KV cache"
        return None

    def _flashmla_033(self, inputs, ctx) -> Optional[str]:
        # mla/flashmla.py -> v1/attention/ops/flashmla.py is_flashmla_{sparse,dense}_supported
        return self._flashmla_support_reason(inputs, ctx, sparse_devices="Hopper and Blackwell DC devices")

    _combination_flashmla_033 = _flashmla_033

    def _combination_flashinfer_mla_033(self, inputs, ctx) -> Optional[str]:
        # mla/flashinfer_mla.py: getattr(hf_text_config, "qk_nope_head_dim", 1)
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope not in (64, 128, 192):
            return f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got {qk_nope}"
        return None

    def _combination_tokenspeed_mla(self, inputs, ctx) -> Optional[str]:
        # mla/tokenspeed_mla.py: the package is imported here, not at module import
        if not ctx.module_present("tokenspeed_mla"):
            return "tokenspeed_mla package is not installed. Install it with: `uv pip install tokenspeed-mla`"
        dims = tuple(0 if v is None else v for v in (ctx.qk_nope_head_dim, ctx.qk_rope_head_dim, ctx.v_head_dim))
        if dims != (128, 64, 128):
            return (
                "tokenspeed_mla requires DeepSeek R1 MLA dimensions "
                "(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128), "
                f"got ({dims[0]}, {dims[1]}, {dims[2]})"
            )
        return None

    def _index_topk(self, ctx) -> Optional[int]:
        if not ctx.has_index_topk:
            return None
        return ctx.index_topk if ctx.index_topk is not None else self.DEFAULT_INDEX_TOPK

    def _combination_flashinfer_mla_sparse_033(self, inputs, ctx, name: str = "FLASHINFER_MLA_SPARSE") -> Optional[str]:
        # mla/flashinfer_mla_sparse.py FlashInferMLASparseTRTLLMBackend.supports_combination
        if ctx.prefill_context_parallel_size > 1 and ctx.decode_context_parallel_size > 1:
            return (
                f"{name} does not support combined PCP+DCP; "
                "use FLASHMLA_SPARSE, which gathers each DCP KV shard before "
                "running the rank-local PCP prefill queries"
            )
        if inputs.kv_cache_dtype == "fp8_ds_mla":
            return f"{name} SM10 does not support fp8_ds_mla kv-cache dtype"
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

    def _combination_flash_attn_mla_sparse_fa4(self, inputs, ctx) -> Optional[str]:
        # mla/flashattn_mla_sparse.py FlashAttnMLASparseFA4Backend.supports_combination
        if not self.fa_version_supported(4, ctx):
            return f"FA4 unavailable: {self._fa4_unsupported_reason(ctx)}"
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
        return self._combination_flashinfer_mla_sparse_033(inputs, ctx, name="FLASH_ATTN_MLA_SPARSE_FA4")

    def _fa4_unsupported_reason(self, ctx) -> str:
        # vllm_flash_attn/flash_attn_interface.py _is_fa4_supported
        if not ctx.module_present(self.profile.data["flash_attn_modules"]["fa4"]):
            return "FA4 is unavailable due to: vllm.vllm_flash_attn.cute.interface not found"
        return "FA4 is only supported on devices with compute capability 9.x, 10.x, or 11.x"

    def _combination_flash_attn_mla_sparse(self, inputs, ctx) -> Optional[str]:
        # mla/flashattn_mla_sparse.py FlashAttnMLASparseBackend.supports_combination
        if inputs.kv_cache_dtype not in (None, "auto", "float16", "bfloat16"):
            return "FlashAttention MLA Sparse currently supports only FP16/BF16 KV cache"
        if not self.flash_attn_supports_mla(ctx):
            return "FlashAttention MLA not supported on this device"
        if ctx.decode_context_parallel_size > 1:
            return "FlashAttention MLA Sparse does not support DCP for now"
        if not ctx.has_index_topk:
            return "FlashAttention MLA Sparse requires model with index_topk"
        return None

    def _combination_flashinfer_mla_sparse_sm90(self, inputs, ctx) -> Optional[str]:
        # mla/flashinfer_mla_sparse_sm90.py (FlashInfer's SM90 NoPE MLA API assumed present)
        if not inputs.use_sparse:
            return "FLASHINFER_MLA_SPARSE_SM90 requires sparse MLA"
        if ctx.kv_lora_rank != 512:
            return "FLASHINFER_MLA_SPARSE_SM90 requires kv_lora_rank=512"
        if ctx.qk_rope_head_dim not in (0, 64):
            return "FLASHINFER_MLA_SPARSE_SM90 requires qk_rope_head_dim in (0, 64)"
        return None

    def _combination_flashinfer_mla_sparse_sm120(self, inputs, ctx) -> Optional[str]:
        # mla/flashinfer_mla_sparse.py FlashInferMLASparseSM120Backend (sparse decode API assumed present)
        if inputs.dtype != "bfloat16":
            return "dtype not supported"
        if inputs.kv_cache_dtype not in (None, "auto", "fp8", "fp8_e4m3", "fp8_ds_mla"):
            return "kv_cache_dtype not supported"
        topk = self._index_topk(ctx)
        if topk is None:
            return "FLASHINFER_MLA_SPARSE_SM120 requires a model with index_topk config"
        if int(topk) != 2048:
            return f"FLASHINFER_MLA_SPARSE_SM120 requires index_topk=2048; got {topk}"
        return None

    def _combination_flashmla_sparse_033(self, inputs, ctx) -> Optional[str]:
        # mla/flashmla_sparse.py FlashMLASparseBackend.supports_combination
        kv = inputs.kv_cache_dtype
        major, minor = ctx.capability
        if inputs.head_size == 512:
            if kv in (None, "auto", "bfloat16", "float16", "fp8_ds_mla") and major == 9:
                rope = 64 if ctx.qk_rope_head_dim is None else ctx.qk_rope_head_dim
                if rope != 0:
                    return "FLASHMLA_SPARSE supports head_size 512 only for rope-free (NoPE) models"
            else:
                return (
                    "FLASHMLA_SPARSE supports head_size 512 only with bf16 or "
                    f"fp8_ds_mla kv-cache on SM90 (NoPE), got kv_cache_dtype={kv}, "
                    f"capability=DeviceCapability(major={major}, minor={minor})"
                )
        if kv == "nvfp4_ds_mla" and major != 10:
            return f"FLASHMLA_SPARSE only supports the {kv} kv-cache dtype on SM100 (Blackwell)"
        return None


FA4_HD256_PAGE_SIZE = 128  # fa_utils.py: the hd256 kernel's 128-token page


def _intersect_sizes(lhs: KernelBlockSize, rhs: KernelBlockSize) -> Optional[KernelBlockSize]:
    """composite.py _intersect_kernel_block_sizes for one pair of entries."""
    if isinstance(lhs, MultipleOf) and isinstance(rhs, MultipleOf):
        return MultipleOf(math.lcm(lhs.base, rhs.base))
    if isinstance(lhs, MultipleOf):
        return rhs if rhs % lhs.base == 0 else None
    if isinstance(rhs, MultipleOf):
        return lhs if lhs % rhs.base == 0 else None
    return lhs if lhs == rhs else None


_RULE_CODE: dict[str, type[RuleCode]] = {"seed_0_17": RuleCode, "vllm_0_33": RuleCode033}


_OPTIONAL_SPEC_FIELDS = (
    "kernel_block_sizes_rule",
    "composite",
    "vllm_name",
    "sliding_window",
    "rswa",
    "non_causal",
    "non_causal_dcp",
    "batch_invariance",
    "kv_connector",
    "pcp",
    "dcp",
    "device_cpu_query_lens_mismatch",
)


class RuleProfile:
    """vLLM's selection rules for one version. All methods are pure: (inputs, ctx) -> answer."""

    def __init__(self, data: dict, params: Optional[dict] = None):
        self.data = data
        self.name: str = data["name"]
        self.vllm_version: str = data["vllm_version"]
        self.params: dict = {**data["params"], **(params or {})}
        self.block_sizes: tuple[int, ...] = tuple(data["block_sizes"])
        self.cache_dtypes: tuple[str, ...] = tuple(data["cache_dtypes"])
        self.attention_types: tuple[str, ...] = tuple(data["attention_types"])
        self.registry: dict[str, Optional[str]] = {name: path for name, path in data["registry"]}
        self.device_name: str = data["device_name"]
        self._backends = {n: self._parse_backend(n, raw) for n, raw in data["backends"].items()}
        self.code: RuleCode = _RULE_CODE[self.name](self)

    def __repr__(self) -> str:
        return f"RuleProfile({self.name!r})"

    def with_params(self, **params: Any) -> "RuleProfile":
        """A variant of this profile, e.g. `with_params(flash_attn_version_rules="0.16.0")`."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise UserInputError(f"unknown profile parameter(s): {', '.join(sorted(unknown))}")
        return RuleProfile(self.data, {**self.params, **params})

    # --- data access ------------------------------------------------------------------------
    def _parse_backend(self, name: str, raw: dict) -> BackendSpec:
        merged = {**self.data["backend_defaults"], **raw}
        hybrid = merged.get("kernel_block_sizes_hybrid_float32_mamba")
        return BackendSpec(
            name=name,
            class_path=self.registry[name] or "",
            dtypes=tuple(merged["dtypes"]),
            kv_cache_dtypes=merged["kv_cache_dtypes"],
            kernel_block_sizes=_parse_kernel_sizes(merged["kernel_block_sizes"]),
            kernel_block_sizes_hybrid_float32_mamba=_parse_kernel_sizes(hybrid) if hybrid else None,
            head_sizes=merged["head_sizes"],
            capability=merged["capability"],
            sink=merged["sink"],
            mm_prefix=merged["mm_prefix"],
            mla=bool(merged["mla"]),
            sparse=bool(merged["sparse"]),
            attn_types=tuple(merged["attn_types"]),
            per_head_quant_scales=merged["per_head_quant_scales"],
            combination=merged["combination"],
            imports=tuple(merged["imports"]),
            required_layout=merged["required_layout"],
            **{key: merged[key] for key in _OPTIONAL_SPEC_FIELDS if key in merged},
        )

    @property
    def backend_names(self) -> list[str]:
        """Backends whose rules this profile models (CUDA backends of §3)."""
        return list(self._backends)

    @property
    def registry_names(self) -> list[str]:
        """Every `AttentionBackendEnum` member, in enum order (what vLLM lists as valid options)."""
        return list(self.registry)

    def backend(self, name: str) -> BackendSpec:
        return self._backends[name]

    def has_selector_field(self, field_name: str) -> bool:
        return field_name in self.params["selector_fields"]

    # --- name lookup (vllm-rules §7: the name is upper-cased and looked up in the enum) --------
    def resolve_backend_name(self, name: str) -> str:
        upper = name.strip().upper()
        if upper in self.registry:
            return upper
        valid = ", ".join(self.registry)
        message = f"Unknown attention backend: '{upper}'. Valid options are: {valid}"
        close = difflib.get_close_matches(upper, self.registry_names, n=1, cutoff=0.5)
        if close:
            message += f" (attnsel: did you mean {close[0]}?)"
        raise UserInputError(message)

    # --- §5a / §9 priorities ------------------------------------------------------------------
    def priority_list(self, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        return self.code.priority_list(inputs, ctx)

    # --- per-backend facts --------------------------------------------------------------------
    def kernel_block_sizes(
        self, backend: str, ctx: "SelectionContext", inputs: Optional["SelectorInputs"] = None
    ) -> list[KernelBlockSize]:
        """`get_supported_kernel_block_sizes()`; `inputs` (the model's head size, kv dtype, ...) is
        what 0.33's FLASH_ATTN / FLASHINFER read from the current VllmConfig."""
        spec = self.backend(backend)
        if spec.composite is not None:
            return self.code.composite_kernel_block_sizes(spec, ctx, inputs)
        if spec.kernel_block_sizes_rule is not None:
            return self.code.kernel_block_sizes_rule(spec, ctx, inputs)
        if spec.kernel_block_sizes_hybrid_float32_mamba and ctx.is_hybrid and ctx.mamba_cache_float32:
            # FlashAttention: only these sizes avoid the NaN problem with float32 Mamba state
            # (vllm-rules §3a FLASH_ATTN; flash-attention issue #1974)
            return list(spec.kernel_block_sizes_hybrid_float32_mamba)
        return list(spec.kernel_block_sizes)

    def supports_block_size(
        self, backend: str, block_size: Optional[int], ctx: "SelectionContext",
        inputs: Optional["SelectorInputs"] = None,
    ) -> bool:
        # AttentionBackend.supports_block_size (vllm-rules §2, seeds/002)
        if block_size is None:
            return True
        if self.block_sizes and block_size not in self.block_sizes:
            return False  # seed: the BlockSize Literal (§2); 0.33 has none (§9)
        sizes = self.kernel_block_sizes(backend, ctx, inputs)
        if self.backend(backend).composite is not None and not sizes:
            return False  # composite.py: no common kernel size -> no block size at all
        if not sizes:
            return True
        return any(block_size % (s.base if isinstance(s, MultipleOf) else s) == 0 for s in sizes)

    def preferred_block_size(
        self, backend: str, ctx: "SelectionContext", default: Optional[int] = None,
        inputs: Optional["SelectorInputs"] = None,
    ) -> int:
        # get_preferred_block_size(default) as quoted in vllm-rules §2 (v0.18.0+ text; seed assumed equal)
        default = self.params["default_block_size"] if default is None else default
        override = self.code.preferred_block_size_override(self.backend(backend), ctx, inputs, default)
        if override is not None:
            return override
        sizes = self.kernel_block_sizes(backend, ctx, inputs)
        if not sizes or self.supports_block_size(backend, default, ctx, inputs):
            return default
        return min(s.base if isinstance(s, MultipleOf) else s for s in sizes)

    def supports_head_size(self, spec: BackendSpec, head_size: int, ctx: Optional["SelectionContext"] = None) -> bool:
        rule = spec.head_sizes
        if rule == "any":
            return True
        if "list" in rule:
            return (not rule["list"]) or head_size in rule["list"]
        if "multiple_of" in rule:
            limit = rule["max"]
            if "max_if_fa4" in rule and ctx is not None and self.code.fa_version_supported(4, ctx):
                limit = rule["max_if_fa4"]  # 0.33 FLASH_ATTN: <=512 when FA4 is supported (§9)
            return head_size % rule["multiple_of"] == 0 and head_size <= limit
        if "min" in rule:
            return head_size >= rule["min"]
        raise ValueError(f"unknown head-size rule {rule!r}")

    def supports_capability(self, spec: BackendSpec, capability: tuple[int, int]) -> bool:
        rule = spec.capability
        cc = tuple(capability)
        if rule == "any":
            return True
        if "majors" in rule:
            return cc[0] in rule["majors"]
        if "min" in rule and cc < tuple(rule["min"]):
            return False
        if "max" in rule and cc > tuple(rule["max"]):
            return False
        return True

    def supports_attn_type(self, spec: BackendSpec, attn_type: str) -> bool:
        return attn_type in spec.attn_types

    def required_kv_cache_layout(self, backend: str, ctx: "SelectionContext") -> Optional[str]:
        rule = self.backend(backend).required_layout
        if isinstance(rule, dict):
            return "HND" if ctx.capability[0] == rule["HND_on_major"] else None
        return rule

    def import_modules(self, backend: str) -> list[str]:
        """Modules whose absence makes vLLM report `ImportError` for this backend."""
        spec = self.backend(backend)
        return [spec.module, *spec.imports]

    def is_importable(self, backend: str, ctx: "SelectionContext") -> bool:
        return all(ctx.module_present(m) for m in self.import_modules(backend))

    def all_import_modules(self) -> list[str]:
        """Every module name the profile's rules look at (for `--check-imports`)."""
        names: list[str] = []
        for backend in self.backend_names:
            names.extend(self.import_modules(backend))
        names.extend(self.data["flash_attn_modules"].values())
        names.extend(self.data["flashmla_modules"])
        names.append(self.data["flashinfer_cubin_module"])
        return list(dict.fromkeys(names))

    # --- §2 / §9 validate_configuration -------------------------------------------------------
    def missing_module(self, backend: str, ctx: "SelectionContext") -> Optional[str]:
        for module in self.import_modules(backend):
            if not ctx.module_present(module):
                return module
        return None

    def validate(self, backend: str, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        """`validate_configuration` reasons in vLLM's order and words; an import failure gives the
        profile's import reason (`ImportError` in the seed, `ModuleNotFoundError: ...` in 0.33)."""
        spec = self.backend(backend)
        missing = self.missing_module(backend, ctx)
        if missing is not None:
            return [self.code.import_failure_reason(missing)]
        code = self.code
        reasons: list[str] = []
        if not self.head_size_ok(spec, inputs.head_size, ctx):
            reasons.append("head_size not supported")
        if not self.dtype_ok(spec, inputs.dtype):
            reasons.append("dtype not supported")
        if not self.kv_cache_dtype_ok(spec, inputs.kv_cache_dtype, ctx):
            reasons.append("kv_cache_dtype not supported")
        if not self.supports_block_size(backend, inputs.block_size, ctx, inputs):
            reasons.append("block_size not supported")
        if inputs.use_mm_prefix and not self.mm_prefix_ok(spec, ctx):
            reasons.append("partial multimodal token full attention not supported")
        if inputs.use_mla != spec.mla:
            reasons.append("MLA not supported" if inputs.use_mla else "non-MLA not supported")
        if inputs.has_sink and not code.supports_sink(spec, ctx):
            reasons.append(self.params.get("sink_reason", "sink setting not supported"))
        if inputs.use_sparse != spec.sparse:
            reasons.append("sparse not supported" if inputs.use_sparse else "non-sparse not supported")
        if (
            self.has_selector_field("use_per_head_quant_scales")
            and inputs.use_per_head_quant_scales
            and not code.supports_per_head_quant_scales(spec, ctx)
        ):
            reasons.append("per-head quant scales not supported")
        if not self.capability_ok(spec, ctx.capability):
            reasons.append("compute capability not supported")
        if not self.supports_attn_type(spec, inputs.attn_type):
            reasons.append(f"attention type {attn_type_str(inputs.attn_type)} not supported")
        reasons.extend(self._new_input_reasons(spec, inputs, ctx))
        combination = code.combination_reason(spec, inputs, ctx)
        if combination is not None:
            reasons.append(combination)
        return reasons

    # --- single checks; a composite backend combines its two children's (composite.py) ---------
    def _children(self, spec: BackendSpec) -> list[BackendSpec]:
        return [self.backend(spec.composite["general"]), self.backend(spec.composite["causal"])]

    def head_size_ok(self, spec: BackendSpec, head_size: int, ctx: "SelectionContext") -> bool:
        if spec.composite is not None:
            listed = spec.composite.get("head_sizes") or []
            return (not listed or head_size in listed) and all(
                self.head_size_ok(child, head_size, ctx) for child in self._children(spec)
            )
        return self.supports_head_size(spec, head_size, ctx)

    def dtype_ok(self, spec: BackendSpec, dtype: str) -> bool:
        if spec.composite is not None:
            return all(self.dtype_ok(child, dtype) for child in self._children(spec))
        return dtype in spec.dtypes

    def kv_cache_dtype_ok(self, spec: BackendSpec, kv_cache_dtype: Optional[str], ctx: "SelectionContext") -> bool:
        if spec.composite is not None:
            return all(self.kv_cache_dtype_ok(child, kv_cache_dtype, ctx) for child in self._children(spec))
        return self.code.supports_kv_cache_dtype(spec, kv_cache_dtype, ctx)

    def mm_prefix_ok(self, spec: BackendSpec, ctx: "SelectionContext") -> bool:
        if spec.composite is not None:
            # MMPrefixAttentionRouting: only the general child (variant 0) sees image masks
            return self.mm_prefix_ok(self._children(spec)[0], ctx)
        return self.code.supports_mm_prefix(spec, ctx)

    def capability_ok(self, spec: BackendSpec, capability: tuple[int, int]) -> bool:
        if spec.composite is not None:
            major = spec.composite.get("device_major")
            general, causal = self._children(spec)
            causal_major = spec.composite.get("causal_capability_major")
            return (
                (major is None or capability[0] == major)
                and self.capability_ok(general, capability)
                and (causal_major is None or capability[0] == causal_major)
                and self.capability_ok(causal, capability)
            )
        return self.supports_capability(spec, capability)

    def flag_ok(self, spec: BackendSpec, attr: str, ctx: "SelectionContext") -> bool:
        if spec.composite is not None and attr in ("sliding_window", "rswa"):
            return all(self.flag_ok(child, attr, ctx) for child in self._children(spec))
        return self.code.supports_flag(spec, attr, ctx)

    def _new_input_reasons(self, spec: BackendSpec, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        """The checks 0.33 appends after the attention type, in the order of vLLM 0.33.0's
        vllm/v1/attention/backend.py `validate_configuration` (R-SWA right after sliding window)."""
        reasons: list[str] = []
        for field_name, attr, reason in _NEW_INPUT_CHECKS:
            if not self.has_selector_field(field_name) or not getattr(inputs, field_name):
                continue
            if field_name == "use_non_causal" and attr == "non_causal_dcp":
                if not (inputs.use_mla and inputs.use_dcp):
                    continue
            if not self.flag_ok(spec, attr, ctx):
                reasons.append(reason)
        return reasons


# (selector field, BackendSpec attribute, vLLM's reason) in vLLM's order (vllm-rules §9)
_NEW_INPUT_CHECKS = (
    ("has_sliding_window", "sliding_window", "sliding window not supported"),
    ("use_rswa", "rswa", "R-SWA not supported"),
    ("use_non_causal", "non_causal", "non-causal attention not supported"),
    ("use_non_causal", "non_causal_dcp", "non-causal MLA attention with DCP not supported"),
    ("use_batch_invariant", "batch_invariance", "batch invariance not supported"),
    ("use_kv_connector", "kv_connector", "KV connector not supported"),
    ("use_pcp", "pcp", "PCP not supported"),
    ("use_dcp", "dcp", "DCP not supported"),
    (
        "use_adaptive_verification",
        "device_cpu_query_lens_mismatch",
        "device-cpu query lens mismatch not supported, this is needed for adaptive verification",
    ),
)


def attn_type_str(attn_type: str) -> str:
    """How vLLM's f-strings print an `AttentionType` member under Python 3.11+ (vllm-rules §2)."""
    return f"AttentionType.{attn_type.upper()}"


# --- loading -------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _load_profile_data(name: str) -> str:
    path = PROFILES_DIR / f"{name}.json"
    return path.read_text(encoding="utf-8")


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


@lru_cache(maxsize=None)
def _profile(name: str) -> RuleProfile:
    return RuleProfile(_profile_meta(name))


@dataclass(frozen=True)
class ProfileChoice:
    profile: RuleProfile
    requested: Optional[str]
    note: Optional[str] = None  # set when the profile only approximates the requested version
    source: str = "default"  # "--vllm-version" | "installed" | "newest" | "default"
    installed_version: Optional[str] = None  # vLLM found in this environment (package metadata)

    @property
    def reason(self) -> str:
        """One line: which profile answered and why."""
        name = f"{self.profile.name} (vLLM {self.profile.vllm_version})"
        if self.source == "--vllm-version":
            why = f"--vllm-version {self.requested}"
        elif self.source == "installed":
            why = f"vLLM {self.installed_version} is installed here"
        elif self.source == "newest":
            why = "no vLLM installed here: the newest profile"
        else:
            why = "the default profile"
        return f"rule profile {name}: {why}" + (f"; {self.note}" if self.note else "")


_VERSION_PREFIX = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_TOO_MANY_DIGITS = re.compile(r"\d{7,}")  # no version part has more (int() of thousands of digits raises)


def parse_vllm_version(text: str) -> Optional[tuple[int, int, int]]:
    """"0.33.0", "v0.20", "0.19.1rc1.dev5+g1234" -> (0, 33, 0), (0, 20, 0), (0, 19, 1); else None."""
    match = _VERSION_PREFIX.match(str(text).strip().lower())
    if not match or _TOO_MANY_DIGITS.search(match.group(0)):
        return None
    return tuple(int(part or 0) for part in match.groups())  # type: ignore[return-value]


@lru_cache(maxsize=None)
def _profile_meta(name: str) -> dict:
    """A profile's JSON, parsed but not built into a RuleProfile (cheap: used to pick one)."""
    return json.loads(_load_profile_data(name))


class _LazyProfiles:
    """Profiles ordered by vLLM release; a RuleProfile is built only for the one picked."""

    def __init__(self) -> None:
        self.names = sorted(available_profiles(), key=lambda n: tuple(_profile_meta(n)["vllm_release"]))

    def release(self, name: str) -> tuple[int, int, int]:
        return tuple(_profile_meta(name)["vllm_release"])  # type: ignore[return-value]


def _version_str(release: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in release)


def profile_for_version(version: str) -> ProfileChoice:
    """The profile for a vLLM version: the same major.minor, else the nearest older profile.

    Older than every profile -> the oldest, with a note; newer than every profile -> the newest.
    """
    release = parse_vllm_version(version)
    if release is None:
        raise UserInputError(f"cannot read a vLLM version from {version!r} (expected e.g. 0.33.0)")
    lazy = _LazyProfiles()
    older = [n for n in lazy.names if lazy.release(n)[:2] <= release[:2]]
    if not older:
        oldest = lazy.names[0]
        note = (
            f"vLLM {version} is older than every rule profile; answered with the oldest, "
            f"{oldest} (vLLM {_version_str(lazy.release(oldest))}), so the answer may be wrong"
        )
        return ProfileChoice(_profile(oldest), version, note)
    chosen = older[-1]
    if lazy.release(chosen)[:2] == release[:2]:
        return ProfileChoice(_profile(chosen), version)
    if chosen == lazy.names[-1]:
        note = (
            f"vLLM {version} is newer than every rule profile; answered with the newest, "
            f"{chosen} (vLLM {_version_str(lazy.release(chosen))}); run `attnsel explain --compare-live` to check"
        )
    else:
        note = (
            f"no rule profile for vLLM {version}; answered with {chosen} "
            f"(vLLM {_version_str(lazy.release(chosen))}), the nearest older one"
        )
    return ProfileChoice(_profile(chosen), version, note)


def choose_profile(name_or_version: Optional[str] = None) -> ProfileChoice:
    """Pick the profile answering for a profile name or vLLM version; None gives the default.

    The default (library API) stays the seed-era profile; the CLI uses `select_profile()`, which
    looks at the installed vLLM first.
    """
    if name_or_version is None or not str(name_or_version).strip():
        return ProfileChoice(_profile(DEFAULT_PROFILE), None)
    wanted = str(name_or_version).strip().lower()
    for name in available_profiles():
        aliases = [a.lower() for a in _profile_meta(name).get("answers_for", [])]
        if wanted in aliases or wanted.removeprefix("v") in aliases:
            return ProfileChoice(_profile(name), name_or_version, source="--vllm-version")
    if parse_vllm_version(wanted) is None:
        known = "; ".join(
            f"{n} ({', '.join(_profile_meta(n).get('answers_for', []))})" for n in available_profiles()
        )
        raise UserInputError(f"no rule profile for vLLM {shown_path(name_or_version)}. Known profiles: {known}")
    choice = profile_for_version(str(name_or_version).strip())
    return dataclasses.replace(choice, source="--vllm-version")


def installed_vllm_version() -> Optional[str]:
    """The vLLM version installed in this environment, from package metadata (never imports vLLM)."""
    import importlib.metadata  # ~5 ms: only when the version is not given

    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def select_profile(version_flag: Optional[str] = None) -> ProfileChoice:
    """The CLI's choice: --vllm-version if given; else the installed vLLM's version; else the newest."""
    if version_flag is not None and str(version_flag).strip():
        return choose_profile(version_flag)
    installed = installed_vllm_version()
    if installed is None:
        return ProfileChoice(_profile(_LazyProfiles().names[-1]), None, source="newest")
    choice = profile_for_version(installed)
    return dataclasses.replace(choice, source="installed", installed_version=installed)


def get_profile(name_or_version: Optional[str] = None) -> RuleProfile:
    """The rule profile for a profile name ("seed_0_17") or a vLLM version ("0.17.0"); loads lazily."""
    return choose_profile(name_or_version).profile


def block_size_cli_error(profile: RuleProfile, block_size: Optional[int]) -> Optional[str]:
    """vLLM's argument-parser error for --block-size: the seed accepts only the BlockSize Literal
    (vllm-rules §4); 0.33 has no Literal, any int > 0 (§9)."""
    if block_size is None or not profile.block_sizes or block_size in profile.block_sizes:
        return None
    choices = ", ".join(str(s) for s in profile.block_sizes)
    return f"argument --block-size: invalid choice: {block_size} (choose from {choices})"


# --- module presence without importing (for --check-imports) -------------------------------------
def module_available(dotted: str) -> bool:
    """True if `dotted` can be found on sys.path, WITHOUT importing it or its parents.

    `importlib.util.find_spec("a.b")` imports `a`; vLLM's packages import torch, so we walk the
    package directories of the top-level spec instead.
    """
    parts = dotted.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    locations = list(spec.submodule_search_locations or [])
    for index, part in enumerate(parts[1:], start=1):
        is_last = index == len(parts) - 1
        next_locations: list[str] = []
        for location in locations:
            base = Path(location)
            if (base / part).is_dir():
                next_locations.append(str(base / part))
            elif is_last and any((base / f"{part}{suffix}").exists() for suffix in importlib.machinery.all_suffixes()):
                return True
        if not next_locations:
            return False
        locations = next_locations
    return True


def importable_map(profile: RuleProfile) -> dict[str, bool]:
    return {name: module_available(name) for name in profile.all_import_modules()}


__all__ = [
    "BackendSpec",
    "FlashAttnResolution",
    "KernelBlockSize",
    "MultipleOf",
    "ProfileChoice",
    "RuleCode",
    "RuleProfile",
    "RuleCode033",
    "attn_type_str",
    "available_profiles",
    "block_size_cli_error",
    "choose_profile",
    "get_profile",
    "installed_vllm_version",
    "is_quantized_kv_cache",
    "parse_vllm_version",
    "profile_for_version",
    "select_profile",
    "importable_map",
    "kernel_sizes_display",
    "kernel_sizes_repr",
    "module_available",
]
