"""`explain --live`: ask the INSTALLED vLLM's own selector, and compare it with a rule profile.

Imported only under `--live` / `--compare-live` / `bench/parity_live.py`: it imports vLLM (and so
torch). No GPU is needed: vLLM's CUDA platform takes the compute capability as an argument in
`get_valid_backends`, and backend classes validate from class attributes.

Two API eras are handled (vllm-rules §5b/§5c seed, §9 0.33; cuda.py of v0.27.1 read through the
code index):
- seed (Feb 2026 main): `CudaPlatformBase.select_attention_backend(selected_backend, cfg,
  device_capability, raise_on_invalid, num_heads)` and `get_valid_backends(device_capability,
  cfg, num_heads)` returning `([(enum, priority)], {enum: [reasons]})`.
- 0.18+ / 0.33: no `select_attention_backend`; `get_valid_backends(device_capability,
  attn_selector_config, num_heads=None)` returns `([_BackendCandidate(backend_class, backend,
  priority)], {enum: (priority, [reasons])})`. The selection is the valid entry with the lowest
  priority (what `get_attn_backend_cls` does).
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional

from attnsel.attention import rules
from attnsel.errors import UserInputError

NOT_INSTALLED = "--live needs vLLM installed in this Python environment (no 'vllm' distribution found)"


@dataclass(frozen=True)
class LiveVerdict:
    name: str
    priority: Optional[int]
    valid: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "priority": self.priority, "valid": self.valid, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class LiveAnswer:
    """What the installed vLLM's selector answered."""

    vllm_version: str
    api: str  # "seed" | "0.33"
    backends: tuple[LiveVerdict, ...]  # the priority list, in order
    explicit_backend: Optional[LiveVerdict]
    selected: Optional[str]
    block_size: Optional[int]  # user's --block-size, else the selected backend's preferred size
    error: Optional[str]
    fields_passed: tuple[str, ...] = field(default_factory=tuple)

    @property
    def valid_backends(self) -> list[str]:
        return [b.name for b in self.backends if b.valid]

    def to_dict(self) -> dict:
        return {
            "vllm_version": self.vllm_version,
            "api": self.api,
            "backends": [b.to_dict() for b in self.backends],
            "explicit_backend": self.explicit_backend.to_dict() if self.explicit_backend else None,
            "selected": self.selected,
            "block_size": self.block_size,
            "error": self.error,
            "selector_fields": list(self.fields_passed),
        }


def require_vllm() -> str:
    """The installed vLLM version, or bad input (exit 2) when there is none."""
    version = rules.installed_vllm_version()
    if version is None:
        raise UserInputError(NOT_INSTALLED)
    return version


def _torch_dtype(name: str) -> Any:
    try:
        import torch
    except ImportError:  # a vLLM without torch cannot exist; fakes in tests may run without it
        return name
    return getattr(torch, name)


def _selector_config(selector_module: Any, inputs: Any) -> Any:
    """vLLM's AttentionSelectorConfig from our inputs: only the fields this vLLM has."""
    config_cls = selector_module.AttentionSelectorConfig
    values = {name: getattr(inputs, name) for name in config_cls._fields if hasattr(inputs, name)}
    values["dtype"] = _torch_dtype(inputs.dtype)
    values["block_size"] = inputs.block_size
    return config_cls(**values)


def _entry(item: Any) -> tuple[str, int]:
    """(name, priority) of a valid entry: a (enum, priority) tuple or a _BackendCandidate."""
    if hasattr(item, "backend") and hasattr(item, "priority"):
        return item.backend.name, int(item.priority)
    backend, priority = item
    return backend.name, int(priority)


def _invalid(value: Any) -> tuple[Optional[int], list[str]]:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], list):
        return int(value[0]), [str(r) for r in value[1]]
    return None, [str(r) for r in value]


def _valid_backends(platform: Any, capability: Any, config: Any, num_heads: Optional[int]):
    try:
        return platform.get_valid_backends(capability, config, num_heads)
    except TypeError:
        return platform.get_valid_backends(capability, config)


def _import_reason(exc: BaseException, api: str) -> str:
    # seed: the literal "ImportError"; 0.33: "{ExcType}: {message}" (vllm-rules §5b, §9)
    return "ImportError" if api == "seed" else f"{type(exc).__name__}: {exc}"


def _explicit(registry: Any, name: str, capability: Any, config: Any, api: str) -> LiveVerdict:
    enum = registry.AttentionBackendEnum[name.upper()]
    try:
        backend_class = enum.get_class()
        reasons = backend_class.validate_configuration(device_capability=capability, **config._asdict())
    except (ImportError, OSError) as exc:
        reasons = [_import_reason(exc, api)]
    return LiveVerdict(enum.name, None, not reasons, tuple(str(r) for r in reasons))


def _preferred_block_size(registry: Any, name: str, default: int) -> Optional[int]:
    try:
        return int(registry.AttentionBackendEnum[name].get_class().get_preferred_block_size(default))
    except (ImportError, OSError, AttributeError):
        return None


def ask_vllm(inputs: Any, ctx: Any) -> LiveAnswer:
    """Run the installed vLLM's CUDA selector on `inputs` at `ctx.capability` (no GPU needed)."""
    version = require_vllm()
    cuda = importlib.import_module("vllm.platforms.cuda")
    interface = importlib.import_module("vllm.platforms.interface")
    selector = importlib.import_module("vllm.v1.attention.selector")
    registry = importlib.import_module("vllm.v1.attention.backends.registry")
    platform = getattr(cuda, "CudaPlatformBase", None) or cuda.CudaPlatform
    api = "seed" if hasattr(platform, "select_attention_backend") else "0.33"
    capability = interface.DeviceCapability(*ctx.capability)
    config = _selector_config(selector, inputs)
    with _target_capability(capability):
        valid, invalid = _valid_backends(platform, capability, config, ctx.num_heads)
        explicit = _explicit(registry, ctx.user_backend, capability, config, api) if ctx.user_backend else None
    verdicts: dict[int, LiveVerdict] = {}
    for item in valid:
        name, priority = _entry(item)
        verdicts[priority] = LiveVerdict(name, priority, True, ())
    unordered: list[LiveVerdict] = []
    for backend, value in invalid.items():
        priority, reasons = _invalid(value)
        verdict = LiveVerdict(backend.name, priority, False, tuple(reasons))
        if priority is None:
            unordered.append(verdict)
        else:
            verdicts[priority] = verdict
    backends = [verdicts[p] for p in sorted(verdicts)]
    if unordered:  # seed API: no priority on invalid entries; rebuild the order from the valid ones
        backends = _merge_seed_order(backends, unordered, valid)
    selected, error = _selection(backends, explicit, config, platform)
    block_size = inputs.block_size
    if block_size is None and selected is not None:
        block_size = _preferred_block_size(registry, selected, 16)
    return LiveAnswer(
        vllm_version=version,
        api=api,
        backends=tuple(backends),
        explicit_backend=explicit,
        selected=selected,
        block_size=block_size,
        error=error,
        fields_passed=tuple(config._fields),
    )


@contextmanager
def _target_capability(capability: Any):
    """Some `supports_*` helpers (FA version, FlashMLA, TRT-LLM) read `current_platform`'s own
    capability instead of the argument; make the platform report the target GPU meanwhile."""
    try:
        platforms = importlib.import_module("vllm.platforms")
        platform_cls = type(platforms.current_platform)
    except Exception:  # noqa: BLE001 -- no platform object (fakes, odd builds): nothing to patch
        yield
        return
    saved = platform_cls.__dict__.get("get_device_capability")
    platform_cls.get_device_capability = classmethod(lambda cls, device_id=0: capability)
    try:
        yield
    finally:
        if saved is None:
            del platform_cls.get_device_capability
        else:
            platform_cls.get_device_capability = saved


def _merge_seed_order(valid: list[LiveVerdict], invalid: list[LiveVerdict], raw_valid: Any) -> list[LiveVerdict]:
    """Seed `get_valid_backends` keeps invalid entries in priority order (dict insertion order) but
    without their index: interleave them into the gaps between the valid indices."""
    taken = {v.priority for v in valid}
    slots = iter(i for i in range(len(valid) + len(invalid)) if i not in taken)
    placed = [LiveVerdict(v.name, next(slots), v.valid, v.reasons) for v in invalid]
    return sorted(valid + placed, key=lambda v: v.priority)


def _selection(backends, explicit, config, platform) -> tuple[Optional[str], Optional[str]]:
    if explicit is not None:
        if explicit.valid:
            return explicit.name, None
        return None, (
            f"Selected backend AttentionBackendEnum.{explicit.name} is not valid for this configuration. "
            f"Reason: {list(explicit.reasons)!r}"
        )
    valid = [b for b in backends if b.valid]
    if valid:
        return min(valid, key=lambda b: b.priority).name, None
    reasons = ", ".join(f"{b.name}: [{', '.join(b.reasons)}]" for b in backends)
    return None, (
        f"No valid attention backend found for {getattr(platform, 'device_name', 'cuda')} with {config!r}. "
        f"Reasons: {{{reasons}}}."
    )


# --- comparison ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mismatch:
    what: str  # "priority list" | "backend" | "selected" | "block size" | "explicit backend"
    backend: Optional[str]
    ours: Any
    live: Any

    def to_dict(self) -> dict:
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
    elif explanation.selected is not None and explanation.block_size != live.block_size:
        mismatches.append(Mismatch("block size", explanation.selected, explanation.block_size, live.block_size))
    return mismatches


__all__ = ["LiveAnswer", "LiveVerdict", "Mismatch", "NOT_INSTALLED", "ask_vllm", "compare", "require_vllm"]
