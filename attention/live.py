"""`explain --live`: ask the INSTALLED vLLM's own selector, and compare it with a rule profile.

Imported only under `--live` / `--compare-live` / `bench/tools/parity_live.py`: it imports vLLM (and so
torch). No GPU is needed: vLLM's CUDA platform takes the compute capability as an argument in
`get_valid_backends`, and backend classes validate from class attributes.

Two shapes of vLLM's API are handled, told apart by what the installed vLLM has (vllm-rules §5b/§5c,
§9; checked against the 0.17.0 ... 0.33.0 wheels):
- "pairs" (Feb 2026 main and releases up to 0.17): `get_valid_backends(device_capability, cfg,
  num_heads)` returning `([(enum, priority)], {enum: [reasons]})`, import failures as the literal
  "ImportError".
- "candidates" (0.18 on): no `select_attention_backend`; `get_valid_backends(device_capability,
  attn_selector_config, num_heads=None)` returns `([_BackendCandidate(backend_class, backend,
  priority)], {enum: (priority, [reasons])})`. The selection is the valid entry with the lowest
  priority (what `get_attn_backend_cls` does).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import importlib.util
import os
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from attnsel.attention.versions import choice
from attnsel.attention.rules.spec import DEFAULT_INDEX_TOPK, MODEL_HEADS_WHEN_UNKNOWN
from attnsel.errors import EnvironmentProblem, UserInputError

PAIRS_API = "pairs"
CANDIDATES_API = "candidates"
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
    api: str  # "pairs" | "candidates" (the shape of get_valid_backends' answer, see the docstring)
    backends: tuple[LiveVerdict, ...]  # the priority list, in order
    explicit_backend: Optional[LiveVerdict]
    selected: Optional[str]
    block_size: Optional[int]  # user's --block-size, else the selected backend's preferred size
    error: Optional[str]
    fields_passed: tuple[str, ...] = field(default_factory=tuple)
    config_repr: Optional[str] = None  # repr(AttentionSelectorConfig) as vLLM prints it in its messages

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
    version = choice.installed_vllm_version()
    if version is None:
        raise UserInputError(NOT_INSTALLED)
    return version


# --- talking to the installed vLLM ----------------------------------------------------------------
# vLLM's rules read more than the selector inputs: `current_platform` (the GPU's capability, in the
# FA-version, FlashMLA and TRT-LLM helpers), the current VllmConfig (FlashInfer sinks and block
# sizes, FA overrides, MLA dims; later releases raise "Current vLLM config is not set" without one) and
# VLLM_BATCH_INVARIANT. `_VllmRuntime` gives them what a real start-up on the TARGET GPU gives:
# a CUDA platform object reporting the target capability, and a config built from our inputs.
#
# `offline=True` (bench/tools/parity_live.py) additionally assumes what our default SelectionContext
# assumes, on a machine with no GPU driver: every package vLLM ships with is present. Compiled vLLM
# extensions that cannot even be loaded here (they link libcuda.so.1) are replaced by empty modules
# (nothing in the selection path calls into them; vLLM only imports them), and
# VLLM_HAS_FLASHINFER_CUBIN=1 (FlashInfer kernels usable without nvcc) and `has_nvidia_artifactory()`
# answers the case's `has_flashinfer_cubin` without its network probe (FLASHINFER_CUBINS_REPOSITORY
# points at a closed local port as well, so no request can leave the machine).

_OTHER_PLATFORMS = ("ROCM_", "CPU_", "AMX_", "XPU_")
# the model stand-in's head count when the context gives none (MHA: no GQA); the rules use the same
DEFAULT_NUM_HEADS = MODEL_HEADS_WHEN_UNKNOWN


def _compiled_extensions(package_dir: Path) -> list[tuple[str, Path]]:
    found = []
    for path in sorted(package_dir.rglob("*.so")):
        relative = path.relative_to(package_dir.parent)
        dotted = ".".join(relative.parts)[: -len(".so")]
        dotted = dotted.split(".abi3")[0].split(".cpython")[0]
        found.append((dotted, path))
    return found


def _stub_driverless_extensions() -> list[str]:
    """Empty modules for vLLM extensions that need the GPU driver just to load (offline only)."""
    import ctypes

    import torch  # noqa: F401  # loads libtorch*.so, which vLLM's extensions link against

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return []
    stubbed = []
    for dotted, path in _compiled_extensions(Path(list(spec.submodule_search_locations)[0])):
        if dotted in sys.modules:
            continue
        try:
            ctypes.CDLL(str(path))
        except OSError as exc:
            if "libcuda" not in str(exc):
                continue
            module = types.ModuleType(dotted)
            module.__attnsel_stub__ = True  # type: ignore[attr-defined]
            sys.modules[dotted] = module
            stubbed.append(dotted)
    return stubbed


class _VllmRuntime:
    """The installed vLLM's modules, with a CUDA platform that reports the target capability."""

    def __init__(self, offline: bool):
        self.offline = offline
        self.stubbed: list[str] = []
        if offline:
            os.environ["VLLM_HAS_FLASHINFER_CUBIN"] = "1"
            os.environ["FLASHINFER_CUBINS_REPOSITORY"] = "http://127.0.0.1:9/"
            self.stubbed = _stub_driverless_extensions()
        self.version = require_vllm()
        self.package = importlib.import_module("vllm")
        self.platforms = importlib.import_module("vllm.platforms")
        self.interface = importlib.import_module("vllm.platforms.interface")
        self.cuda = importlib.import_module("vllm.platforms.cuda")
        self.selector = importlib.import_module("vllm.v1.attention.selector")
        self.registry = importlib.import_module("vllm.v1.attention.backends.registry")
        try:
            config_pkg = importlib.import_module("vllm.config")
        except ImportError:  # test fakes have no config package
            config_pkg = None
        getter = getattr(config_pkg, "get_current_vllm_config", None)
        self.config_module = sys.modules[getter.__module__] if getter is not None else None
        self.attention_config_cls = getattr(config_pkg, "AttentionConfig", None)
        self.platform_cls = self._target_platform_class()
        # 0.18+ returns _BackendCandidate entries and "{ExcType}: {msg}" import reasons; older
        # code returns (enum, priority) pairs and the literal "ImportError"
        self.api = CANDIDATES_API if hasattr(self.cuda, "_BackendCandidate") else PAIRS_API
        self._artifactory = True
        if offline:
            self._preimport_backends()
            self._answer_artifactory_from_context()
        self._cache_key: Any = None
        self._caches: Optional[list[Any]] = None

    def _target_platform_class(self) -> Any:
        base = self.cuda.CudaPlatformBase

        class TargetCudaPlatform(base):  # type: ignore[misc, valid-type]
            target: Any = None
            target_name: str = "CUDA"

            @classmethod
            def get_device_capability(cls, device_id: int = 0) -> Any:
                return cls.target

            @classmethod
            def get_device_name(cls, device_id: int = 0) -> str:
                return cls.target_name

            @classmethod
            def num_compute_units(cls, device_id: int = 0) -> int:
                return 132  # read by module-level workspaces only (CUTLASS MLA); an H100's SM count

        instance = TargetCudaPlatform()
        previous = self.platforms.__dict__.get("_current_platform")
        self.platforms._current_platform = instance
        for module in list(sys.modules.values()):  # modules that bound the old object at import
            name = getattr(module, "__name__", "")
            if name.startswith("vllm") and previous is not None and getattr(module, "current_platform", None) is previous:
                module.current_platform = instance
        return TargetCudaPlatform

    def _answer_artifactory_from_context(self) -> None:
        """`has_nvidia_artifactory()` answers the case's `has_flashinfer_cubin` (default True), so its
        GET to FLASHINFER_CUBINS_REPOSITORY never runs (also where a module imported the name)."""

        def has_nvidia_artifactory() -> bool:
            return self._artifactory

        for name, module in list(sys.modules.items()):
            if name.startswith("vllm") and module is not None and hasattr(module, "has_nvidia_artifactory"):
                module.has_nvidia_artifactory = has_nvidia_artifactory

    def _preimport_backends(self) -> None:
        """Import the backend modules once with CUDA allocations sent to the meta device: some
        allocate a workspace at import time (cutlass_mla.py `SM100Workspace` in later releases, 0.17
        flashinfer_mla.py `g_fi_workspace`), which needs a driver.
        A module that still fails is left for vLLM's own import in get_class() to report."""
        import torch

        factories = {name: getattr(torch, name) for name in ("empty", "zeros")}

        def off_gpu(factory: Any) -> Any:
            def make(*args: Any, **kwargs: Any) -> Any:
                if str(kwargs.get("device", "")).startswith("cuda"):
                    kwargs["device"] = "meta"
                return factory(*args, **kwargs)

            return make

        for name, factory in factories.items():
            setattr(torch, name, off_gpu(factory))
        try:
            for member in self.registry.AttentionBackendEnum:
                path = member.value
                if not isinstance(path, str) or "." not in path or member.name.startswith(_OTHER_PLATFORMS):
                    continue
                try:
                    importlib.import_module(path.rsplit(".", 1)[0])
                except Exception:  # noqa: BLE001 -- reported by vLLM itself when selected
                    continue
        finally:
            for name, factory in factories.items():
                setattr(torch, name, factory)

    def capability(self, cc: tuple[int, int]) -> Any:
        return self.interface.DeviceCapability(*cc)

    def _all_caches(self) -> list[Any]:
        """functools caches in vLLM modules (e.g. supports_trtllm_attention) read the platform or
        the environment once; they are cleared whenever the target GPU or the env changes."""
        caches = []
        for name, module in list(sys.modules.items()):
            if not name.startswith("vllm") or module is None:
                continue
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper) and getattr(value, "__module__", None) == name:
                    caches.append(value)
        return caches

    @contextmanager
    def case(self, inputs: Any, ctx: Any):
        """The platform, environment and current VllmConfig of one selection."""
        self.platform_cls.target = self.capability(ctx.capability)
        self.platform_cls.target_name = ctx.gpu_name or "CUDA"
        saved_env = os.environ.get("VLLM_BATCH_INVARIANT")
        os.environ["VLLM_BATCH_INVARIANT"] = "1" if ctx.batch_invariant else "0"
        invariance = sys.modules.get("vllm.model_executor.layers.batch_invariant")
        if invariance is not None and hasattr(invariance, "VLLM_BATCH_INVARIANT"):
            invariance.VLLM_BATCH_INVARIANT = bool(ctx.batch_invariant)  # 0.17 read the env at import
        self._artifactory = bool(ctx.has_flashinfer_cubin)
        key = (tuple(ctx.capability), bool(ctx.batch_invariant), self._artifactory)
        if key != self._cache_key:
            # new backend modules get imported lazily, so collect again each time
            for cached in self._all_caches():
                cached.cache_clear()
            self._cache_key = key
        module = self.config_module
        saved_config = getattr(module, "_current_vllm_config", None)
        if module is not None:
            module._current_vllm_config = self._vllm_config(inputs, ctx)
        try:
            yield
        finally:
            if module is not None:
                module._current_vllm_config = saved_config
            if saved_env is None:
                os.environ.pop("VLLM_BATCH_INVARIANT", None)
            else:
                os.environ["VLLM_BATCH_INVARIANT"] = saved_env

    def _attention_config(self, inputs: Any, ctx: Any) -> Any:
        wanted = {
            "flash_attn_version": ctx.flash_attn_version_override,
            "use_trtllm_attention": ctx.use_trtllm_attention,
            "use_non_causal": bool(getattr(inputs, "use_non_causal", False)),
        }
        if self.attention_config_cls is None:
            return types.SimpleNamespace(**wanted)
        known = {f.name for f in dataclasses.fields(self.attention_config_cls)}
        return self.attention_config_cls(**{k: v for k, v in wanted.items() if k in known})

    def _vllm_config(self, inputs: Any, ctx: Any) -> Any:
        """A stand-in VllmConfig with what the backends' rules read, from our inputs."""
        text_config = types.SimpleNamespace()
        for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"):
            if getattr(ctx, name, None) is not None:
                setattr(text_config, name, getattr(ctx, name))
        if ctx.has_index_topk:
            text_config.index_topk = ctx.index_topk if ctx.index_topk is not None else DEFAULT_INDEX_TOPK
        heads = ctx.num_heads if ctx.num_heads is not None else DEFAULT_NUM_HEADS
        kv_heads = getattr(ctx, "num_kv_heads", None) or heads
        model = types.SimpleNamespace(
            get_head_size=lambda: inputs.head_size,
            get_num_attention_heads=lambda parallel_config=None: heads,
            get_num_kv_heads=lambda parallel_config=None: kv_heads,
            hf_text_config=text_config,
            hf_config=text_config,
            is_mm_prefix_lm=bool(inputs.use_mm_prefix),
            rswa_window=128 if getattr(inputs, "use_rswa", False) else None,
            is_diffusion=False,
            is_hybrid=bool(ctx.is_hybrid),
            use_mla=bool(inputs.use_mla),
            dtype=_torch_dtype(inputs.dtype),
            max_model_len=8192,
        )
        mamba_dtype = "float32" if ctx.mamba_cache_float32 else "auto"
        cache = types.SimpleNamespace(
            cache_dtype=inputs.kv_cache_dtype or "auto",
            block_size=inputs.block_size,
            user_specified_block_size=inputs.block_size is not None,
            mamba_ssm_cache_dtype=mamba_dtype,
            mamba_cache_dtype=mamba_dtype,
        )
        parallel = types.SimpleNamespace(
            decode_context_parallel_size=ctx.decode_context_parallel_size,
            prefill_context_parallel_size=ctx.prefill_context_parallel_size,
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            cp_kv_cache_interleave_size=1,
        )
        return types.SimpleNamespace(
            attention_config=self._attention_config(inputs, ctx),
            model_config=model,
            cache_config=cache,
            parallel_config=parallel,
            scheduler_config=types.SimpleNamespace(max_num_seqs=256, max_num_batched_tokens=8192),
            kv_transfer_config=None,
            speculative_config=None,
        )

    def selector_config(self, inputs: Any) -> Any:
        """vLLM's AttentionSelectorConfig from our inputs: only the fields this vLLM has."""
        config_cls = self.selector.AttentionSelectorConfig
        values = {name: getattr(inputs, name) for name in config_cls._fields if hasattr(inputs, name)}
        values["dtype"] = _torch_dtype(inputs.dtype)
        values["block_size"] = inputs.block_size
        attn_type_default = config_cls._field_defaults.get("attn_type")
        if "attn_type" in values and isinstance(attn_type_default, enum.Enum):
            values["attn_type"] = type(attn_type_default)(values["attn_type"])  # AttentionType member
        return config_cls(**values)


_RUNTIMES: dict[bool, _VllmRuntime] = {}


def vllm_runtime(offline: bool = False) -> _VllmRuntime:
    """One runtime per process and mode; rebuilt when the `vllm` package object changed (tests swap
    fake vLLM trees)."""
    runtime = _RUNTIMES.get(offline)
    if runtime is None or runtime.package is not sys.modules.get("vllm"):
        try:
            runtime = _RUNTIMES[offline] = _VllmRuntime(offline)
        except (ImportError, OSError) as exc:  # e.g. vllm._C needs libcuda.so.1 (no NVIDIA driver here)
            raise EnvironmentProblem(
                f"the installed vLLM cannot load its CUDA platform here ({type(exc).__name__}: {exc}); "
                "without a GPU driver run `python -m attnsel.bench.tools.parity_live`, which stands in for "
                "driver-only extensions"
            ) from exc
    return runtime


def _torch_dtype(name: str) -> Any:
    try:
        import torch
    except ImportError:  # a vLLM without torch cannot exist; fakes in tests may run without it
        return name
    return getattr(torch, name)


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


def _import_reason(exc: BaseException, api: str) -> str:
    # pairs API: the literal "ImportError"; candidates API: "{ExcType}: {message}" (vllm-rules §5b, §9)
    return "ImportError" if api == PAIRS_API else f"{type(exc).__name__}: {exc}"


def _explicit(runtime: _VllmRuntime, name: str, capability: Any, config: Any) -> LiveVerdict:
    enum_member = runtime.registry.AttentionBackendEnum[name.upper()]
    caught: tuple[type[BaseException], ...] = (ImportError,) if runtime.api == PAIRS_API else (ImportError, OSError)
    try:
        backend_class = enum_member.get_class()
        reasons = backend_class.validate_configuration(device_capability=capability, **config._asdict())
    except caught as exc:
        reasons = [_import_reason(exc, runtime.api)]
    return LiveVerdict(enum_member.name, None, not reasons, tuple(str(r) for r in reasons))


def _preferred_block_size(runtime: _VllmRuntime, name: str, default: int) -> Optional[int]:
    try:
        return int(runtime.registry.AttentionBackendEnum[name].get_class().get_preferred_block_size(default))
    except (ImportError, OSError, AttributeError):
        return None


def ask_vllm(inputs: Any, ctx: Any, offline: bool = False) -> LiveAnswer:
    """Run the installed vLLM's CUDA selector on `inputs` at `ctx.capability` (no GPU needed)."""
    runtime = vllm_runtime(offline)
    capability = runtime.capability(ctx.capability)
    config = runtime.selector_config(inputs)
    platform = runtime.cuda.CudaPlatformBase
    with runtime.case(inputs, ctx):
        dtype_failure = dtype_error(runtime, config)
        valid, invalid = platform.get_valid_backends(capability, config, ctx.num_heads)
        explicit = _explicit(runtime, ctx.user_backend, capability, config) if ctx.user_backend else None
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
        if unordered:  # pairs API: no priority on invalid entries; rebuild the order from the valid ones
            backends = _merge_pairs_order(backends, unordered, valid)
        selected, error = _selection(backends, explicit, config, platform)
        if dtype_failure is not None:  # vLLM stops while building the model config: nothing is selected
            selected, error = None, dtype_failure
        block_size = inputs.block_size
        if block_size is None and selected is not None:
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
        config_repr=repr(config),
    )


def dtype_error(runtime: _VllmRuntime, config: Any) -> Optional[str]:
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
    elif explanation.selected is not None and live.block_size is not None and explanation.block_size != live.block_size:
        # live.block_size is None where vLLM has no get_preferred_block_size (before 0.18)
        mismatches.append(Mismatch("block size", explanation.selected, explanation.block_size, live.block_size))
    return mismatches


__all__ = ["LiveAnswer", "LiveVerdict", "Mismatch", "NOT_INSTALLED", "ask_vllm", "compare", "require_vllm"]
