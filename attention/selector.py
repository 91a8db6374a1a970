"""vLLM's attention-backend selection, end to end, as pure functions over a rule profile.

Mirrors the seed-era flow (vllm-rules §5, seeds/000 cuda.py):
  check_if_supports_dtype (§5g) -> check_and_update_config/_update_block_size_for_backend (§5f)
  -> per-layer get_attn_backend_cls (§5c/§5d) -> KV layout (§5e).
`explain()` returns what vLLM would do: valid backends and reasons, the chosen backend, the KV
block size, the exact log lines and the exact error. Never imports torch.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from attnsel.attention.rules import (
    MultipleOf,
    RuleProfile,
    attn_type_str,
    kernel_sizes_repr,
)
from attnsel.errors import UserInputError

TORCH_DTYPES = ("float16", "bfloat16", "float32")
DTYPE_ALIASES = {
    "float16": "float16", "half": "float16", "fp16": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "float": "float32", "fp32": "float32", "f32": "float32",
}


def normalize_dtype(name: str, capability: Optional[tuple[int, int]] = None) -> str:
    """Map a user's dtype spelling to a torch dtype name; `auto` needs the capability.

    `auto` without a model resolves to the platform's first supported dtype (vllm-rules §6:
    bf16 on CC >= 8.0, fp16 on 6.x-7.x); with a model the config helper resolves it instead.
    """
    key = name.strip().lower().removeprefix("torch.")
    if key == "auto":
        if capability is None:
            raise UserInputError("--dtype auto needs a GPU capability (pass --gpu or --capability)")
        return "bfloat16" if tuple(capability) >= (8, 0) else "float16"
    if key not in DTYPE_ALIASES:
        raise UserInputError(
            f"Unknown dtype: {name!r}. Use one of float16 (half, fp16), bfloat16 (bf16), float32 (float, fp32), auto."
        )
    return DTYPE_ALIASES[key]


# Selector inputs that only some profiles have (vllm-rules §2 0.17.0, §9)
OPTIONAL_SELECTOR_FIELDS = (
    "use_per_head_quant_scales",
    "has_sliding_window",
    "use_non_causal",
    "use_batch_invariant",
    "use_kv_connector",
    "use_pcp",
    "use_adaptive_verification",
    "use_dcp",
    "use_rswa",
)


@dataclass(frozen=True)
class SelectorInputs:
    """vLLM's `AttentionSelectorConfig` (vllm-rules §2). `block_size` is the user's --block-size."""

    head_size: int
    dtype: str  # "float16" | "bfloat16" | "float32"
    kv_cache_dtype: Optional[str] = "auto"
    block_size: Optional[int] = None
    use_mla: bool = False
    has_sink: bool = False
    use_sparse: bool = False
    use_mm_prefix: bool = False
    attn_type: str = "decoder"  # decoder | encoder | encoder_only | encoder_decoder
    use_per_head_quant_scales: bool = False
    # vLLM 0.33 selector inputs (vllm-rules §9); ignored (with a note) by profiles without them
    has_sliding_window: bool = False
    use_non_causal: bool = False
    use_batch_invariant: bool = False
    use_kv_connector: bool = False
    use_pcp: bool = False
    use_adaptive_verification: bool = False
    use_dcp: bool = False
    use_rswa: bool = False

    def replace(self, **changes: Any) -> "SelectorInputs":
        return dataclasses.replace(self, **changes)

    def vllm_repr(self, profile: Optional[RuleProfile] = None) -> str:
        """`AttentionSelectorConfig.__repr__` exactly as vLLM prints it (f-string fields)."""
        if profile is None:
            from attnsel.attention.rules import get_profile

            profile = get_profile()
        values = {
            "head_size": str(self.head_size),
            "dtype": f"torch.{self.dtype}",
            "kv_cache_dtype": str(self.kv_cache_dtype),
            "block_size": str(self.block_size),
            "use_mla": str(self.use_mla),
            "has_sink": str(self.has_sink),
            "use_sparse": str(self.use_sparse),
            "use_mm_prefix": str(self.use_mm_prefix),
            "use_per_head_quant_scales": str(self.use_per_head_quant_scales),
            "attn_type": attn_type_str(self.attn_type),
        }
        for name in OPTIONAL_SELECTOR_FIELDS:
            values[name] = str(getattr(self, name))
        body = ", ".join(f"{name}={values[name]}" for name in profile.params["selector_fields"])
        return f"AttentionSelectorConfig({body})"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SelectionContext:
    """Everything besides the selector inputs that vLLM's rules read (documented defaults).

    - `num_heads`: attention heads per GPU (total // TP); orders the Blackwell MLA sparse pair.
    - `user_backend`: --attention-backend (enum name, any case).
    - `qk_nope_head_dim`: from the model's text config; None means absent, which vLLM reads as 1.
    - `has_index_topk`: the model config has `index_topk` (DeepSeek V3.2 sparse attention).
    - `use_trtllm_attention`: attention_config.use_trtllm_attention (None = not set).
    - `batch_invariant`: VLLM_BATCH_INVARIANT=1.
    - `has_flashinfer_cubin`: has_nvidia_artifactory() is True (flashinfer_cubin installed, or
      VLLM_HAS_FLASHINFER_CUBIN=1, or the artifactory reachable). Default True.
    - `flash_attn_version_override`: --attention-config.flash_attn_version (2/3, or 4 in 0.17).
    - `importable`: module name -> present. None (default): every package vLLM ships with is
      present on the target machine; missing keys also count as present.
    - `is_hybrid`, `mamba_cache_float32`: attention+Mamba models (block size managed elsewhere;
      FlashAttention kernel blocks [16, 32, 64] with float32 Mamba state).
    """

    capability: tuple[int, int]
    num_heads: Optional[int] = None
    user_backend: Optional[str] = None
    is_hybrid: bool = False
    is_attention_free: bool = False
    mamba_cache_float32: bool = False
    qk_nope_head_dim: Optional[int] = None
    has_index_topk: bool = False
    use_trtllm_attention: Optional[bool] = None
    batch_invariant: bool = False
    has_flashinfer_cubin: bool = True
    flash_attn_version_override: Optional[int] = None
    importable: Optional[Mapping[str, bool]] = None
    gpu_name: Optional[str] = None
    # 0.33 rules (vllm-rules §9): MLA dims for TOKENSPEED_MLA / sparse FlashInfer, the indexer
    # top-k for FLASH_ATTN_MLA_SPARSE_FA4, and the context-parallel sizes behind use_dcp/use_pcp.
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    kv_lora_rank: Optional[int] = None
    index_topk: Optional[int] = None
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    # KV heads per GPU (0.33 FlashInfer: GQA on CC 10.x with TRT-LLM allows kernel blocks up to
    # 1024); None = unknown, read as "not GQA"
    num_kv_heads: Optional[int] = None

    def module_present(self, module: str) -> bool:
        if self.importable is None:
            return True
        return bool(self.importable.get(module, True))

    @property
    def effective_qk_nope_head_dim(self) -> int:
        # getattr(hf_text_config, "qk_nope_head_dim", 1) in FlashInfer MLA (vllm-rules §3b)
        return 1 if self.qk_nope_head_dim is None else self.qk_nope_head_dim

    def replace(self, **changes: Any) -> "SelectionContext":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class BackendVerdict:
    name: str
    priority: Optional[int]  # index in vLLM's priority list; None when not in the list
    valid: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "priority": self.priority, "valid": self.valid, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class LogLine:
    level: str  # "debug" | "info" | "warning"
    message: str
    source: str  # where vLLM logs it

    def to_dict(self) -> dict:
        return {"level": self.level, "message": self.message, "source": self.source}


class VllmRaises(Exception):
    """What vLLM would raise; `message` is vLLM's text, `exc_type` its exception class."""

    def __init__(self, message: str, exc_type: str = "ValueError", phase: str = "config"):
        super().__init__(message)
        self.message = message
        self.exc_type = exc_type
        self.phase = phase


@dataclass(frozen=True)
class Explanation:
    profile: str
    vllm_version: str
    capability: tuple[int, int]
    gpu_name: Optional[str]
    inputs: SelectorInputs
    context: SelectionContext
    backends: tuple[BackendVerdict, ...]  # the priority list, evaluated on `inputs` as given
    explicit_backend: Optional[BackendVerdict]  # --attention-backend, evaluated on `inputs`
    selected: Optional[str]
    block_size: Optional[int]
    kernel_block_size: Optional[int]
    kernel_block_sizes: Optional[tuple[Any, ...]]
    kv_cache_layout: Optional[str]
    flash_attn_version: Optional[int]
    logs: tuple[LogLine, ...]
    error: Optional[str]
    error_type: Optional[str]
    error_phase: Optional[str]
    layer_config_repr: Optional[str]  # AttentionSelectorConfig the layers pass (final block size)
    notes: tuple[str, ...] = ()
    profile_note: Optional[str] = None
    profile_reason: Optional[str] = None  # which profile answered and why (set by the CLI)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else 1

    @property
    def warnings(self) -> list[str]:
        """Messages vLLM logs at INFO/WARNING level, in order (debug lines left out)."""
        return [line.message for line in self.logs if line.level != "debug"]

    @property
    def valid_backends(self) -> list[str]:
        return [b.name for b in self.backends if b.valid]

    @property
    def vllm_args(self) -> list[str]:
        if self.error is not None or self.selected is None:
            return []
        args = ["--attention-backend", self.selected]
        if self.block_size is not None:
            args += ["--block-size", str(self.block_size)]
        return args


# --- §5b / §5c ------------------------------------------------------------------------------------
def _unregistered_message(name: str) -> str:
    return (
        f"Backend {name} must be registered before use. "
        f"Use register_backend(Backend.{name}, 'your.module.YourClass')"
    )


def _check_explicit_backend_modelled(profile: RuleProfile, name: str) -> None:
    not_modelled = profile.data.get("not_modelled", {})
    if name in not_modelled:
        raise UserInputError(
            f"--attention-backend {name}: {not_modelled[name]}; profile {profile.name} does not model it on CUDA"
        )


def validate_backend(profile: RuleProfile, name: str, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
    """Reasons for one backend, including the enum members that are not real backend classes."""
    if name in profile.data.get("unregistered", []):
        # get_class() -> get_path() raises ValueError (not ImportError), so it propagates
        raise VllmRaises(_unregistered_message(name))
    if name in profile.data.get("missing_module", []):
        # the enum names a module that no wheel ships (vllm-rules §9 "Not CUDA" table)
        return [profile.code.import_failure_reason(profile.registry[name].rsplit(".", 1)[0])]
    _check_explicit_backend_modelled(profile, name)
    return profile.validate(name, inputs, ctx)


def get_valid_backends(
    profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext
) -> tuple[list[tuple[str, int]], dict[str, list[str]]]:
    """`CudaPlatformBase.get_valid_backends`: ([(name, priority)], {name: reasons})."""
    valid: list[tuple[str, int]] = []
    invalid: dict[str, list[str]] = {}
    for priority, name in enumerate(profile.priority_list(inputs, ctx)):
        reasons = profile.validate(name, inputs, ctx)
        if reasons:
            invalid[name] = reasons
        else:
            valid.append((name, priority))
    return valid, invalid


def reasons_str(invalid: Mapping[str, list[str]]) -> str:
    return ", ".join(f"{name}: [{', '.join(reasons)}]" for name, reasons in invalid.items())


def select_attention_backend(
    profile: RuleProfile,
    selected_backend: Optional[str],
    inputs: SelectorInputs,
    ctx: SelectionContext,
    raise_on_invalid: bool = True,
) -> Optional[str]:
    """`CudaPlatformBase.select_attention_backend` (vllm-rules §5c). Raises VllmRaises."""
    if selected_backend is not None:
        errors = validate_backend(profile, selected_backend, inputs, ctx)
        if errors:
            if raise_on_invalid:
                raise VllmRaises(
                    f"Selected backend AttentionBackendEnum.{selected_backend} is not valid for "
                    f"this configuration. Reason: {errors!r}"
                )
            return None
        return selected_backend
    valid, invalid = get_valid_backends(profile, inputs, ctx)
    if not valid:
        if raise_on_invalid:
            raise VllmRaises(
                f"No valid attention backend found for {profile.device_name} with "
                f"{inputs.vllm_repr(profile)}. Reasons: {{{reasons_str(invalid)}}}."
            )
        return None
    return min(valid, key=lambda item: item[1])[0]


# --- kernel block size (tune needs it) --------------------------------------------------------------
def kernel_block_size_for(
    profile: RuleProfile, backend: str, block_size: int, ctx: SelectionContext,
    inputs: Optional[SelectorInputs] = None,
) -> int:
    """The kernel block size vLLM's GPU runner uses for a framework block of `block_size`.

    vLLM's `select_common_block_size` (vllm/v1/worker/utils.py, called from
    `prepare_kernel_block_sizes` for the GPU model runner; one backend per KV-cache group here):
    the framework block size itself if the backend accepts it exactly (an int entry equal to it,
    or a MultipleOf it satisfies); otherwise the largest int kernel size that divides it. Each
    framework block is then split into block_size // kernel_block_size kernel blocks.
    """
    sizes = profile.kernel_block_sizes(backend, ctx, inputs)

    def accepted(size: int) -> bool:
        return any(
            (size % s.base == 0) if isinstance(s, MultipleOf) else (size == s) for s in sizes
        )

    if not sizes or accepted(block_size):
        return block_size
    for size in sorted({s for s in sizes if isinstance(s, int)}, reverse=True):
        if block_size % size == 0 and accepted(size):
            return size
    raise VllmRaises(f"No common block size for {block_size}. ", phase="kv_cache")


# --- input checks ---------------------------------------------------------------------------------
def check_inputs(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> None:
    """Bad input -> UserInputError (exit 2), with vLLM's own message where vLLM has one."""
    # attention-free models (Mamba) report head size 0 and still go through §5f (vllm-rules §5f step 3)
    smallest = 0 if ctx.is_attention_free else 1
    if not isinstance(inputs.head_size, int) or inputs.head_size < smallest:
        raise UserInputError(f"head size must be a positive integer, got {inputs.head_size!r}")
    if inputs.dtype not in TORCH_DTYPES:
        raise UserInputError(f"Unknown dtype: {inputs.dtype!r}")
    if inputs.kv_cache_dtype is not None and inputs.kv_cache_dtype not in profile.cache_dtypes:
        # selector.get_attn_backend's assert (vllm-rules §4)
        raise UserInputError(
            f"Invalid kv_cache_dtype: {inputs.kv_cache_dtype}. Valid values are: {tuple(profile.cache_dtypes)!r}"
        )
    if inputs.attn_type not in profile.attention_types:
        raise UserInputError(
            f"unknown attention type {inputs.attn_type!r}; use one of {', '.join(profile.attention_types)}"
        )
    if inputs.block_size is not None and (not isinstance(inputs.block_size, int) or inputs.block_size <= 0):
        raise UserInputError(f"block size must be a positive integer, got {inputs.block_size!r}")
    if inputs.use_per_head_quant_scales and not profile.has_selector_field("use_per_head_quant_scales"):
        raise UserInputError(f"profile {profile.name} has no per-head quant scales input")
    major, minor = ctx.capability
    if major < 1 or minor < 0:
        raise UserInputError(f"bad compute capability {major}.{minor}")
    if ctx.num_heads is not None and ctx.num_heads < 0:
        raise UserInputError(f"number of heads must not be negative, got {ctx.num_heads}")
    override = ctx.flash_attn_version_override
    allowed = (2, 3) if profile.params["flash_attn_version_rules"] == "0.16.0" else (2, 3, 4)
    if override is not None and override not in allowed:
        raise UserInputError(f"flash_attn_version must be one of {', '.join(map(str, allowed))}, got {override}")
    if ctx.user_backend is not None:
        profile.resolve_backend_name(ctx.user_backend)


# --- the whole flow -------------------------------------------------------------------------------
class _Run:
    """Collects the log lines of one simulated vLLM start-up."""

    def __init__(self, profile: RuleProfile, ctx: SelectionContext):
        self.profile = profile
        self.ctx = ctx
        self.logs: list[LogLine] = []
        self._once: set[str] = set()
        self.block_size: Optional[int] = None  # the KV block size as far as the flow got

    def log(self, level: str, message: str, source: str, once: bool = False) -> None:
        if once:
            if message in self._once:
                return
            self._once.add(message)
        self.logs.append(LogLine(level, message, source))


def _bf16_check(inputs: SelectorInputs, ctx: SelectionContext) -> None:
    # CudaPlatformBase.check_if_supports_dtype (vllm-rules §5g), run while the model config is built
    if inputs.dtype == "bfloat16" and tuple(ctx.capability) < (8, 0):
        gpu = ctx.gpu_name or "CUDA"
        raise VllmRaises(
            "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"Your {gpu} GPU has compute capability {ctx.capability[0]}.{ctx.capability[1]}. "
            "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
            "for example: --dtype=half.",
            phase="model_config",
        )


def _fa_warnings(run: _Run, inputs: SelectorInputs, user_backend: Optional[str]) -> None:
    """FA version warnings (warning_once) that validating FLASH_ATTN logs (vllm-rules §3c)."""
    profile, ctx = run.profile, run.ctx
    evaluates_fa = user_backend == "FLASH_ATTN" or (
        user_backend is None and "FLASH_ATTN" in profile.priority_list(inputs, ctx)
    )
    if evaluates_fa and profile.is_importable("FLASH_ATTN", ctx):
        for message in profile.code.flash_attn_version(ctx).warnings:
            run.log("warning", message, "fa_utils.get_flash_attn_version", once=True)


def _update_block_size_for_backend(
    run: _Run, inputs: SelectorInputs, user_backend: Optional[str]
) -> int:
    """Seed `_update_block_size_for_backend` (vllm-rules §5f). Returns the block size it leaves."""
    profile, ctx = run.profile, run.ctx
    default = profile.params["default_block_size"]
    user_block_size = inputs.block_size
    block_size = user_block_size if user_block_size is not None else default
    # the seed builds its own AttentionSelectorConfig: no sinks, decoder, no per-head scales
    cfg = inputs.replace(has_sink=False, attn_type="decoder", use_per_head_quant_scales=False)
    chosen = select_attention_backend(profile, user_backend, cfg, ctx, raise_on_invalid=False)
    if chosen is not None and user_block_size is not None and user_backend is None:
        optimal = select_attention_backend(profile, None, cfg.replace(block_size=None), ctx, raise_on_invalid=False)
        if optimal is not None and optimal != chosen:
            run.log(
                "warning",
                f"--block-size {block_size} is not supported by the preferred {optimal} backend. "
                f"Using {chosen} instead, which may result in reduced performance. Consider removing "
                "--block-size to auto-select the optimal block size.",
                "cuda.py _update_block_size_for_backend",
            )
    if chosen is not None:
        if user_block_size is not None or not profile.is_importable(chosen, ctx):
            return block_size
        preferred = profile.preferred_block_size(chosen, ctx, block_size)
        if preferred != block_size:
            run.log(
                "info",
                f"Setting kv cache block size to {preferred} for {chosen} backend.",
                "cuda.py _update_block_size_for_backend",
            )
        return preferred
    if user_block_size is None:
        return block_size  # deferred: get_attn_backend_cls raises with the full config
    if user_backend is not None:
        supported = (
            kernel_sizes_repr(profile.kernel_block_sizes(user_backend, ctx))
            if user_backend in profile.backend_names and profile.is_importable(user_backend, ctx)
            else "None"
        )
        raise VllmRaises(
            f"User-specified --block-size {block_size} is incompatible with the specified "
            f"--attention-backend {user_backend} (supported kernel block sizes: {supported}). "
            "Either remove --block-size to auto-select, or choose a compatible value."
        )
    _valid, invalid = get_valid_backends(profile, cfg, ctx)
    raise VllmRaises(
        f"No valid attention backend found for --block-size {block_size}. "
        f"Reasons: {{{reasons_str(invalid)}}}. Either remove --block-size to auto-select, "
        "or choose a compatible value."
    )


def _get_attn_backend_cls(run: _Run, cfg: SelectorInputs, user_backend: Optional[str]) -> str:
    """Seed `get_attn_backend_cls` + selector KV-layout step (vllm-rules §5d, §5e)."""
    profile, ctx = run.profile, run.ctx
    try:
        chosen = select_attention_backend(profile, user_backend, cfg, ctx, raise_on_invalid=True)
    except VllmRaises as exc:
        exc.phase = "layer"
        raise
    assert chosen is not None
    if user_backend is not None:
        run.log("info", f"Using AttentionBackendEnum.{chosen} backend.", "cuda.py get_attn_backend_cls")
    else:
        valid, invalid = get_valid_backends(profile, cfg, ctx)
        run.log(
            "debug",
            f"Some attention backends are not valid for {profile.device_name} with "
            f"{cfg.vllm_repr(profile)}. Reasons: {{{reasons_str(invalid)}}}.",
            "cuda.py get_attn_backend_cls",
        )
        names = tuple(name for name, _priority in valid)
        if profile.params.get("block_size_flow") == "0.33" and cfg.block_size is not None:
            _log_precluded_by_block_size(run, cfg, chosen, valid, invalid)
        if profile.params["selection_log_format"] == "tuple":
            message = f"Using {chosen} attention backend out of potential backends: {names!r}"
        else:  # v0.16.0/v0.17.0 releases print a list and a final period
            message = f"Using {chosen} attention backend out of potential backends: {list(names)!r}."
        run.log("info", message, "cuda.py get_attn_backend_cls", once=True)
    layout = profile.required_kv_cache_layout(chosen, ctx)
    if layout is not None:
        run.log("info", f"Using {layout} KV cache layout for {chosen} backend.", "selector.py _cached_get_attn_backend")
    return chosen


def _log_precluded_by_block_size(run: _Run, cfg: SelectorInputs, chosen: str, valid, invalid) -> None:
    """0.33 `get_attn_backend_cls`: higher-priority backends whose ONLY reason was the block size."""
    priorities = run.profile.priority_list(cfg, run.ctx)
    chosen_priority = dict(valid)[chosen]
    excluded = [
        name for name, reasons in invalid.items()
        if priorities.index(name) < chosen_priority and reasons == ["block_size not supported"]
    ]
    if excluded:
        run.log(
            "warning",
            f"--block-size {cfg.block_size} precluded higher-priority backend(s) {', '.join(excluded)}. "
            f"Using {chosen} instead, which may result in reduced performance. Consider removing "
            "--block-size to auto-select the optimal block size.",
            "cuda.py get_attn_backend_cls",
        )


# --- 0.33 block-size flow (vllm-rules §9 "Block-size flow") -----------------------------------------
def common_block_size(
    profile: RuleProfile, backends: list[str], ctx: SelectionContext, default: Optional[int] = None,
    inputs: Optional[SelectorInputs] = None,
) -> int:
    """`Platform.update_block_size_for_backend` (0.33): one block size every layer's backend accepts.

    One backend: its `get_preferred_block_size(16)`. Several: the smallest LCM of their kernel
    sizes that every backend accepts (starting from the LCM of their preferred sizes); none ->
    vLLM's "share no supported KV cache block size" ValueError.
    """
    default = profile.params["default_block_size"] if default is None else default
    names = list(dict.fromkeys(backends))
    if len(names) == 1:
        return profile.preferred_block_size(names[0], ctx, default, inputs)

    def accepted(size: int) -> bool:
        return all(profile.supports_block_size(name, size, ctx, inputs) for name in names)

    preferred_lcm = math.lcm(*(profile.preferred_block_size(name, ctx, default, inputs) for name in names))
    if accepted(preferred_lcm):
        return preferred_lcm
    choices = [
        [s.base if isinstance(s, MultipleOf) else s for s in profile.kernel_block_sizes(name, ctx, inputs)] or [default]
        for name in names
    ]
    candidates = sorted({math.lcm(*combo) for combo in itertools.product(*choices)})
    for size in candidates:
        if size >= default and accepted(size):
            return size
    listed = "; ".join(f"{name}: {kernel_sizes_repr(profile.kernel_block_sizes(name, ctx))}" for name in names)
    raise VllmRaises(f"The attention backends share no supported KV cache block size ({listed}).")


def aligned_block_size_error(
    profile: RuleProfile, backends: list[str], block_size: int, ctx: SelectionContext
) -> Optional[str]:
    """0.33: after aligning hybrid / heterogeneous-KV sizes, every backend must accept the size."""
    rejecting = [name for name in dict.fromkeys(backends) if not profile.supports_block_size(name, block_size, ctx)]
    if not rejecting:
        return None
    return f"Aligned KV cache block size {block_size} is not supported by attention backend(s): {', '.join(rejecting)}."


def _update_block_size_for_backend_033(run: _Run, inputs: SelectorInputs, backends: list[str]) -> int:
    """0.33: the user's --block-size is kept; otherwise one size for every layer backend."""
    if inputs.block_size is not None:
        return inputs.block_size  # cache_config.user_specified_block_size
    size = common_block_size(run.profile, backends, run.ctx, inputs=inputs)
    run.log(
        "info",
        f"Setting kv cache block size to {size} for {', '.join(dict.fromkeys(backends))} backend(s).",
        "interface.py Platform.update_block_size_for_backend",
    )
    return size


def backend_verdicts(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> tuple[BackendVerdict, ...]:
    """Every backend of vLLM's priority list with its reasons, for `inputs` exactly as given."""
    return tuple(
        BackendVerdict(name, priority, not reasons, tuple(reasons))
        for priority, name in enumerate(profile.priority_list(inputs, ctx))
        for reasons in [profile.validate(name, inputs, ctx)]
    )


def _explicit_verdict(
    profile: RuleProfile, name: str, inputs: SelectorInputs, ctx: SelectionContext
) -> Optional[BackendVerdict]:
    priorities = profile.priority_list(inputs, ctx)
    try:
        reasons = validate_backend(profile, name, inputs, ctx)
    except VllmRaises as exc:
        reasons = [exc.message]
    priority = priorities.index(name) if name in priorities else None
    return BackendVerdict(name, priority, not reasons, tuple(reasons))


_FIELD_WORDS = {
    "use_per_head_quant_scales": "per-head quant scales",
    "has_sliding_window": "sliding window",
    "use_non_causal": "non-causal attention",
    "use_batch_invariant": "batch invariance",
    "use_kv_connector": "KV connector",
    "use_pcp": "prefill context parallel (PCP)",
    "use_adaptive_verification": "adaptive verification",
    "use_dcp": "decode context parallel (DCP)",
    "use_rswa": "R-SWA",
}


def strip_unknown_inputs(profile: RuleProfile, inputs: SelectorInputs) -> tuple[SelectorInputs, list[str]]:
    """Inputs the profile's AttentionSelectorConfig does not have are ignored, with a note."""
    notes: list[str] = []
    changes: dict[str, bool] = {}
    for name in OPTIONAL_SELECTOR_FIELDS:
        if getattr(inputs, name) and not profile.has_selector_field(name):
            changes[name] = False
            notes.append(
                f"{_FIELD_WORDS[name]} ({name}) is not a selector input of vLLM {profile.vllm_version} "
                f"(profile {profile.name}): ignored"
            )
    return (inputs.replace(**changes) if changes else inputs), notes


def _flow_seed(
    run: _Run, inputs: SelectorInputs, user_backend: Optional[str], notes: list[str]
) -> tuple[Optional[int], Optional[str], Optional[SelectorInputs]]:
    """Seed (vllm-rules §5f then §5d): the block size is settled at config time, then the layers select."""
    block_size = inputs.block_size
    if run.ctx.is_hybrid:
        # cuda.py skips hybrid models: HybridAttentionMambaModelConfig sets their block size
        notes.append(
            "hybrid (attention + Mamba) model: vLLM sizes its KV block from the Mamba state "
            "(HybridAttentionMambaModelConfig); attnsel does not compute that size"
        )
    else:
        block_size = _update_block_size_for_backend(run, inputs, user_backend)
    run.block_size = block_size
    if run.ctx.is_attention_free:
        notes.append("attention-free model: no attention layer asks for a backend")
        return block_size, None, None
    layer_cfg = inputs.replace(block_size=block_size)
    return block_size, _get_attn_backend_cls(run, layer_cfg, user_backend), layer_cfg


def _flow_033(
    run: _Run, inputs: SelectorInputs, user_backend: Optional[str], notes: list[str]
) -> tuple[Optional[int], Optional[str], Optional[SelectorInputs]]:
    """0.33 (vllm-rules §9): each layer calls get_attn_backend_cls with block_size set only when
    the user gave --block-size; then update_block_size_for_backend picks one size."""
    if run.ctx.is_attention_free:
        notes.append("attention-free model: no attention layer asks for a backend")
        return inputs.block_size, None, None
    layer_cfg = inputs
    selected = _get_attn_backend_cls(run, layer_cfg, user_backend)
    if run.ctx.is_hybrid:
        notes.append(
            "hybrid (attention + Mamba) model: vLLM then aligns the block size with the Mamba state "
            "(update_block_size_for_backend); attnsel shows the attention backend's size only"
        )
    block_size = _update_block_size_for_backend_033(run, inputs, [selected])
    return block_size, selected, layer_cfg


def explain(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> Explanation:
    """What vLLM would do at start-up with these inputs on this GPU (vllm-rules §5)."""
    user_backend = profile.resolve_backend_name(ctx.user_backend) if ctx.user_backend else None
    inputs, notes = strip_unknown_inputs(profile, inputs)
    check_inputs(profile, inputs, ctx)
    if user_backend is not None:
        _check_explicit_backend_modelled(profile, user_backend)
    run = _Run(profile, ctx)
    run.block_size = inputs.block_size
    backends = backend_verdicts(profile, inputs, ctx)
    explicit = _explicit_verdict(profile, user_backend, inputs, ctx) if user_backend else None
    block_size: Optional[int] = inputs.block_size
    selected: Optional[str] = None
    layer_cfg: Optional[SelectorInputs] = None
    error: Optional[VllmRaises] = None
    try:
        _bf16_check(inputs, ctx)
        _fa_warnings(run, inputs, user_backend)
        if profile.params.get("block_size_flow") == "0.33":
            block_size, selected, layer_cfg = _flow_033(run, inputs, user_backend, notes)
        else:
            block_size, selected, layer_cfg = _flow_seed(run, inputs, user_backend, notes)
    except VllmRaises as exc:
        error = exc
        selected = None
        block_size = run.block_size
    kernel_block_size = None
    kernel_sizes = None
    layout = None
    if selected is not None:
        kernel_sizes = tuple(profile.kernel_block_sizes(selected, ctx, inputs))
        layout = profile.required_kv_cache_layout(selected, ctx)
        if block_size is not None:
            kernel_block_size = kernel_block_size_for(profile, selected, block_size, ctx, inputs)
        if selected == "FLASHINFER" and ctx.capability[0] == 10 and inputs.head_size == 256 and kernel_block_size == 16:
            notes.append(
                "vLLM then fails at run time: There is a bug in FlashInfer block_size 16 head size 256 "
                "support. Please avoid this combination by passing --block-size 32 or --block-size 64."
            )
    fa_runtime = profile.code.flash_attn_version(ctx, inputs.head_size, inputs)
    if selected == "FLASH_ATTN":
        # FlashAttentionImpl resolves the version again, now with the head size (vllm-rules §3c)
        for message in fa_runtime.warnings:
            run.log("warning", message, "fa_utils.get_flash_attn_version", once=True)
    return Explanation(
        profile=profile.name,
        vllm_version=profile.vllm_version,
        capability=tuple(ctx.capability),
        gpu_name=ctx.gpu_name,
        inputs=inputs,
        context=ctx,
        backends=backends,
        explicit_backend=explicit,
        selected=selected,
        block_size=block_size,
        kernel_block_size=kernel_block_size,
        kernel_block_sizes=kernel_sizes,
        kv_cache_layout=layout,
        flash_attn_version=None if inputs.use_mla else fa_runtime.version,
        logs=tuple(run.logs),
        error=error.message if error else None,
        error_type=error.exc_type if error else None,
        error_phase=error.phase if error else None,
        layer_config_repr=layer_cfg.vllm_repr(profile) if layer_cfg is not None else None,
        notes=tuple(notes),
    )


__all__ = [
    "BackendVerdict",
    "Explanation",
    "LogLine",
    "SelectionContext",
    "SelectorInputs",
    "VllmRaises",
    "aligned_block_size_error",
    "backend_verdicts",
    "check_inputs",
    "common_block_size",
    "strip_unknown_inputs",
    "explain",
    "get_valid_backends",
    "kernel_block_size_for",
    "normalize_dtype",
    "select_attention_backend",
    "validate_backend",
]
