"""The version object: one vLLM version's attention rules, its data (attention/versions/*.json)
and its code (the `Rules` class the data names). Pure: (inputs, ctx) -> answer; no torch.

Facts: docs/vllm-rules.md §2 (validate_configuration), §3 (backends), §4 (literals).
Everything that differs between vLLM versions is asked of this object -- never a version string.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from attnsel.attention.rules import (
    BackendSpec,
    KernelBlockSize,
    MultipleOf,
    QuantizationRules,
    parse_kernel_sizes,
)
from attnsel.attention.versions.block_size import BlockSizeFlow
from attnsel.attention.versions.code import RuleCode
from attnsel.attention.versions.faults import KnownFault, known_faults_from_data
from attnsel.attention.versions.model_rules import ModelRules, model_rules_from_data
from attnsel.attention.versions.registry import code_class
from attnsel.attention.versions.validation import ConfigurationChecks
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.versions.adapter_facts import AdapterFacts


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


class RuleProfile(ConfigurationChecks):
    """vLLM's selection rules for one version. All methods are pure: (inputs, ctx) -> answer."""

    def __init__(self, data: dict, params: dict | None = None):
        self.data = data
        self.name: str = data["name"]
        self.vllm_version: str = data["vllm_version"]
        self.params: dict = {**data["params"], **(params or {})}
        self.block_sizes: tuple[int, ...] = tuple(data["block_sizes"])
        self.cache_dtypes: tuple[str, ...] = tuple(data["cache_dtypes"])
        self.attention_types: tuple[str, ...] = tuple(data["attention_types"])
        self.registry: dict[str, str | None] = {name: path for name, path in data["registry"]}
        self.device_name: str = data["device_name"]
        self._backends = {n: self._parse_backend(n, raw) for n, raw in data["backends"].items()}

        self.code: RuleCode = code_class(data["code"])(self)

    def __repr__(self) -> str:
        return f"RuleProfile({self.name!r})"

    def with_params(self, **params: Any) -> RuleProfile:
        """A variant of this profile, e.g. `with_params(flash_attn_version_rules="0.16.0")`."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise UserInputError(f"unknown profile parameter(s): {', '.join(sorted(unknown))}")
        return RuleProfile(self.data, {**self.params, **params})

    # --- what differs between versions besides the backends ----------------------------------
    @property
    def release(self) -> tuple[int, int, int]:
        """The vLLM release (major, minor, patch) the profile answers for."""
        return tuple(self.data["vllm_release"])  # type: ignore[return-value]

    @property
    def is_release(self) -> bool:
        """False for a profile of unreleased code (picked by name only, never by version number)."""
        return bool(self.data.get("release", True))

    @cached_property
    def block_size_flow(self) -> BlockSizeFlow:
        """The start-up path that settles the KV block size (attention/versions/block_size.py)."""
        return self.code.block_size_flow()

    @cached_property
    def model_rules(self) -> ModelRules:
        """What vLLM derives from a model config in this version (model_rules.py; attention/model/ applies it)."""
        return model_rules_from_data(self.name, self.data["models"])

    @property
    def cudagraph(self) -> dict | None:
        """How this release launches a step's attention (CUDA-graph mode, capture sizes, each
        builder's AttentionCGSupport): attention/selector/cudagraph.py reads it for tune's launch modes."""
        return self.data.get("cudagraph")

    @cached_property
    def adapter_facts(self) -> AdapterFacts | None:
        """What tune's adapters of vLLM's own classes need from this release (adapter_facts.py)."""
        # deferred: only tune and verify (vLLM's own classes) ask; explain's start-up does not load it
        from attnsel.attention.versions.adapter_facts import AdapterFacts

        return AdapterFacts.from_data(self.data)

    @property
    def engine(self) -> dict:
        """What `attnsel verify`'s engine worker reads back from this release and where: whether each
        attention layer class names its backend in the model inspection, and the log calls
        bench/verify/engine_log.py mirrors where the release moved one (`log_sources`); checked on
        CPU by bench/tools/engine_cpu_check.py (tests/fixtures/verify_engine/vllm_0_X.json)."""
        return dict(self.data.get("engine") or {})

    @cached_property
    def known_faults(self) -> tuple[KnownFault, ...]:
        """The vLLM faults known in this release (faults.py KnownFault, from `known_faults`), which
        explain and tune warn about where a configuration meets one (faults.py `faults_met`)."""
        return known_faults_from_data(self.data.get("known_faults"))

    @property
    def sampler_jit_modules(self) -> tuple[str, ...]:
        """The FlashInfer JIT modules this release's sampler builds at engine start-up, named by their
        generator ("module:function"); `attnsel verify` pre-builds them (bench/verify/prebuild.py)."""
        return tuple((self.data.get("sampler") or {}).get("jit_modules") or ())

    @cached_property
    def quantization(self) -> QuantizationRules | None:
        """vLLM's first checks on --quantization in this release (attention/rules/quantization.py
        QuantizationRules, from `quantization`): its method names, each method's minimum capability,
        the files a method reads; None where the release's data has none (the seed)."""
        return QuantizationRules.from_data(self.data.get("quantization"))

    @cached_property
    def serve_flags(self) -> frozenset[str]:
        """The option strings `vllm serve` declares in this release (`serve_flags`, read from its wheel by
        bench/tools/serve_flags.py: EngineArgs.add_cli_args and the OpenAI server's arguments); empty where
        the data has none (the seed), which attention/rules/serve_line.py reads as "not known"."""
        return frozenset(self.data.get("serve_flags") or ())

    @property
    def memory(self) -> dict | None:
        """How this release sizes its KV cache at start-up and the errors it raises when it cannot
        (attention/memory/plan.py reads it); None for a release whose memory flow is not modelled."""
        return self.data.get("memory")

    @property
    def context_inputs(self) -> tuple[str, ...]:
        """SelectionContext fields beyond the common ones that this version's rules read (e.g. KV
        heads per GPU, kv_lora_rank); explicit values for others are ignored with a note."""
        return tuple(self.data.get("context_inputs", ()))

    @property
    def flash_attn_version_choices(self) -> tuple[int, ...]:
        """The values `--attention-config.flash_attn_version` accepts (docs/vllm-rules.md §3c)."""
        return self.code.flash_attn_version_choices()

    # --- data access ------------------------------------------------------------------------
    def _parse_backend(self, name: str, raw: dict) -> BackendSpec:
        merged = {**self.data["backend_defaults"], **raw}
        hybrid = merged.get("kernel_block_sizes_hybrid_float32_mamba")
        return BackendSpec(
            name=name,
            class_path=self.registry[name] or "",
            dtypes=tuple(merged["dtypes"]),
            kv_cache_dtypes=merged["kv_cache_dtypes"],
            kernel_block_sizes=parse_kernel_sizes(merged["kernel_block_sizes"]),
            kernel_block_sizes_hybrid_float32_mamba=parse_kernel_sizes(hybrid) if hybrid else None,
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

    # --- name lookup (docs/vllm-rules.md §7: the name is upper-cased and looked up in the enum) --------
    def resolve_backend_name(self, name: str) -> str:
        upper = name.strip().upper()
        if upper in self.registry:
            return upper
        # deferred: the spelling suggestions load only for a name vLLM does not know (bad input)
        from attnsel.attention.versions.backend_names import unknown_backend_message

        raise UserInputError(unknown_backend_message(self, upper))

    # --- §5a / §9 priorities ------------------------------------------------------------------
    def priority_list(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        return self.code.priority_list(inputs, ctx)

    # --- per-backend facts --------------------------------------------------------------------
    def kernel_block_sizes(
        self, backend: str, ctx: SelectionContext, inputs: SelectorInputs | None = None
    ) -> list[KernelBlockSize]:
        """`get_supported_kernel_block_sizes()`; `inputs` (the model's head size, kv dtype, ...) is
        what later releases' FLASH_ATTN / FLASHINFER read from the current VllmConfig."""
        spec = self.backend(backend)
        if spec.composite is not None:
            return self.code.composite_kernel_block_sizes(spec, ctx, inputs)
        if spec.kernel_block_sizes_rule is not None:
            return self.code.kernel_block_sizes_rule(spec, ctx, inputs)
        if spec.kernel_block_sizes_hybrid_float32_mamba and ctx.is_hybrid and ctx.mamba_cache_float32:
            # FlashAttention: only these sizes avoid the NaN problem with float32 Mamba state
            # (docs/vllm-rules.md §3a FLASH_ATTN; flash-attention issue #1974)
            return list(spec.kernel_block_sizes_hybrid_float32_mamba)
        return list(spec.kernel_block_sizes)

    def supports_block_size(
        self, backend: str, block_size: int | None, ctx: SelectionContext,
        inputs: SelectorInputs | None = None,
    ) -> bool:
        # AttentionBackend.supports_block_size (docs/vllm-rules.md §2)
        if block_size is None:
            return True
        if self.block_sizes and block_size not in self.block_sizes:
            return False  # the BlockSize Literal where the version has one (§2); gone in 0.18 (§9)
        sizes = self.kernel_block_sizes(backend, ctx, inputs)
        if self.backend(backend).composite is not None and not sizes:
            return False  # composite.py: no common kernel size -> no block size at all
        if not sizes:
            return True
        return any(block_size % (s.base if isinstance(s, MultipleOf) else s) == 0 for s in sizes)

    def preferred_block_size(
        self, backend: str, ctx: SelectionContext, default: int | None = None,
        inputs: SelectorInputs | None = None,
    ) -> int:
        # get_preferred_block_size(default) as quoted in docs/vllm-rules.md §2
        default = self.params["default_block_size"] if default is None else default
        override = self.code.preferred_block_size_override(self.backend(backend), ctx, inputs, default)
        if override is not None:
            return override
        sizes = self.kernel_block_sizes(backend, ctx, inputs)
        if not sizes or self.supports_block_size(backend, default, ctx, inputs):
            return default
        return min(s.base if isinstance(s, MultipleOf) else s for s in sizes)

    def supports_head_size(self, spec: BackendSpec, head_size: int, ctx: SelectionContext | None = None) -> bool:
        rule = spec.head_sizes
        if rule == "any":
            return True
        if "list" in rule:
            return (not rule["list"]) or head_size in rule["list"]
        if "multiple_of" in rule:
            limit = rule["max"]
            if "max_if_fa4" in rule and ctx is not None and self.code.fa_version_supported(4, ctx):
                limit = rule["max_if_fa4"]  # FLASH_ATTN: <=512 when FA4 is supported (§9)
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
        return not ("max" in rule and cc > tuple(rule["max"]))

    def supports_attn_type(self, spec: BackendSpec, attn_type: str) -> bool:
        return attn_type in spec.attn_types

    def required_kv_cache_layout(self, backend: str, ctx: SelectionContext) -> str | None:
        rule = self.backend(backend).required_layout
        if isinstance(rule, dict):
            return "HND" if ctx.capability[0] == rule["HND_on_major"] else None
        return rule

    def import_modules(self, backend: str) -> list[str]:
        """Modules whose absence makes vLLM report `ImportError` for this backend."""
        spec = self.backend(backend)
        return [spec.module, *spec.imports]

    def is_importable(self, backend: str, ctx: SelectionContext) -> bool:
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
    def missing_module(self, backend: str, ctx: SelectionContext) -> str | None:
        for module in self.import_modules(backend):
            if not ctx.module_present(module):
                return module
        return None


def block_size_cli_error(profile: RuleProfile, block_size: int | None) -> str | None:
    """vLLM's argument-parser error for --block-size where the version has the BlockSize Literal
    (docs/vllm-rules.md §4); without it (0.18 on, §9) any int > 0 is accepted."""
    if block_size is None or not profile.block_sizes or block_size in profile.block_sizes:
        return None
    choices = ", ".join(str(s) for s in profile.block_sizes)
    return f"argument --block-size: invalid choice: {block_size} (choose from {choices})"
