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
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from attnsel.errors import UserInputError

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
        unavailable = self._flashmla_available_reason(ctx)
        if unavailable is not None:
            return unavailable
        major = ctx.capability[0]
        if inputs.use_sparse:
            if major not in (9, 10):
                return "FlashMLA Sparse is only supported on Hopper and Blackwell devices."
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
    """vLLM 0.33.0 rules that are code (vllm-rules §9 and the 0.33 column of §2-§8).

    Sources: the reference §9; vllm/platforms/cuda.py `_get_backend_priorities` of v0.27.1
    (6e448d0ea, read through the code index) for the MLA sparse tail and the non-causal switch;
    vllm/v1/attention/backend.py `validate_configuration` of a v0.29+ copy for the order of the
    new reasons. Facts the reference does not pin down are listed under "unverified" in
    profiles/vllm_0_33.json; `python -m attnsel.bench.parity_live` checks them against vLLM.
    """

    # --- §9 "FA version" ------------------------------------------------------------------------
    def flash_attn_version(
        self, ctx: "SelectionContext", head_size: Optional[int] = None, inputs: Optional["SelectorInputs"] = None
    ) -> FlashAttnResolution:
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
        if major == 9 and version == 3 and head_size is not None and head_size > 256:
            if self.fa_version_supported(4, ctx):
                version = 4  # SM90: FA3 -> FA4 for head sizes FA3 cannot run
        if ctx.batch_invariant and version == 4:
            version = 2
        if version == 4 and major in (10, 11) and head_size is not None:
            if head_size == 256:
                if inputs is not None and self._fa4_hd256_falls_back(inputs, ctx):
                    version = 2
            elif head_size > 128:
                warnings.append(
                    f"FA4 on Blackwell does not support head_size={head_size} due to TMEM "
                    "capacity limits, defaulting to FA version 2."
                )
                version = 2
        if not self.fa_version_supported(version, ctx):
            return FlashAttnResolution(None, tuple(warnings))
        return FlashAttnResolution(version, tuple(warnings))

    @staticmethod
    def _fa4_hd256_falls_back(inputs: "SelectorInputs", ctx: "SelectionContext") -> bool:
        # §9: FA4 hd256 on CC 10/11 -> FA2 on sinks, quantized kv, block not a multiple of 128,
        # mm_prefix, R-SWA or DCP (soft-cap is not a selector input)
        block = inputs.block_size
        return bool(
            inputs.has_sink
            or is_quantized_kv_cache(inputs.kv_cache_dtype)
            or (block is not None and block % 128 != 0)
            or inputs.use_mm_prefix
            or inputs.use_rswa
            or inputs.use_dcp
        )

    # --- §9 priorities ------------------------------------------------------------------------
    def priority_list(self, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        prio = self.profile.data["priorities"]
        major = ctx.capability[0]
        if inputs.use_mla:
            if major == 10:
                if is_quantized_kv_cache(inputs.kv_cache_dtype):
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

    # --- §9 "Import failure reason" -------------------------------------------------------------
    def import_failure_reason(self, module: str) -> str:
        # `{type(e).__name__}: {e}`; a missing module raises ModuleNotFoundError (an ImportError)
        return f"ModuleNotFoundError: No module named '{module}'"

    # --- flags named by rule in the 0.33 data ---------------------------------------------------
    def flag_rule(self, rule: dict, ctx: "SelectionContext") -> bool:
        if rule.get("rule") == "fa4_supported":
            return self.fa_version_supported(4, ctx)
        return super().flag_rule(rule, ctx)

    def supports_trtllm_attention(self, ctx: "SelectionContext") -> bool:
        # §9 FLASHINFER: sinks need TRT-LLM on 9.0, 12.x or 10.x
        if ctx.batch_invariant:
            return False
        cc = tuple(ctx.capability)
        return (cc == (9, 0) or cc[0] in (10, 12)) and self.has_nvidia_artifactory(ctx)

    # --- supports_combination texts (§9) --------------------------------------------------------
    def _combination_flash_attn_033(self, inputs, ctx) -> Optional[str]:
        major = ctx.capability[0]
        kv = inputs.kv_cache_dtype or "auto"
        resolved = self.flash_attn_version(ctx, inputs.head_size, inputs).version
        if kv.startswith("fp8"):
            if major == 9 and inputs.use_mm_prefix:
                return "SM90 FP8 KV with mm_prefix requires Triton"
            fp8_ok = (
                (major == 9 and resolved == 3)
                or (major == 9 and resolved == 4 and inputs.head_size == 512)
                or (major == 10 and resolved == 4)
            )
            if not fp8_ok:
                return "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100"
        if inputs.use_mm_prefix and self.fa_version_supported(4, ctx) and resolved != 4:
            return (
                "mm_prefix (PrefixLM bidirectional attention) requires FlashAttention v4, "
                "which does not resolve for this head_size"
            )
        if inputs.has_sink and tuple(ctx.capability) < (9, 0):
            return "sink not supported on compute capability < 9.0"
        return None

    def _combination_flashinfer_mla_033(self, inputs, ctx) -> Optional[str]:
        qk_nope = ctx.effective_qk_nope_head_dim
        if qk_nope not in (64, 128, 192):
            return f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got {qk_nope}"
        return None

    def _combination_tokenspeed_mla(self, inputs, ctx) -> Optional[str]:
        # unverified text: the reference says only "R1 dims 128/64/128"
        dims = (ctx.effective_qk_nope_head_dim, ctx.qk_rope_head_dim, ctx.v_head_dim)
        if dims != (128, 64, 128):
            return (
                "TokenSpeed MLA requires DeepSeek-R1 dimensions (qk_nope_head_dim=128, "
                f"qk_rope_head_dim=64, v_head_dim=128), but got {dims}"
            )
        return None

    def _combination_flashinfer_mla_sparse_033(self, inputs, ctx) -> Optional[str]:
        qk_nope = ctx.effective_qk_nope_head_dim
        nope_model = (ctx.qk_rope_head_dim == 0) and inputs.head_size in (256, 512)
        if qk_nope not in (128, 192) and not nope_model:
            return f"FlashInfer MLA Sparse kernel requires qk_nope_head_dim in [128, 192], but got {qk_nope}"
        if not ctx.has_index_topk:
            return "FlashInfer MLA Sparse requires model with index_topk config"
        if inputs.use_pcp and inputs.use_dcp:
            return "FlashInfer MLA Sparse does not support PCP together with DCP"
        return None

    def _combination_flash_attn_mla_sparse_fa4(self, inputs, ctx) -> Optional[str]:
        topk = ctx.index_topk
        if topk is not None and topk % 128 != 0:
            return f"FlashAttention MLA Sparse FA4 requires index_topk % 128 == 0, but got {topk}"
        heads = (ctx.num_heads or 0) * max(1, ctx.decode_context_parallel_size)
        if heads not in (8, 16, 32, 64, 128):
            return f"FlashAttention MLA Sparse FA4 requires num_heads * dcp in [8, 16, 32, 64, 128], but got {heads}"
        return None


_RULE_CODE: dict[str, type[RuleCode]] = {"seed_0_17": RuleCode, "vllm_0_33": RuleCode033}


_OPTIONAL_SPEC_FIELDS = (
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
    def kernel_block_sizes(self, backend: str, ctx: "SelectionContext") -> list[KernelBlockSize]:
        spec = self.backend(backend)
        if spec.kernel_block_sizes_hybrid_float32_mamba and ctx.is_hybrid and ctx.mamba_cache_float32:
            # FlashAttention: only these sizes avoid the NaN problem with float32 Mamba state
            # (vllm-rules §3a FLASH_ATTN; flash-attention issue #1974)
            return list(spec.kernel_block_sizes_hybrid_float32_mamba)
        return list(spec.kernel_block_sizes)

    def supports_block_size(self, backend: str, block_size: Optional[int], ctx: "SelectionContext") -> bool:
        # AttentionBackend.supports_block_size (vllm-rules §2, seeds/002)
        if block_size is None:
            return True
        if self.block_sizes and block_size not in self.block_sizes:
            return False  # seed: the BlockSize Literal (§2); 0.33 has none (§9)
        sizes = self.kernel_block_sizes(backend, ctx)
        if not sizes:
            return True
        return any(block_size % (s.base if isinstance(s, MultipleOf) else s) == 0 for s in sizes)

    def preferred_block_size(self, backend: str, ctx: "SelectionContext", default: Optional[int] = None) -> int:
        # get_preferred_block_size(default) as quoted in vllm-rules §2 (v0.18.0+ text; seed assumed equal)
        default = self.params["default_block_size"] if default is None else default
        sizes = self.kernel_block_sizes(backend, ctx)
        if not sizes or self.supports_block_size(backend, default, ctx):
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
        if not self.supports_head_size(spec, inputs.head_size, ctx):
            reasons.append("head_size not supported")
        if inputs.dtype not in spec.dtypes:
            reasons.append("dtype not supported")
        if not code.supports_kv_cache_dtype(spec, inputs.kv_cache_dtype, ctx):
            reasons.append("kv_cache_dtype not supported")
        if not self.supports_block_size(backend, inputs.block_size, ctx):
            reasons.append("block_size not supported")
        if inputs.use_mm_prefix and not code.supports_mm_prefix(spec, ctx):
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
        if not self.supports_capability(spec, ctx.capability):
            reasons.append("compute capability not supported")
        if not self.supports_attn_type(spec, inputs.attn_type):
            reasons.append(f"attention type {attn_type_str(inputs.attn_type)} not supported")
        reasons.extend(self._new_input_reasons(spec, inputs, ctx))
        combination = code.combination_reason(spec, inputs, ctx)
        if combination is not None:
            reasons.append(combination)
        return reasons

    def _new_input_reasons(self, spec: BackendSpec, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        """The checks 0.33 appends after the attention type (vllm/v1/attention/backend.py
        `validate_configuration`, order read from a v0.29+-era copy; R-SWA placed after sliding
        window, which the reference lists next to it but the copy read does not have)."""
        code = self.code
        reasons: list[str] = []
        for field_name, attr, reason in _NEW_INPUT_CHECKS:
            if not self.has_selector_field(field_name) or not getattr(inputs, field_name):
                continue
            if field_name == "use_non_causal" and attr == "non_causal_dcp":
                if not (inputs.use_mla and inputs.use_dcp):
                    continue
            if not code.supports_flag(spec, attr, ctx):
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


def parse_vllm_version(text: str) -> Optional[tuple[int, int, int]]:
    """"0.33.0", "v0.20", "0.19.1rc1.dev5+g1234" -> (0, 33, 0), (0, 20, 0), (0, 19, 1); else None."""
    match = _VERSION_PREFIX.match(str(text).strip().lower())
    if not match:
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
        raise UserInputError(f"no rule profile for vLLM {name_or_version!r}. Known profiles: {known}")
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
