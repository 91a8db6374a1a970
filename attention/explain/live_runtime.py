"""The installed vLLM, set up as a real start-up on a TARGET GPU would see it, for `explain --live`
and bench/tools/parity_live.py. Imports vLLM (and so torch) when used; no GPU is needed."""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnsel.attention.rules import DEFAULT_INDEX_TOPK, MODEL_HEADS_WHEN_UNKNOWN
from attnsel.attention.versions import choice
from attnsel.errors import EnvironmentProblem, UserInputError

PAIRS_API = "pairs"
CANDIDATES_API = "candidates"
NOT_INSTALLED = "--live needs vLLM installed in this Python environment (no 'vllm' distribution found)"


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
# VLLM_BATCH_INVARIANT. `VllmRuntime` gives them what a real start-up on the TARGET GPU gives:
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
    for dotted, path in _compiled_extensions(Path(next(iter(spec.submodule_search_locations)))):
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


class VllmRuntime:
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
        # vLLM's modules, patched for each case (vLLM has no type information here)
        self.platforms: Any = importlib.import_module("vllm.platforms")
        self.interface = importlib.import_module("vllm.platforms.interface")
        self.cuda = importlib.import_module("vllm.platforms.cuda")
        self.selector = importlib.import_module("vllm.v1.attention.selector")
        self.registry = importlib.import_module("vllm.v1.attention.backends.registry")
        try:
            config_pkg = importlib.import_module("vllm.config")
        except ImportError:  # test fakes have no config package
            config_pkg = None
        getter = getattr(config_pkg, "get_current_vllm_config", None)
        self.config_module: Any = sys.modules[getter.__module__] if getter is not None else None
        self.attention_config_cls = getattr(config_pkg, "AttentionConfig", None)
        self.platform_cls = self._target_platform_class()
        # 0.18+ returns _BackendCandidate entries and "{ExcType}: {msg}" import reasons; older
        # code returns (enum, priority) pairs and the literal "ImportError"
        self.api = CANDIDATES_API if hasattr(self.cuda, "_BackendCandidate") else PAIRS_API
        self._artifactory = True
        if offline:
            self._preimport_backends()
            self._answer_artifactory_from_context()
        # whether get_attn_backend_cls validates without the block size (found on first use)
        self.layer_drops_block_size: bool | None = None
        self._cache_key: Any = None
        self._caches: list[Any] | None = None

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
        module: Any
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

        module: Any
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
    def case(self, inputs: Any, ctx: Any) -> Iterator[Any]:
        """The platform, environment and current VllmConfig of one selection."""
        self.platform_cls.target = self.capability(ctx.capability)
        self.platform_cls.target_name = ctx.gpu_name or "CUDA"
        saved_env = os.environ.get("VLLM_BATCH_INVARIANT")
        os.environ["VLLM_BATCH_INVARIANT"] = "1" if ctx.batch_invariant else "0"
        invariance: Any = sys.modules.get("vllm.model_executor.layers.batch_invariant")
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
        vllm_config = self._vllm_config(inputs, ctx)
        if module is not None:
            module._current_vllm_config = vllm_config
        try:
            yield vllm_config
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
            # --attention-backend, which vLLM's config-time code reads (and may set: docs/vllm-rules.md §5f)
            "backend": self.registry.AttentionBackendEnum[ctx.user_backend.upper()] if ctx.user_backend else None,
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
            is_mm_prefix_lm_model=bool(inputs.use_mm_prefix),
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
            kv_cache_dtype_skip_layers=[],
        )
        parallel = types.SimpleNamespace(
            decode_context_parallel_size=ctx.decode_context_parallel_size,
            prefill_context_parallel_size=ctx.prefill_context_parallel_size,
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            cp_kv_cache_interleave_size=1,
            worker_cls="auto",
        )
        return types.SimpleNamespace(
            stand_in_model=model,  # for the block-size step, which runs with a built model in vLLM
            attention_config=self._attention_config(inputs, ctx),
            # bare shapes with no model dimension given: vLLM with no model config skips every check
            # that reads hf_text_config (SelectionContext.model_dims_known)
            model_config=model if getattr(ctx, "model_dims_known", True) else None,
            cache_config=cache,
            parallel_config=parallel,
            scheduler_config=types.SimpleNamespace(max_num_seqs=256, max_num_batched_tokens=8192,
                                                   is_multimodal_model=False, disable_chunked_mm_input=False),
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


_RUNTIMES: dict[bool, VllmRuntime] = {}


def vllm_runtime(offline: bool = False) -> VllmRuntime:
    """One runtime per process and mode; rebuilt when the `vllm` package object changed (tests swap
    fake vLLM trees)."""
    runtime = _RUNTIMES.get(offline)
    if runtime is None or runtime.package is not sys.modules.get("vllm"):
        try:
            runtime = _RUNTIMES[offline] = VllmRuntime(offline)
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
