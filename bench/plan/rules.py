"""Tune's rules boundary: the ONE place where tune asks vLLM's selector.

`vllm_verdict` / `vllm_default_choice` answer, for one GPU and shape, what vLLM says about a
(backend, --block-size) pair and what it picks with neither flag. They build the selector's inputs
with attention/selector/request.py `build_selection`, the function `explain` and `preflight` use:
the tune shape is the model's facts (`ShapeFacts`), the pair and the hybrid flags are the request,
so the three commands cannot disagree about the same deployment. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from attnsel.bench.plan.shape import TuneShape

if TYPE_CHECKING:
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.selector import SelectionRequest
    from attnsel.attention.versions import RuleProfile
    from attnsel.attention.versions.choice import ProfileChoice

# (reasons vLLM would give, kernel block size) for one (backend, --block-size) on this GPU.
Verdict = Callable[[str, int, TuneShape, tuple[int, int]], tuple[list[str], int | None]]
# (backend vLLM picks with no flags, the block size it then uses) or an error string.
DefaultChoice = Callable[[TuneShape, tuple[int, int]], tuple[str | None, int | None, str | None]]
# the block size vLLM picks for a hybrid model with --attention-backend BACKEND alone (None: not hybrid / raises)
HybridSize = Callable[[str, TuneShape, tuple[int, int]], int | None]


def rule_profile_choice(vllm_version: str | None = None) -> ProfileChoice:
    """The rule profile `explain` would use: --vllm-version, else the installed vLLM, else the newest."""
    from attnsel.attention import versions

    return versions.select_profile(vllm_version)


@dataclass(frozen=True)
class ShapeFacts:
    """A tune shape in the names of attention/model `ModelFacts` that `build_selection` reads: the
    facts of the model it was derived from (shape_from_model), or of the layer the shape flags state.
    Counts are per GPU in a TuneShape; `num_kv_heads` here is a total that vLLM's split
    (max(1, total // TP)) turns back into the shape's KV heads per GPU."""

    head_size: int
    dtype: str
    num_heads_per_gpu: int
    num_kv_heads: int
    tensor_parallel_size: int
    use_mla: bool
    has_sink: bool
    use_sparse: bool
    use_mm_prefix: bool
    attn_type: str
    is_hybrid: bool
    sliding_window: int | None
    mamba_ssm_cache_dtype: str
    mamba_cache_dtype: str
    hybrid_layout: Any = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    kv_lora_rank: int | None = None
    index_topk: int | None = None
    is_attention_free: bool = False  # tune refuses attention-free models before any plan
    # the shape states the cache dtype vLLM uses (a forced one included): the request carries it
    kv_cache_dtype_forced: str | None = None

    @classmethod
    def of(cls, shape: TuneShape) -> ShapeFacts:
        from attnsel.bench.plan import mla as plan_mla

        hybrid = shape.hybrid or {}
        layout = None
        if hybrid.get("layout"):
            from attnsel.attention.hybrid import HybridLayout

            layout = HybridLayout.from_json(hybrid["layout"])
        tp = max(1, int(shape.tensor_parallel_size or 1))
        return cls(head_size=shape.head_size, dtype=shape.dtype, num_heads_per_gpu=shape.num_q_heads,
                   num_kv_heads=shape.num_kv_heads * tp, tensor_parallel_size=tp, use_mla=shape.use_mla,
                   has_sink=shape.has_sink, use_sparse=shape.use_sparse, use_mm_prefix=shape.use_mm_prefix,
                   attn_type=shape.attn_type, is_hybrid=shape.is_hybrid, sliding_window=shape.sliding_window,
                   mamba_ssm_cache_dtype=hybrid.get("mamba_ssm_cache_dtype") or "auto",
                   mamba_cache_dtype=hybrid.get("mamba_cache_dtype") or "auto", hybrid_layout=layout,
                   **plan_mla.model_dims(shape))


def selection_request(shape: TuneShape, backend: str | None, block_size: int | None) -> SelectionRequest:
    """The deployment's flags for one tune row: the pair, the cache dtype, the hybrid flags."""
    from attnsel.attention.selector import SelectionRequest

    hybrid = shape.hybrid or {}
    # mamba_cache_float32 is the model's (shape_from_model), stated here because a hybrid shape
    # without a recorded layout keeps no Mamba cache dtypes for build_selection to read it from
    return SelectionRequest(
        kv_cache_dtype=shape.kv_cache_dtype, block_size=block_size, attention_backend=backend,
        tensor_parallel_size=shape.tensor_parallel_size, mamba_cache_float32=shape.mamba_cache_float32,
        prefix_caching=hybrid.get("prefix_caching"), mamba_cache_mode=hybrid.get("mamba_cache_mode"),
    )


def _selection(shape: TuneShape, capability: tuple[int, int], backend: str | None, block_size: int | None,
               profile: RuleProfile | None, vllm_version: str | None
               ) -> tuple[RuleProfile, SelectorInputs, SelectionContext]:
    """(profile, SelectorInputs, SelectionContext) as `explain` builds them for this shape and pair.
    importable=None: judge the target machine as vLLM ships (every package present), the way
    `explain` does by default; tune times its own adapters, not vLLM's imports. `profile`: the
    version object the caller resolved (tune's request); without it, chosen from `vllm_version`."""
    from attnsel.attention.selector import build_selection

    if profile is None:
        profile = rule_profile_choice(vllm_version).profile
    inputs, ctx, _notes = build_selection(profile, selection_request(shape, backend, block_size),
                                          # ShapeFacts carries the ModelFacts fields build_selection reads
                                          model_facts=cast("ModelFacts", ShapeFacts.of(shape)), capability=capability)
    return profile, inputs, ctx


def selector_inputs(backend: str, block_size: int, shape: TuneShape, capability: tuple[int, int], *,
                    profile: RuleProfile | None = None,
                    vllm_version: str | None = None) -> tuple[SelectorInputs, SelectionContext]:
    """(SelectorInputs, SelectionContext) of one tune row, the inputs `vllm_verdict` judges with the
    profile: bench/tools/vllm_cpu_check.py hands the same ones to the installed release's selector."""
    _profile, inputs, ctx = _selection(shape, capability, backend, block_size, profile, vllm_version)
    return inputs, ctx


def hybrid_block_size(backend: str, shape: TuneShape, capability: tuple[int, int], *,
                      profile: RuleProfile | None = None, vllm_version: str | None = None) -> int | None:
    """The block size vLLM uses for a hybrid model with `--attention-backend BACKEND` and no
    --block-size (interface.py `_align_hybrid_block_size`); None for other models or when vLLM raises."""
    if not shape.hybrid:
        return None
    from attnsel.attention.selector import explain

    explanation = explain(*_selection(shape, capability, backend, None, profile, vllm_version))
    return None if explanation.error else explanation.block_size


def _hybrid_runs_as_given(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext,
                          block_size: int) -> list[str]:
    """A hybrid model's --block-size N is raised when one attention page of N tokens holds no Mamba
    state (or, 0.18-0.32, to the next multiple of N): vLLM then never runs N."""
    from attnsel.attention.selector import explain

    explanation = explain(profile, inputs, ctx)
    if explanation.error:
        return [explanation.error]
    if explanation.block_size != block_size:
        # interface.py _align_hybrid_block_size: one attention page must hold a Mamba state
        return [f"hybrid: vLLM raises --block-size {block_size} to {explanation.block_size} (Mamba state page)"]
    return []


def vllm_verdict(backend: str, block_size: int, shape: TuneShape, capability: tuple[int, int], *,
                 profile: RuleProfile | None = None, vllm_version: str | None = None) -> tuple[list[str], int | None]:
    """What vLLM says about `--attention-backend BACKEND --block-size N` (docs/vllm-rules.md §2, §5f):
    its reasons (empty = accepted) and the kernel block size the framework block is split into."""
    from attnsel.attention import versions
    from attnsel.attention.selector import (
        backend_kernel_block_size,
        check_supports_dtype,
        validate_backend,
    )

    profile, inputs, ctx = _selection(shape, capability, backend, block_size, profile, vllm_version)
    if profile.registry_names and backend not in profile.registry_names:  # e.g. FLASH_ATTN_MLA_SPARSE before 0.25
        return [f"vLLM {profile.vllm_version} has no {backend} backend"], None
    cli_error = versions.block_size_cli_error(profile, block_size)
    if cli_error:
        # where the version has the BlockSize literal its argument parser refuses other sizes (docs/vllm-rules.md §4, §9)
        return [cli_error], None
    try:
        check_supports_dtype(inputs, ctx)  # raised while the model config is built: before any backend (§5g)
        reasons = list(validate_backend(profile, backend, inputs, ctx))
    except Exception as exc:  # noqa: BLE001 -- VllmRaises / not modelled: vLLM's message is the reason
        return [getattr(exc, "message", str(exc))], None
    if not reasons and shape.hybrid:
        reasons = _hybrid_runs_as_given(profile, inputs, ctx, block_size)
    if reasons:
        return reasons, None
    try:
        return [], int(backend_kernel_block_size(profile, backend, block_size, ctx, inputs))
    except Exception as exc:  # noqa: BLE001 -- "No common block size for N."
        return [getattr(exc, "message", str(exc)).strip()], None


def vllm_default_choice(shape: TuneShape, capability: tuple[int, int], *, profile: RuleProfile | None = None,
                        vllm_version: str | None = None) -> tuple[str | None, int | None, str | None]:
    """What `explain` says vLLM picks with neither flag: (backend, block size, error)."""
    from attnsel.attention.selector import explain

    explanation = explain(*_selection(shape, capability, None, None, profile, vllm_version))
    return explanation.selected, explanation.block_size, explanation.error
