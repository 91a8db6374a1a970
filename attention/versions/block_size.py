"""How a vLLM version settles the KV-cache block size around the layers' backend choice: a strategy
object per start-up path, named by the version's data (`"block_size_flow": {"kind": ...}`).

- `config_time` (docs/vllm-rules.md §5f, Feb 2026 main): cuda.py `check_and_update_config` ->
  `_update_block_size_for_backend` picks the block size first, then the layers select with it.
- `layer_backends` (docs/vllm-rules.md §9): the layers select first (with the user's --block-size only),
  then `Platform.update_block_size_for_backend` picks one size their backends accept.
- `release_0_17` (the 0.17.0 release, vllm/platforms/cuda.py:168-279 @ v0.17.0): `check_and_update_config`
  sets the block size (16, a hybrid model's aligned size, or the MLA kernel's it forces; on 10.x it
  also forces FLASHINFER_MLA), then every layer selects with block_size=None (cuda.py:351).

A release with a new path adds a flow class here (or in its own module) and names it in its data.
Hybrid attention + Mamba models plug in through `hybrid_block_size`, which sees the selected
backends and the attention block size and returns the size vLLM ends with.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any, Protocol

from attnsel.attention.rules import (
    MultipleOf,
    SelectionContext,
    SelectorInputs,
    VllmRaises,
    kernel_sizes_repr,
    reasons_str,
)

if TYPE_CHECKING:
    from attnsel.attention.hybrid import HybridAnswer
    from attnsel.attention.versions.profile import RuleProfile

FlowResult = tuple[int | None, str | None, SelectorInputs | None]  # block size, backend, layer config


class Run(Protocol):
    """One simulated start-up as a flow sees it: the selector's run (attention/selector/engine.py `Run`)
    hands itself in, with the selector's steps as methods, so this folder never imports the selector."""

    profile: RuleProfile
    ctx: SelectionContext
    block_size: int | None
    hybrid: HybridAnswer | None

    def log(self, level: str, message: str, source: str, once: bool = False) -> None: ...

    def layer_backend(self, cfg: SelectorInputs, user_backend: str | None) -> str:
        """`get_attn_backend_cls` of one layer."""
        ...

    def select(self, user_backend: str | None, cfg: SelectorInputs) -> str | None:
        """`select_attention_backend` without raising (None where no backend is valid)."""
        ...

    def invalid_backends(self, cfg: SelectorInputs) -> dict[str, list[str]]:
        """The backends of the priority list `cfg` rules out, with their reasons."""
        ...


class BlockSizeFlow:
    """One start-up path. `run` returns (block size, selected backend, the layers' selector config)."""

    kind = ""
    hybrid_note = "hybrid (attention + Mamba) model: attnsel does not compute vLLM's block size without its config"

    def __init__(self, **params: Any):
        self.params = params

    def run(self, run: Run, inputs: SelectorInputs, user_backend: str | None, notes: list[str]) -> FlowResult:
        raise NotImplementedError

    def layer_inputs(self, inputs: SelectorInputs) -> SelectorInputs:
        """The selector inputs vLLM validates the priority list with (what `explain` shows)."""
        return inputs

    def after_layer_selection(self, run: Run, cfg: SelectorInputs, chosen: str, valid: list[tuple[str, int]], invalid: dict[str, list[str]]) -> None:
        """Log lines `get_attn_backend_cls` adds once a layer picked `chosen` (none by default)."""

    def hybrid_block_size(
        self, run: Run, inputs: SelectorInputs, backends: list[str], block_size: int | None, notes: list[str]
    ) -> int | None:
        """The block size of an attention + Mamba model: the attention page made at least one Mamba
        state page (attention/hybrid/pages.py, the version data's `hybrid` rules). Without a state
        layout (flags only, or a model type attnsel has no shape formula for) the size stays, with a note."""
        if run.ctx.hybrid is None or "hybrid" not in run.profile.data:
            notes.append(self.hybrid_note)
            return block_size
        # deferred: the hybrid modules (~3 ms of dataclasses) load only for a hybrid model, off the
        # start-up path of every other `attnsel explain`
        from attnsel.attention.hybrid import SOURCE, align_hybrid_block_size

        lines: list[tuple[str, str]] = []
        try:
            answer = align_hybrid_block_size(run.profile, run.ctx, inputs, backends, block_size, lines)
        finally:
            for level, message in lines:
                run.log(level, message, SOURCE if "size" in message else "models/config.py MambaModelConfig")
        run.hybrid = answer
        run.block_size = answer.block_size
        if run.profile.data["hybrid"].get("check_aligned_block_size") and answer.block_size != block_size and backends:
            error = aligned_block_size_error(run.profile, backends, answer.block_size, run.ctx)
            if error is not None:
                raise VllmRaises(error)  # 0.33 Platform._check_aligned_block_size
        return answer.block_size

    @staticmethod
    def attention_free(run: Run, inputs: SelectorInputs, block_size: int | None, notes: list[str]) -> FlowResult:
        notes.append("attention-free model: no attention layer asks for a backend")
        return block_size, None, None


class ConfigTimeFlow(BlockSizeFlow):
    """docs/vllm-rules.md §5f then §5d: the block size is settled at config time, then the layers select.
    Hybrid models are skipped there (HybridAttentionMambaModelConfig sets their block size)."""

    kind = "config_time"
    hybrid_note = (
        "hybrid (attention + Mamba) model: vLLM sizes its KV block from the Mamba state "
        "(HybridAttentionMambaModelConfig); attnsel does not compute that size without the model's config"
    )

    def run(self, run: Run, inputs: SelectorInputs, user_backend: str | None, notes: list[str]) -> FlowResult:
        if run.ctx.is_hybrid:
            block_size = self.hybrid_block_size(run, inputs, [], inputs.block_size, notes)
        else:
            block_size = update_block_size_for_backend_at_config_time(run, inputs, user_backend)
        run.block_size = block_size
        if run.ctx.is_attention_free:
            return self.attention_free(run, inputs, block_size, notes)
        layer_cfg = inputs.replace(block_size=block_size)
        return block_size, run.layer_backend(layer_cfg, user_backend), layer_cfg


class LayerBackendsFlow(BlockSizeFlow):
    """docs/vllm-rules.md §9: each layer calls get_attn_backend_cls with block_size set only when the user
    gave --block-size; then update_block_size_for_backend picks one size. Params:
    `log_precluded_by_block_size` (the warning about higher-priority backends --block-size excluded),
    `log_format` (the "Setting kv cache block size" line, with {size} and {backends})."""

    kind = "layer_backends"
    hybrid_note = (
        "hybrid (attention + Mamba) model: vLLM then aligns the block size with the Mamba state "
        "(update_block_size_for_backend); without the model's config attnsel shows the attention backend's size only"
    )

    def run(self, run: Run, inputs: SelectorInputs, user_backend: str | None, notes: list[str]) -> FlowResult:
        if run.ctx.is_attention_free:
            return self.attention_free(run, inputs, inputs.block_size, notes)
        selected = run.layer_backend(inputs, user_backend)
        if run.ctx.is_hybrid and run.profile.data.get("hybrid", {}).get("align") == "config_time":
            # 0.18-0.19: HybridAttentionMambaModelConfig sized the block at config time from --block-size
            # or the default; update_block_size_for_backend leaves a hybrid model's backends out
            # (interface.py), and the KV-cache groups run with the aligned size (engine/core.py)
            block_size = inputs.block_size or run.profile.params["default_block_size"]
            return self.hybrid_block_size(run, inputs, [selected], block_size, notes), selected, inputs
        log_format = self.params.get("log_format", "Setting kv cache block size to {size} for {backends} backend(s).")
        block_size = update_block_size_after_layers(run, inputs, [selected], log_format)
        if run.ctx.is_hybrid:
            block_size = self.hybrid_block_size(run, inputs, [selected], block_size, notes)
        return block_size, selected, inputs

    def after_layer_selection(self, run: Run, cfg: SelectorInputs, chosen: str, valid: list[tuple[str, int]], invalid: dict[str, list[str]]) -> None:
        if self.params.get("log_precluded_by_block_size") and cfg.block_size is not None:
            log_precluded_by_block_size(run, cfg, chosen, valid, invalid)


class Release017Flow(ConfigTimeFlow):
    """0.17.0's start-up: the block size at config time (16, a hybrid model's aligned size, or an MLA
    kernel's), then the layers select without it."""

    kind = "release_0_17"
    hybrid_note = (
        "hybrid (attention + Mamba) model: vLLM sizes its KV block from the Mamba state "
        "(HybridAttentionMambaModelConfig); without the model's config attnsel shows 0.17's default, 16"
    )

    def layer_inputs(self, inputs: SelectorInputs) -> SelectorInputs:
        return inputs.replace(block_size=None)  # cuda.py:351 get_attn_backend_cls

    def run(self, run: Run, inputs: SelectorInputs, user_backend: str | None, notes: list[str]) -> FlowResult:
        block_size = inputs.block_size
        if run.ctx.is_hybrid:
            block_size = self.hybrid_block_size(run, inputs, [], block_size, notes)
        if block_size is None:
            block_size = run.profile.params["default_block_size"]  # cuda.py:178-179
        backend = user_backend
        if inputs.use_mla and run.ctx.model_dims_known:  # `model_config is not None and model_config.use_mla`
            block_size, backend = mla_block_size_and_backend(run, inputs, user_backend, block_size)
        run.block_size = block_size
        if run.ctx.is_attention_free:
            return self.attention_free(run, inputs, block_size, notes)
        layer_cfg = self.layer_inputs(inputs)
        return block_size, run.layer_backend(layer_cfg, backend), layer_cfg


CUDA_PY_0_17 = "cuda.py check_and_update_config"


def mla_block_size_and_backend(
    run: Run, inputs: SelectorInputs, user_backend: str | None, block_size: int
) -> tuple[int, str | None]:
    """cuda.py:186-279, step by step: the MLA kernel the start-up expects and the block size it forces
    for it; on 10.x with qk_nope_head_dim 128 (and no index_topk) FLASHINFER_MLA becomes the backend."""
    ctx = run.ctx
    sparse = ctx.has_index_topk  # hasattr(hf_config, "index_topk")
    blackwell = ctx.capability[0] == 10  # is_device_capability_family(100)
    # v1/attention/ops/flashmla.py is_flashmla_dense_supported: the FLASHMLA combination rule, dense
    flashmla_rule = run.profile.code.combination_rule("flashmla")
    dense_flashmla = flashmla_rule(inputs.replace(use_sparse=False), ctx) is None
    backend = user_backend
    if user_backend is None:
        if blackwell and not sparse and ctx.effective_qk_nope_head_dim == 128:
            backend = "FLASHINFER_MLA"  # set in attention_config: the layers select it explicitly
            expected = {"FLASHINFER_MLA"}
        elif blackwell and not sparse:
            expected = {"CUTLASS_MLA"}
        else:
            expected = {"FLASHMLA"} if dense_flashmla else set()
    else:
        expected = {user_backend}
    size = block_size

    def force(to: int, kernel: str) -> None:
        nonlocal size
        size = to
        run.log("info", f"Forcing kv cache block size to {to} for {kernel} backend.", CUDA_PY_0_17)

    if "FLASHMLA" in expected and dense_flashmla and size % 64:
        force(64, "FlashMLA")
    if "CUTLASS_MLA" in expected and size % 128:
        force(128, "CUTLASS_MLA")
    if "FLASHINFER_MLA" in expected and size != 32 and size % 64:
        force(64, "FlashInferMLA")
    if sparse:
        if not expected & {"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"}:
            expected.add("FLASHMLA_SPARSE")
        if "FLASHMLA_SPARSE" in expected and size != 64:
            force(64, "FlashMLASparse")
        elif "FLASHINFER_MLA_SPARSE" in expected and size not in (32, 64):
            force(64, "FlashInferMLASparse")
    return size, backend


FLOWS: dict[str, type[BlockSizeFlow]] = {flow.kind: flow for flow in (ConfigTimeFlow, LayerBackendsFlow, Release017Flow)}


def flow_from_data(data: dict) -> BlockSizeFlow:
    """The flow a version's data names: {"kind": ..., other keys are the flow's parameters}."""
    params = {k: v for k, v in data.items() if k != "kind" and not k.startswith("_")}
    return FLOWS[data["kind"]](**params)


def update_block_size_for_backend_at_config_time(
    run: Run, inputs: SelectorInputs, user_backend: str | None
) -> int:
    """cuda.py `_update_block_size_for_backend` (docs/vllm-rules.md §5f). Returns the block size it leaves."""
    profile, ctx = run.profile, run.ctx
    default = profile.params["default_block_size"]
    user_block_size = inputs.block_size
    block_size = user_block_size if user_block_size is not None else default
    # it builds its own AttentionSelectorConfig: no sinks, decoder, no per-head scales
    cfg = inputs.replace(has_sink=False, attn_type="decoder", use_per_head_quant_scales=False)
    chosen = run.select(user_backend, cfg)
    if chosen is not None and user_block_size is not None and user_backend is None:
        optimal = run.select(None, cfg.replace(block_size=None))
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
    invalid = run.invalid_backends(cfg)
    raise VllmRaises(
        f"No valid attention backend found for --block-size {block_size}. "
        f"Reasons: {{{reasons_str(invalid)}}}. Either remove --block-size to auto-select, "
        "or choose a compatible value."
    )


def log_precluded_by_block_size(run: Run, cfg: SelectorInputs, chosen: str, valid: list[tuple[str, int]], invalid: dict[str, list[str]]) -> None:
    """`get_attn_backend_cls` (docs/vllm-rules.md §9): higher-priority backends whose ONLY reason was the block size."""
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


def common_block_size(
    profile: RuleProfile, backends: list[str], ctx: SelectionContext, default: int | None = None,
    inputs: SelectorInputs | None = None,
) -> int:
    """`Platform.update_block_size_for_backend` (docs/vllm-rules.md §9): one block size every layer's backend accepts.

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
) -> str | None:
    """After aligning hybrid / heterogeneous-KV sizes, every backend must accept the size."""
    rejecting = [name for name in dict.fromkeys(backends) if not profile.supports_block_size(name, block_size, ctx)]
    if not rejecting:
        return None
    return f"Aligned KV cache block size {block_size} is not supported by attention backend(s): {', '.join(rejecting)}."


def update_block_size_after_layers(run: Run, inputs: SelectorInputs, backends: list[str], log_format: str) -> int:
    """The user's --block-size is kept; otherwise one size for every layer backend (docs/vllm-rules.md §9).
    vLLM logs the size only when it is not the default 16."""
    if inputs.block_size is not None:
        return inputs.block_size  # cache_config.user_specified_block_size
    # vLLM sizes the block once the model is built: a bare shape's missing model config is there by now
    # (the backends' get_preferred_block_size read it, e.g. FlashAttention's FA4 head-256 page)
    built = run.ctx.replace(model_dims_known=True)
    size = common_block_size(run.profile, backends, built, inputs=inputs)
    if size != run.profile.params["default_block_size"]:
        names = "/".join(dict.fromkeys(backends))
        run.log("info", log_format.format(size=size, backends=names),
                "interface.py Platform.update_block_size_for_backend")
    return size
