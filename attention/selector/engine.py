"""vLLM's attention-backend selection, end to end, as pure functions over a version's rules.

Mirrors vLLM's start-up (docs/vllm-rules.md §5, §9): check_if_supports_dtype (§5g) -> the version's
block-size flow (attention/versions/block_size.py: config time §5f, or after the layers §9) ->
per-layer get_attn_backend_cls (§5c/§5d) -> KV layout (§5e). `explain()` returns what vLLM would
do: valid backends and reasons, the chosen backend, the KV block size, the exact log lines and the
exact error. What differs between vLLM versions is asked of the version object (`RuleProfile`).
Never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import (
    OPTIONAL_SELECTOR_FIELDS,
    TORCH_DTYPES,
    BackendVerdict,
    Explanation,
    LogLine,
    SelectionContext,
    SelectorInputs,
    VllmRaises,
    kernel_block_size_for,
    reasons_str,
)
from attnsel.attention.versions import RuleProfile
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.hybrid import HybridAnswer


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
        # the enum names a module that no wheel ships (docs/vllm-rules.md §9 "Not CUDA" table)
        return [profile.code.import_failure_reason((profile.registry[name] or "").rsplit(".", 1)[0])]
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


def select_attention_backend(
    profile: RuleProfile,
    selected_backend: str | None,
    inputs: SelectorInputs,
    ctx: SelectionContext,
    raise_on_invalid: bool = True,
) -> str | None:
    """`CudaPlatformBase.select_attention_backend` (docs/vllm-rules.md §5c). Raises VllmRaises."""
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
def backend_kernel_block_size(
    profile: RuleProfile, backend: str, block_size: int, ctx: SelectionContext,
    inputs: SelectorInputs | None = None,
) -> int:
    """The kernel block size vLLM's GPU runner uses with `backend` for a framework block of
    `block_size` (attention/rules/spec.py `kernel_block_size_for`); VllmRaises where vLLM does."""
    size = kernel_block_size_for(block_size, profile.kernel_block_sizes(backend, ctx, inputs))
    if size is None:
        raise VllmRaises(f"No common block size for {block_size}. ", phase="kv_cache")
    return size


# --- input checks ---------------------------------------------------------------------------------
def check_inputs(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> None:
    """Bad input -> UserInputError (exit 2), with vLLM's own message where vLLM has one."""
    # attention-free models (Mamba) report head size 0 and still go through §5f (docs/vllm-rules.md §5f step 3)
    smallest = 0 if ctx.is_attention_free else 1
    if not isinstance(inputs.head_size, int) or inputs.head_size < smallest:
        raise UserInputError(f"head size must be a positive integer, got {inputs.head_size!r}")
    if inputs.dtype not in TORCH_DTYPES:
        raise UserInputError(f"Unknown dtype: {inputs.dtype!r}")
    if inputs.kv_cache_dtype is not None and inputs.kv_cache_dtype not in profile.cache_dtypes:
        # selector.get_attn_backend's assert (docs/vllm-rules.md §4)
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
    allowed = profile.flash_attn_version_choices
    if override is not None and override not in allowed:
        raise UserInputError(f"flash_attn_version must be one of {', '.join(map(str, allowed))}, got {override}")
    if ctx.user_backend is not None:
        profile.resolve_backend_name(ctx.user_backend)


# --- the whole flow -------------------------------------------------------------------------------
class Run:
    """Collects the log lines of one simulated vLLM start-up."""

    def __init__(self, profile: RuleProfile, ctx: SelectionContext):
        self.profile = profile
        self.ctx = ctx
        self.logs: list[LogLine] = []
        self._once: set[str] = set()
        self.block_size: int | None = None  # the KV block size as far as the flow got
        self.hybrid: HybridAnswer | None = None  # once a hybrid model's block size is aligned

    def log(self, level: str, message: str, source: str, once: bool = False) -> None:
        if once:
            if message in self._once:
                return
            self._once.add(message)
        self.logs.append(LogLine(level, message, source))

    # What the release's block-size flow (attention/versions/block_size.py) calls back: the engine
    # hands itself to the flow, so the versions folder never imports the selector.
    def layer_backend(self, cfg: SelectorInputs, user_backend: str | None) -> str:
        """`get_attn_backend_cls` of one layer, logged into this run."""
        return get_attn_backend_cls(self, cfg, user_backend)

    def select(self, user_backend: str | None, cfg: SelectorInputs) -> str | None:
        """`select_attention_backend(..., raise_on_invalid=False)` with this run's profile and context."""
        return select_attention_backend(self.profile, user_backend, cfg, self.ctx, raise_on_invalid=False)

    def invalid_backends(self, cfg: SelectorInputs) -> dict[str, list[str]]:
        """The backends of the priority list `cfg` rules out, with their reasons."""
        return get_valid_backends(self.profile, cfg, self.ctx)[1]


def check_supports_dtype(inputs: SelectorInputs, ctx: SelectionContext) -> None:
    # CudaPlatformBase.check_if_supports_dtype (docs/vllm-rules.md §5g), run while the model config is built
    if inputs.dtype == "bfloat16" and tuple(ctx.capability) < (8, 0):
        gpu = ctx.gpu_name or "CUDA"
        raise VllmRaises(
            "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"Your {gpu} GPU has compute capability {ctx.capability[0]}.{ctx.capability[1]}. "
            "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
            "for example: --dtype=half.",
            phase="model_config",
        )


def _fa_warnings(run: Run, inputs: SelectorInputs, user_backend: str | None) -> None:
    """FA version warnings (warning_once) that validating FLASH_ATTN logs (docs/vllm-rules.md §3c)."""
    profile, ctx = run.profile, run.ctx
    evaluates_fa = user_backend == "FLASH_ATTN" or (
        user_backend is None and "FLASH_ATTN" in profile.priority_list(inputs, ctx)
    )
    if evaluates_fa and profile.is_importable("FLASH_ATTN", ctx):
        for message in profile.code.flash_attn_version(ctx).warnings:
            run.log("warning", message, "fa_utils.get_flash_attn_version", once=True)


def get_attn_backend_cls(run: Run, cfg: SelectorInputs, user_backend: str | None) -> str:
    """cuda.py `get_attn_backend_cls` + the selector's KV-layout step (docs/vllm-rules.md §5d, §5e, §9)."""
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
        profile.block_size_flow.after_layer_selection(run, cfg, chosen, valid, invalid)
        if profile.params["selection_log_format"] == "tuple":
            message = f"Using {chosen} attention backend out of potential backends: {names!r}"
        else:  # the releases print a list and a final period
            message = f"Using {chosen} attention backend out of potential backends: {list(names)!r}."
        run.log("info", message, "cuda.py get_attn_backend_cls", once=True)
    layout = profile.required_kv_cache_layout(chosen, ctx)
    if layout is not None:
        run.log("info", f"Using {layout} KV cache layout for {chosen} backend.", "selector.py _cached_get_attn_backend")
    return chosen


def backend_verdicts(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> tuple[BackendVerdict, ...]:
    """Every backend of vLLM's priority list with its reasons, for `inputs` exactly as given."""
    return tuple(
        BackendVerdict(name, priority, not reasons, tuple(reasons))
        for priority, name in enumerate(profile.priority_list(inputs, ctx))
        for reasons in [profile.validate(name, inputs, ctx)]
    )


def _explicit_verdict(
    profile: RuleProfile, name: str, inputs: SelectorInputs, ctx: SelectionContext
) -> BackendVerdict | None:
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


def explain(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> Explanation:
    """What vLLM would do at start-up with these inputs on this GPU (docs/vllm-rules.md §5)."""
    user_backend = profile.resolve_backend_name(ctx.user_backend) if ctx.user_backend else None
    inputs, notes = strip_unknown_inputs(profile, inputs)
    check_inputs(profile, inputs, ctx)
    if user_backend is not None:
        _check_explicit_backend_modelled(profile, user_backend)
    run = Run(profile, ctx)
    run.block_size = inputs.block_size
    evaluated = profile.block_size_flow.layer_inputs(inputs)
    backends = backend_verdicts(profile, evaluated, ctx)
    explicit = _explicit_verdict(profile, user_backend, evaluated, ctx) if user_backend else None
    block_size, selected, layer_cfg, error = _start_up(run, inputs, user_backend, notes)
    kernel_sizes, kernel_block_size, layout, kv_error = _kv_cache_split(run, inputs, selected, block_size, notes)
    error = kv_error if kv_error is not None else error
    fa_version = _runtime_flash_attn_version(run, inputs, selected)
    return Explanation(
        profile=profile.name,
        vllm_version=profile.vllm_version,
        capability=(ctx.capability[0], ctx.capability[1]),
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
        flash_attn_version=None if inputs.use_mla else fa_version,
        logs=tuple(run.logs),
        error=error.message if error else None,
        error_type=error.exc_type if error else None,
        error_phase=error.phase if error else None,
        layer_config_repr=layer_cfg.vllm_repr(profile) if layer_cfg is not None else None,
        notes=tuple(notes),
        hybrid=run.hybrid,
    )


def _start_up(
    run: Run, inputs: SelectorInputs, user_backend: str | None, notes: list[str]
) -> tuple[int | None, str | None, SelectorInputs | None, VllmRaises | None]:
    """(block size, selected, layer config, error): the flow up to the layers' choice; an error
    stops it with the block size as far as it got and nothing selected."""
    try:
        check_supports_dtype(inputs, run.ctx)
        _fa_warnings(run, inputs, user_backend)
        block_size, selected, layer_cfg = run.profile.block_size_flow.run(run, inputs, user_backend, notes)
    except VllmRaises as exc:
        return run.block_size, None, None, exc
    return block_size, selected, layer_cfg, None


def _kv_cache_split(
    run: Run, inputs: SelectorInputs, selected: str | None, block_size: int | None, notes: list[str]
) -> tuple[tuple | None, int | None, str | None, VllmRaises | None]:
    """(kernel block sizes, kernel block size, KV layout, error) of the selected backend."""
    # the KV cache is split with the model built: a bare shape's missing model config is there by now
    profile, ctx = run.profile, run.ctx.replace(model_dims_known=True)
    if selected is None:
        return None, None, None, None
    kernel_block_size, error = None, None
    kernel_sizes = tuple(profile.kernel_block_sizes(selected, ctx, inputs))
    layout = profile.required_kv_cache_layout(selected, ctx)
    if block_size is not None:
        try:
            kernel_block_size = backend_kernel_block_size(profile, selected, block_size, ctx, inputs)
        except VllmRaises as exc:  # the layers chose, then the KV cache cannot be split (select_common_block_size)
            error = exc
    if selected == "FLASHINFER" and ctx.capability[0] == 10 and inputs.head_size == 256 and kernel_block_size == 16:
        notes.append(
            "vLLM then fails at run time: There is a bug in FlashInfer block_size 16 head size 256 "
            "support. Please avoid this combination by passing --block-size 32 or --block-size 64."
        )
    return kernel_sizes, kernel_block_size, layout, error


def _runtime_flash_attn_version(run: Run, inputs: SelectorInputs, selected: str | None) -> int | None:
    fa_runtime = run.profile.code.flash_attn_version(run.ctx, inputs.head_size, inputs)
    if selected == "FLASH_ATTN":
        # FlashAttentionImpl resolves the version again, now with the head size (docs/vllm-rules.md §3c)
        for message in fa_runtime.warnings:
            run.log("warning", message, "fa_utils.get_flash_attn_version", once=True)
    return fa_runtime.version


__all__ = [
    "BackendVerdict",
    "Explanation",
    "LogLine",
    "Run",
    "SelectionContext",
    "SelectorInputs",
    "VllmRaises",
    "backend_kernel_block_size",
    "backend_verdicts",
    "check_inputs",
    "explain",
    "get_attn_backend_cls",
    "get_valid_backends",
    "select_attention_backend",
    "strip_unknown_inputs",
    "validate_backend",
]
