"""vLLM's attention-backend rules for one vLLM version ("rule profile"): data + small pure functions.

A profile is a JSON file in `attention/profiles/` (backends and their attributes, priority lists,
literals) plus a `RuleCode` class for the rules that are code (FlashAttention version resolution,
`supports_combination` texts, sinks through TRT-LLM). A second profile (e.g. vLLM 0.33) is a new
JSON file and a `RuleCode` subclass registered in `_RULE_CODE`, not a rewrite.

Facts: shared/reference/vllm-rules.md (§2 validation, §3 backends, §3c FA version, §4 literals,
§5a priorities); shared/seeds/000 (cuda.py) and 002 (backend.py). No torch is imported here.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import json
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
    mm_prefix: bool
    mla: bool
    sparse: bool
    attn_types: tuple[str, ...]
    per_head_quant_scales: Any
    combination: Optional[str]
    imports: tuple[str, ...]
    required_layout: Any

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

    def flash_attn_version(self, ctx: "SelectionContext", head_size: Optional[int] = None) -> FlashAttnResolution:
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


_RULE_CODE: dict[str, type[RuleCode]] = {"seed_0_17": RuleCode}


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
            mm_prefix=bool(merged["mm_prefix"]),
            mla=bool(merged["mla"]),
            sparse=bool(merged["sparse"]),
            attn_types=tuple(merged["attn_types"]),
            per_head_quant_scales=merged["per_head_quant_scales"],
            combination=merged["combination"],
            imports=tuple(merged["imports"]),
            required_layout=merged["required_layout"],
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

    # --- §5a priorities -----------------------------------------------------------------------
    def priority_list(self, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        prio = self.data["priorities"]
        blackwell = ctx.capability[0] == prio["blackwell_major"]
        if inputs.use_mla:
            if not blackwell:
                return list(prio["mla_other"])
            few_heads = ctx.num_heads is not None and ctx.num_heads <= prio["few_heads_max"]
            tail = prio["mla_blackwell_sparse_few_heads"] if few_heads else prio["mla_blackwell_sparse"]
            return list(prio["mla_blackwell"]) + list(tail)
        return list(prio["blackwell"] if blackwell else prio["other"])

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
        if block_size not in self.block_sizes:
            return False
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

    def supports_head_size(self, spec: BackendSpec, head_size: int) -> bool:
        rule = spec.head_sizes
        if rule == "any":
            return True
        if "list" in rule:
            return (not rule["list"]) or head_size in rule["list"]
        if "multiple_of" in rule:
            return head_size % rule["multiple_of"] == 0 and head_size <= rule["max"]
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

    # --- §2 validate_configuration ------------------------------------------------------------
    def validate(self, backend: str, inputs: "SelectorInputs", ctx: "SelectionContext") -> list[str]:
        """`validate_configuration` reasons in vLLM's order and words; `["ImportError"]` if missing."""
        spec = self.backend(backend)
        if not self.is_importable(backend, ctx):
            return [IMPORT_ERROR_REASON]
        code = self.code
        reasons: list[str] = []
        if not self.supports_head_size(spec, inputs.head_size):
            reasons.append("head_size not supported")
        if inputs.dtype not in spec.dtypes:
            reasons.append("dtype not supported")
        if not code.supports_kv_cache_dtype(spec, inputs.kv_cache_dtype, ctx):
            reasons.append("kv_cache_dtype not supported")
        if not self.supports_block_size(backend, inputs.block_size, ctx):
            reasons.append("block_size not supported")
        if inputs.use_mm_prefix and not spec.mm_prefix:
            reasons.append("partial multimodal token full attention not supported")
        if inputs.use_mla != spec.mla:
            reasons.append("MLA not supported" if inputs.use_mla else "non-MLA not supported")
        if inputs.has_sink and not code.supports_sink(spec, ctx):
            reasons.append("sink setting not supported")
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
        combination = code.combination_reason(spec, inputs, ctx)
        if combination is not None:
            reasons.append(combination)
        return reasons


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
    return RuleProfile(json.loads(_load_profile_data(name)))


@dataclass(frozen=True)
class ProfileChoice:
    profile: RuleProfile
    requested: Optional[str]
    note: Optional[str] = None  # set when the profile only approximates the requested version


def choose_profile(name_or_version: Optional[str] = None) -> ProfileChoice:
    """Pick the profile answering for a profile name or vLLM version; None gives the default."""
    if name_or_version is None or not str(name_or_version).strip():
        return ProfileChoice(_profile(DEFAULT_PROFILE), None)
    wanted = str(name_or_version).strip().lower().removeprefix("v")
    for name in available_profiles():
        profile = _profile(name)
        if wanted in [a.lower() for a in profile.data.get("answers_for", [])]:
            return ProfileChoice(profile, name_or_version)
        if wanted in [a.lower() for a in profile.data.get("close_versions", [])]:
            note = (
                f"no rule profile for vLLM {name_or_version} itself; answered with {profile.name} "
                f"({profile.vllm_version}), the closest one"
            )
            return ProfileChoice(profile, name_or_version, note)
    known = "; ".join(f"{n} ({', '.join(_profile(n).data.get('answers_for', []))})" for n in available_profiles())
    raise UserInputError(f"no rule profile for vLLM {name_or_version!r}. Known profiles: {known}")


def get_profile(name_or_version: Optional[str] = None) -> RuleProfile:
    """The rule profile for a profile name ("seed_0_17") or a vLLM version ("0.17.0"); loads lazily."""
    return choose_profile(name_or_version).profile


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
    "attn_type_str",
    "available_profiles",
    "choose_profile",
    "get_profile",
    "importable_map",
    "kernel_sizes_display",
    "kernel_sizes_repr",
    "module_available",
]
