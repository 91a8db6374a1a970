"""vLLM's `validate_configuration` for one version: the reasons a backend is invalid for a selector
request, in vLLM's order and words (docs/vllm-rules.md §2, §9), and the single checks behind them,
composite backends included. A mixin of the version object (profile.py `RuleProfile`), which
provides the backend table and the version's code these checks ask."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import BackendSpec, attn_type_str

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.versions.code import RuleCode


class ConfigurationChecks:
    """The checks; what they read of the version (its name, parameters, code and backend table) the
    version object provides."""

    name: str
    params: dict
    code: RuleCode

    if TYPE_CHECKING:  # RuleProfile's own methods (profile.py)
        def backend(self, name: str) -> BackendSpec: ...
        def has_selector_field(self, field_name: str) -> bool: ...
        def missing_module(self, backend: str, ctx: SelectionContext) -> str | None: ...
        def supports_block_size(self, backend: str, block_size: int | None, ctx: SelectionContext,
                                inputs: SelectorInputs | None = None) -> bool: ...
        def supports_head_size(self, spec: BackendSpec, head_size: int,
                               ctx: SelectionContext | None = None) -> bool: ...
        def supports_capability(self, spec: BackendSpec, capability: tuple[int, int]) -> bool: ...
        def supports_attn_type(self, spec: BackendSpec, attn_type: str) -> bool: ...

    def validate(self, backend: str, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        """`validate_configuration` reasons in vLLM's order and words; an import failure gives the
        version's import reason (`ImportError`, or `ModuleNotFoundError: ...` in later releases)."""
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
            shown = attn_type_str(inputs.attn_type, self.params.get("attn_type_str_enum", False))
            reasons.append(f"attention type {shown} not supported")
        reasons.extend(self._new_input_reasons(spec, inputs, ctx))
        combination = code.combination_reason(spec, inputs, ctx)
        if combination is not None:
            reasons.append(combination)
        return reasons

    # --- single checks; a composite backend combines its two children's (composite.py) ---------
    def _children(self, spec: BackendSpec) -> list[BackendSpec]:
        if spec.composite is None:
            raise ValueError(f"profile {self.name}: {spec.name} is not a composite backend")
        return [self.backend(spec.composite["general"]), self.backend(spec.composite["causal"])]

    def head_size_ok(self, spec: BackendSpec, head_size: int, ctx: SelectionContext) -> bool:
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

    def kv_cache_dtype_ok(self, spec: BackendSpec, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        if spec.composite is not None:
            return all(self.kv_cache_dtype_ok(child, kv_cache_dtype, ctx) for child in self._children(spec))
        return self.code.supports_kv_cache_dtype(spec, kv_cache_dtype, ctx)

    def mm_prefix_ok(self, spec: BackendSpec, ctx: SelectionContext) -> bool:
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

    def flag_ok(self, spec: BackendSpec, attr: str, ctx: SelectionContext) -> bool:
        if spec.composite is not None and attr in ("sliding_window", "rswa"):
            return all(self.flag_ok(child, attr, ctx) for child in self._children(spec))
        return self.code.supports_flag(spec, attr, ctx)

    def _new_input_reasons(self, spec: BackendSpec, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        """The checks later releases append after the attention type, in the order of vLLM 0.33.0's
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


# (selector field, BackendSpec attribute, vLLM's reason) in vLLM's order (docs/vllm-rules.md §9)
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
