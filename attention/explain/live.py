"""`explain --live`: ask the INSTALLED vLLM's own selector, and compare it with a rule profile.

Imported only under `--live` / `--compare-live` / `bench/tools/parity_live.py`: it imports vLLM (and so
torch). No GPU is needed: vLLM's CUDA platform takes the compute capability as an argument in
`get_valid_backends`, and backend classes validate from class attributes.

Two shapes of vLLM's API are handled, told apart by what the installed vLLM has (docs/vllm-rules.md §5b/§5c,
§9; checked against the 0.17.0 ... 0.33.0 wheels):
- "pairs" (Feb 2026 main and releases up to 0.17): `get_valid_backends(device_capability, cfg,
  num_heads)` returning `([(enum, priority)], {enum: [reasons]})`, import failures as the literal
  "ImportError".
- "candidates" (0.18 on): no `select_attention_backend`; `get_valid_backends(device_capability,
  attn_selector_config, num_heads=None)` returns `([_BackendCandidate(backend_class, backend,
  priority)], {enum: (priority, [reasons])})`.

Where the installed vLLM has them, its own start-up functions are run on a stand-in VllmConfig:
`check_and_update_config` where the block size is settled at config time (it may force a backend
and a block size, docs/vllm-rules.md §5f), `get_attn_backend_cls` for the layers' choice (and the selector
config it really validates: 0.17 drops the block size there), and
`Platform.update_block_size_for_backend` with the backend the layers would report (0.18 on, §9;
a hybrid model's Mamba alignment is left out: phase 1 only).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnsel.attention.explain.live_runtime import (
    NOT_INSTALLED,
    PAIRS_API,
    VllmRuntime,
    require_vllm,
    vllm_runtime,
)

if TYPE_CHECKING:
    from attnsel.attention.explain.document import (
        LiveAnswerFields,
        LiveVerdictFields,
        MismatchFields,
    )


@dataclass(frozen=True)
class LiveVerdict:
    name: str
    priority: int | None
    valid: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> LiveVerdictFields:
        return {"name": self.name, "priority": self.priority, "valid": self.valid, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class LiveAnswer:
    """What the installed vLLM's selector answered."""

    vllm_version: str
    api: str  # "pairs" | "candidates" (the shape of get_valid_backends' answer, see the docstring)
    backends: tuple[LiveVerdict, ...]  # the priority list, in order
    explicit_backend: LiveVerdict | None
    selected: str | None
    block_size: int | None  # the KV block size vLLM's start-up ends with (phase 1 for hybrid models)
    error: str | None
    fields_passed: tuple[str, ...] = field(default_factory=tuple)
    config_repr: str | None = None  # repr(AttentionSelectorConfig) the layers validate with, as vLLM prints it
    forced_backend: str | None = None  # a backend vLLM's config-time code chose for the layers (§5f)

    @property
    def valid_backends(self) -> list[str]:
        return [b.name for b in self.backends if b.valid]

    def to_dict(self) -> LiveAnswerFields:
        return {
            "vllm_version": self.vllm_version,
            "api": self.api,
            "backends": [b.to_dict() for b in self.backends],
            "explicit_backend": self.explicit_backend.to_dict() if self.explicit_backend else None,
            "selected": self.selected,
            "block_size": self.block_size,
            "error": self.error,
            "forced_backend": self.forced_backend,
            "selector_fields": list(self.fields_passed),
        }


def _entry(item: Any) -> tuple[str, int]:
    """(name, priority) of a valid entry: a (enum, priority) tuple or a _BackendCandidate."""
    if hasattr(item, "backend") and hasattr(item, "priority"):
        return item.backend.name, int(item.priority)
    backend, priority = item
    return backend.name, int(priority)


def _invalid(value: Any) -> tuple[int | None, list[str]]:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], list):
        return int(value[0]), [str(r) for r in value[1]]
    return None, [str(r) for r in value]


def _import_reason(exc: BaseException, api: str) -> str:
    # pairs API: the literal "ImportError"; candidates API: "{ExcType}: {message}" (docs/vllm-rules.md §5b, §9)
    return "ImportError" if api == PAIRS_API else f"{type(exc).__name__}: {exc}"


def _explicit(runtime: VllmRuntime, name: str, capability: Any, config: Any) -> LiveVerdict:
    enum_member = runtime.registry.AttentionBackendEnum[name.upper()]
    caught: tuple[type[BaseException], ...] = (ImportError,) if runtime.api == PAIRS_API else (ImportError, OSError)
    try:
        backend_class = enum_member.get_class()
        reasons = backend_class.validate_configuration(device_capability=capability, **config._asdict())
    except caught as exc:
        reasons = [_import_reason(exc, runtime.api)]
    return LiveVerdict(enum_member.name, None, not reasons, tuple(str(r) for r in reasons))


def _preferred_block_size(runtime: VllmRuntime, name: str, default: int) -> int | None:
    try:
        return int(runtime.registry.AttentionBackendEnum[name].get_class().get_preferred_block_size(default))
    except (ImportError, OSError, AttributeError):
        return None


def _decides_block_size_at_config_time(platform: Any) -> bool:
    """Releases before 0.18 settle the block size in `check_and_update_config` (docs/vllm-rules.md §5f);
    later ones in `Platform.update_block_size_for_backend` after the layers chose (§9)."""
    return hasattr(platform, "check_and_update_config") and not hasattr(platform, "update_block_size_for_backend")


def _layer_config(runtime: VllmRuntime, platform: Any, config: Any, capability: Any, num_heads: Any) -> Any:
    """The AttentionSelectorConfig `get_attn_backend_cls` really validates with (it may drop the
    block size): asked of vLLM once per runtime by watching what it hands `get_valid_backends`."""
    if runtime.layer_drops_block_size is None:
        runtime.layer_drops_block_size = False
        if hasattr(platform, "get_attn_backend_cls"):
            seen: list[Any] = []
            original = platform.__dict__.get("get_valid_backends")

            def watch(cls: Any, device_capability: Any, attn_selector_config: Any, num_heads: Any = None) -> None:
                seen.append(attn_selector_config)
                raise _Seen()

            platform.get_valid_backends = classmethod(watch)
            try:
                platform.get_attn_backend_cls(None, config._replace(block_size=16), num_heads)
            except _Seen:
                runtime.layer_drops_block_size = seen[0].block_size is None
            finally:
                if original is None:
                    del platform.get_valid_backends
                else:
                    platform.get_valid_backends = original
    return config._replace(block_size=None) if runtime.layer_drops_block_size else config


class _Seen(Exception):
    pass


def _real_selection(runtime: VllmRuntime, platform: Any, backend: Any, config: Any,
                    num_heads: Any) -> tuple[str | None, str | None]:
    """vLLM's own `get_attn_backend_cls`: (selected enum name, None) or (None, its error)."""
    try:
        path = platform.get_attn_backend_cls(backend, config, num_heads)
    except ValueError as exc:
        return None, str(exc)
    by_path = {member.value: member.name for member in runtime.registry.AttentionBackendEnum}
    if path in by_path:
        return by_path[path], None
    for member in runtime.registry.AttentionBackendEnum:
        cls = member.get_class() if isinstance(member.value, str) and member.value else None
        if cls is not None and f"{cls.__module__}.{cls.__qualname__}" == path:
            return member.name, None
    return None, f"unknown backend path {path!r}"


def _block_size_after_layers(runtime: VllmRuntime, platform: Any, vllm_config: Any, selected: str) -> int | None:
    """`Platform.update_block_size_for_backend` with the selected backend as every layer's
    (`_find_non_ssm_backend(s)` reads the built model; here there is none). Phase 1 only: the
    stand-in model is not hybrid during the call."""
    backend_class = runtime.registry.AttentionBackendEnum[selected].get_class()
    finders = {"_find_non_ssm_backends": lambda cls, cfg: [backend_class], "_find_non_ssm_backend": lambda cls, cfg: backend_class}
    saved = {name: platform.__dict__.get(name) for name in finders}
    selection_model = vllm_config.model_config
    # bare shapes select with no model config (SelectionContext.model_dims_known); by the time vLLM
    # sizes the KV block it has built a model: the stand-in's heads, dtype and MLA flag
    vllm_config.model_config = getattr(vllm_config, "stand_in_model", None) or selection_model
    hybrid = vllm_config.model_config.is_hybrid
    for name, finder in finders.items():
        setattr(platform, name, classmethod(finder))
    vllm_config.model_config.is_hybrid = False
    # 0.18-0.19 ask the first attention layer of the built model instead (config/vllm.py
    # get_layers_from_vllm_config, imported when the method runs): one stand-in layer
    config_module: Any = sys.modules.get("vllm.config.vllm")  # vLLM's module, patched for the call
    saved_layers = getattr(config_module, "get_layers_from_vllm_config", None)
    if saved_layers is not None:
        layer = types.SimpleNamespace(get_attn_backend=lambda: backend_class)
        config_module.get_layers_from_vllm_config = lambda cfg, layer_type, names=None: {"layers.0.attn": layer}
    try:
        platform.update_block_size_for_backend(vllm_config)
    finally:
        if saved_layers is not None:
            config_module.get_layers_from_vllm_config = saved_layers
        vllm_config.model_config.is_hybrid = hybrid
        vllm_config.model_config = selection_model
        for name, value in saved.items():
            if value is None:
                delattr(platform, name)
            else:
                setattr(platform, name, value)
    return vllm_config.cache_config.block_size


def ask_vllm(inputs: Any, ctx: Any, offline: bool = False) -> LiveAnswer:
    """Run the installed vLLM's CUDA start-up on `inputs` at `ctx.capability` (no GPU needed)."""
    runtime = vllm_runtime(offline)
    capability = runtime.capability(ctx.capability)
    config = runtime.selector_config(inputs)
    platform = runtime.platform_cls
    with runtime.case(inputs, ctx) as vllm_config:
        dtype_failure = dtype_error(runtime, config)
        config_time = _decides_block_size_at_config_time(platform) and dtype_failure is None
        if config_time:
            platform.check_and_update_config(vllm_config)  # may force a backend and a block size (§5f)
        layer_config = _layer_config(runtime, platform, config, capability, ctx.num_heads)
        valid, invalid = platform.get_valid_backends(capability, layer_config, ctx.num_heads)
        explicit = _explicit(runtime, ctx.user_backend, capability, layer_config) if ctx.user_backend else None
        backends = _ordered_verdicts(valid, invalid)
        forced = getattr(vllm_config.attention_config, "backend", None) if config_time else None
        if hasattr(platform, "get_attn_backend_cls"):
            wanted = forced or (runtime.registry.AttentionBackendEnum[ctx.user_backend.upper()] if ctx.user_backend else None)
            selected, error = _real_selection(runtime, platform, wanted, config, ctx.num_heads)
        else:  # an API without it (test fakes): the lowest-priority valid entry, as it does
            selected, error = _selection(backends, explicit, config, platform)
        if dtype_failure is not None:  # vLLM stops while building the model config: nothing is selected
            selected, error = None, dtype_failure
        block_size = inputs.block_size
        if config_time:
            block_size = vllm_config.cache_config.block_size
        elif selected is not None and hasattr(platform, "update_block_size_for_backend"):
            block_size = _block_size_after_layers(runtime, platform, vllm_config, selected)
        elif block_size is None and selected is not None:
            block_size = _preferred_block_size(runtime, selected, 16)
    return LiveAnswer(
        vllm_version=runtime.version,
        api=runtime.api,
        backends=tuple(backends),
        explicit_backend=explicit,
        selected=selected,
        block_size=block_size,
        error=error,
        fields_passed=tuple(config._fields),
        config_repr=repr(layer_config),
        forced_backend=forced.name if forced is not None and not ctx.user_backend else None,
    )


def _ordered_verdicts(valid: Any, invalid: Any) -> list[LiveVerdict]:
    verdicts: dict[int, LiveVerdict] = {}
    for item in valid:
        name, priority = _entry(item)
        verdicts[priority] = LiveVerdict(name, priority, True, ())
    unordered: list[LiveVerdict] = []
    for backend, value in invalid.items():
        place, reasons = _invalid(value)
        verdict = LiveVerdict(backend.name, place, False, tuple(reasons))
        if place is None:
            unordered.append(verdict)
        else:
            verdicts[place] = verdict
    backends = [verdicts[p] for p in sorted(verdicts)]
    if unordered:  # pairs API: no priority on invalid entries; rebuild the order from the valid ones
        backends = _merge_pairs_order(backends, unordered, valid)
    return backends


def dtype_error(runtime: VllmRuntime, config: Any) -> str | None:
    """`check_if_supports_dtype` (bf16 needs CC >= 8.0), which vLLM runs before any selection."""
    check = getattr(runtime.platform_cls, "check_if_supports_dtype", None)
    if check is None:
        return None
    try:
        check(config.dtype)
    except ValueError as exc:
        return str(exc)
    return None


def _merge_pairs_order(valid: list[LiveVerdict], invalid: list[LiveVerdict], raw_valid: Any) -> list[LiveVerdict]:
    """The pairs API's `get_valid_backends` keeps invalid entries in priority order (dict insertion order) but
    without their index: interleave them into the gaps between the valid indices."""
    taken = {v.priority for v in valid}
    slots = iter(i for i in range(len(valid) + len(invalid)) if i not in taken)
    placed = [LiveVerdict(v.name, next(slots), v.valid, v.reasons) for v in invalid]
    return sorted(valid + placed, key=lambda v: v.priority or 0)  # every entry has its place now


def _selection(backends: list[LiveVerdict], explicit: LiveVerdict | None, config: Any,
               platform: Any) -> tuple[str | None, str | None]:
    if explicit is not None:
        if explicit.valid:
            return explicit.name, None
        return None, (
            f"Selected backend AttentionBackendEnum.{explicit.name} is not valid for this configuration. "
            f"Reason: {list(explicit.reasons)!r}"
        )
    valid = [b for b in backends if b.valid]
    if valid:
        return min(valid, key=lambda b: b.priority or 0).name, None  # a valid entry has its priority (_entry)
    reasons = ", ".join(f"{b.name}: [{', '.join(b.reasons)}]" for b in backends)
    return None, (
        f"No valid attention backend found for {getattr(platform, 'device_name', 'cuda')} with {config!r}. "
        f"Reasons: {{{reasons}}}."
    )


# --- comparison ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mismatch:
    what: str  # "priority list" | "backend" | "selected" | "block size" | "explicit backend"
    backend: str | None
    ours: Any
    live: Any

    def to_dict(self) -> MismatchFields:
        return {"what": self.what, "backend": self.backend, "ours": self.ours, "live": self.live}


def compare(explanation: Any, live: LiveAnswer) -> list[Mismatch]:
    """Where a profile's explanation and the live vLLM answer differ (empty: they agree)."""
    mismatches: list[Mismatch] = []
    ours_order = [b.name for b in explanation.backends]
    live_order = [b.name for b in live.backends]
    if ours_order != live_order:
        mismatches.append(Mismatch("priority list", None, ours_order, live_order))
    live_by_name = {b.name: b for b in live.backends}
    for verdict in explanation.backends:
        other = live_by_name.get(verdict.name)
        if other is None:
            continue
        if (verdict.valid, list(verdict.reasons)) != (other.valid, list(other.reasons)):
            mismatches.append(Mismatch("backend", verdict.name, list(verdict.reasons), list(other.reasons)))
    if explanation.explicit_backend is not None and live.explicit_backend is not None:
        ours, theirs = explanation.explicit_backend, live.explicit_backend
        if list(ours.reasons) != list(theirs.reasons):
            mismatches.append(Mismatch("explicit backend", ours.name, list(ours.reasons), list(theirs.reasons)))
    if explanation.selected != live.selected:
        mismatches.append(Mismatch("selected", None, explanation.selected, live.selected))
    elif explanation.selected is not None and live.block_size is not None and explanation.block_size != live.block_size:
        # live.block_size is None where vLLM has no get_preferred_block_size (before 0.18)
        mismatches.append(Mismatch("block size", explanation.selected, explanation.block_size, live.block_size))
    return mismatches


__all__ = ["NOT_INSTALLED", "LiveAnswer", "LiveVerdict", "Mismatch", "ask_vllm", "compare", "require_vllm"]
