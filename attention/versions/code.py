"""The part of a vLLM version's rules that is code: the base class every version's `Rules` extends.

A version's data names its rules (`"combination": "flash_attn"`, `"sink": {"rule": "flashinfer"}`,
`"kv_cache_dtypes": {"rule": "flash_attn", "list": [...]}`); this class looks the name up as a
method of the version's `Rules` class (`_combination_flash_attn`, `_sink_flashinfer`, `_kv_flash_attn`,
`_flag_fa4_supported`, `_kernel_sizes_flash_attn`, `_per_head_flash_attn_version_at_least`). A
release that changed how a rule works overrides that method in its own module under
attention/versions/; a release that changed nothing but data names no module at all and inherits
its predecessor's `Rules` (the data's `"code"` key is inherited like any other key).

What every version must provide (abstract here): the FlashAttention version resolution and the
priority list. Facts: docs/vllm-rules.md §2, §3, §3c, §5a.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from attnsel.attention.rules import (
    IMPORT_ERROR_REASON,
    BackendSpec,
    FlashAttnResolution,
    KernelBlockSize,
    NamedRule,
    SelectionContext,
    SelectorInputs,
)
from attnsel.attention.versions.block_size import BlockSizeFlow, flow_from_data

if TYPE_CHECKING:
    from attnsel.attention.versions.profile import RuleProfile

# What each kind of named rule is called with and answers (the data's "rule" names one of them).
FlagRuleFn = Callable[[SelectionContext], bool]
SinkRuleFn = Callable[[NamedRule, SelectionContext], bool]
PerHeadRuleFn = Callable[[NamedRule, SelectionContext], bool]
KvRuleFn = Callable[[NamedRule, str | None, SelectionContext], bool]
CombinationRuleFn = Callable[[SelectorInputs, SelectionContext], str | None]
KernelSizesRuleFn = Callable[[SelectionContext, SelectorInputs | None], list[KernelBlockSize]]
_Fn = TypeVar("_Fn")


class RuleCode:
    """Dispatch from rule names in a version's data to the methods that implement them."""

    def __init__(self, profile: RuleProfile):
        self.profile = profile

    # --- what each version implements -------------------------------------------------------
    def fa_version_supported(self, version: int, ctx: SelectionContext) -> bool:
        raise NotImplementedError

    def flash_attn_version(
        self, ctx: SelectionContext, head_size: int | None = None, inputs: SelectorInputs | None = None
    ) -> FlashAttnResolution:
        raise NotImplementedError

    def flash_attn_version_choices(self) -> tuple[int, ...]:
        raise NotImplementedError

    def priority_list(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        raise NotImplementedError

    def block_size_flow(self) -> BlockSizeFlow:
        """The start-up path that settles the KV block size (attention/versions/block_size.py), named
        by the data's `block_size_flow`; a release with a new path returns its own flow object."""
        return flow_from_data(self.profile.data["block_size_flow"])

    # --- import failures (docs/vllm-rules.md §5b) -----------------------------------------------------
    def import_failure_reason(self, module: str) -> str:
        # the data's `import_failure_format`: "ImportError" (the literal), or e.g.
        # "ModuleNotFoundError: No module named '{module}'" where vLLM prints the exception
        return self.profile.params.get("import_failure_format", IMPORT_ERROR_REASON).format(module=module)

    # --- rules named in the data ------------------------------------------------------------
    # Each kind's table: the rule names a release's data may use -> the method that implements
    # each. A release module that brings a new name extends its base's table
    # (`{**super().combination_rules(), "name": self._combination_name}`); one that changes how a
    # rule works overrides the method, which the table (bound to self) then reaches.
    def flag_rules(self) -> dict[str, FlagRuleFn]:
        return {}

    def sink_rules(self) -> dict[str, SinkRuleFn]:
        return {}

    def per_head_rules(self) -> dict[str, PerHeadRuleFn]:
        return {}

    def kv_rules(self) -> dict[str, KvRuleFn]:
        return {}

    def combination_rules(self) -> dict[str, CombinationRuleFn]:
        return {}

    def kernel_sizes_rules(self) -> dict[str, KernelSizesRuleFn]:
        return {}

    @cached_property
    def _tables(self) -> dict[str, Mapping[str, Callable[..., Any]]]:
        return {"flag": self.flag_rules(), "sink": self.sink_rules(), "per_head": self.per_head_rules(),
                "kv": self.kv_rules(), "combination": self.combination_rules(),
                "kernel_sizes": self.kernel_sizes_rules()}

    def _named(self, kind: str, table: Mapping[str, _Fn], rule: str | None) -> _Fn:
        method = table.get(rule) if rule is not None else None
        if method is None:
            raise ValueError(f"profile {self.profile.name}: no {kind} rule {rule!r} in {type(self).__module__}")
        return method

    def combination_rule(self, rule: str | None) -> CombinationRuleFn:
        """The `supports_combination` check the data names `rule` (e.g. "flashmla")."""
        return self._named("combination", self._tables["combination"], rule)

    def rule_names(self) -> dict[str, set[str]]:
        """Every rule name this release's code implements, by kind (what its data may name)."""
        return {kind: set(table) for kind, table in self._tables.items()}

    def supports_mm_prefix(self, spec: BackendSpec, ctx: SelectionContext) -> bool:
        return self.supports_flag(spec, "mm_prefix", ctx)

    def supports_flag(self, spec: BackendSpec, attr: str, ctx: SelectionContext) -> bool:
        rule = getattr(spec, attr)
        if isinstance(rule, bool):
            return rule
        return self._named("flag", self._tables["flag"], rule["rule"])(ctx)

    def supports_sink(self, spec: BackendSpec, ctx: SelectionContext) -> bool:
        rule = spec.sink
        if isinstance(rule, bool):
            return rule
        return self._named("sink", self._tables["sink"], rule["rule"])(rule, ctx)

    def supports_per_head_quant_scales(self, spec: BackendSpec, ctx: SelectionContext) -> bool:
        rule = spec.per_head_quant_scales
        if isinstance(rule, bool):
            return rule
        return self._named("per_head", self._tables["per_head"], rule["rule"])(rule, ctx)

    def supports_kv_cache_dtype(self, spec: BackendSpec, kv_cache_dtype: str | None, ctx: SelectionContext) -> bool:
        rule = spec.kv_cache_dtypes
        if isinstance(rule, dict):
            return self._named("kv", self._tables["kv"], rule["rule"])(rule, kv_cache_dtype, ctx)
        if kv_cache_dtype is None:
            return True
        return (not rule) or kv_cache_dtype in rule

    def combination_reason(self, spec: BackendSpec, inputs: SelectorInputs, ctx: SelectionContext) -> str | None:
        if spec.combination is None:
            return None
        return self.combination_rule(spec.combination)(inputs, ctx)

    def kernel_block_sizes_rule(self, spec: BackendSpec, ctx: SelectionContext, inputs: SelectorInputs | None) -> list[KernelBlockSize]:
        return self._named("kernel_sizes", self._tables["kernel_sizes"], spec.kernel_block_sizes_rule)(ctx, inputs)

    def composite_kernel_block_sizes(self, spec: BackendSpec, ctx: SelectionContext, inputs: SelectorInputs | None) -> list[KernelBlockSize]:
        raise ValueError(f"profile {self.profile.name} has no composite backends")

    def preferred_block_size_override(
        self, spec: BackendSpec, ctx: SelectionContext, inputs: SelectorInputs | None, default: int
    ) -> int | None:
        return None

    # --- FlashInfer's TRT-LLM path and artifactory (docs/vllm-rules.md §3a, §7) ------------------------
    def has_nvidia_artifactory(self, ctx: SelectionContext) -> bool:
        return bool(ctx.has_flashinfer_cubin)
