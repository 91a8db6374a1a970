"""Tune's rules boundary: the ONE place that talks to the `explain` rules engine.

`vllm_verdict` / `vllm_default_choice` answer, for one GPU and shape, what vLLM says about a
(backend, --block-size) pair and what it picks with neither flag; if the rules API changes,
adapt it here. Torch-free.
"""

from __future__ import annotations

from typing import Callable, Optional

from attnsel.bench.plan.shape import TuneShape

# (reasons vLLM would give, kernel block size) for one (backend, --block-size) on this GPU.
Verdict = Callable[[str, int, TuneShape, tuple[int, int]], tuple[list[str], Optional[int]]]
# (backend vLLM picks with no flags, the block size it then uses) or an error string.
DefaultChoice = Callable[[TuneShape, tuple[int, int]], tuple[Optional[str], Optional[int], Optional[str]]]
# the block size vLLM picks for a hybrid model with --attention-backend BACKEND alone (None: not hybrid / raises)
HybridSize = Callable[[str, TuneShape, tuple[int, int]], Optional[int]]


def rule_profile_choice(vllm_version: Optional[str] = None):
    """The rule profile `explain` would use: --vllm-version, else the installed vLLM, else the newest."""
    from attnsel.attention import versions

    return versions.select_profile(vllm_version)


def _rules(vllm_version: Optional[str] = None):
    """(profile, versions package, selector module) for this vLLM version (attention/rules.py)."""
    from attnsel.attention import versions
    from attnsel.attention.selector import engine as selector

    return rule_profile_choice(vllm_version).profile, versions, selector


def _selector_inputs(selector, shape: TuneShape, block_size: Optional[int]):
    return selector.SelectorInputs(
        head_size=shape.head_size,
        dtype=shape.dtype,
        kv_cache_dtype=shape.kv_cache_dtype,
        block_size=block_size,
        use_mla=shape.use_mla,
        has_sink=shape.has_sink,
        use_sparse=shape.use_sparse,
        use_mm_prefix=shape.use_mm_prefix,
        attn_type=shape.attn_type,
    )


def _selection_context(selector, shape: TuneShape, capability: tuple[int, int], backend: Optional[str]):
    # importable=None: judge the target machine as vLLM ships (every package present), the way
    # `explain` does by default; tune times its own adapters, not vLLM's imports.
    from attnsel.bench.plan import mla as plan_mla

    return selector.SelectionContext(
        capability=tuple(capability),
        num_heads=shape.num_q_heads,
        user_backend=backend,
        is_hybrid=shape.is_hybrid,
        mamba_cache_float32=shape.mamba_cache_float32,
        hybrid=_hybrid_setup(shape),
        **plan_mla.selection_context_fields(shape),
    )


def _hybrid_setup(shape: TuneShape):
    """What vLLM's hybrid block-size alignment reads (attention/hybrid/pages.py HybridSetup)."""
    if not shape.hybrid:
        return None
    from attnsel.attention.hybrid import HybridLayout
    from attnsel.attention.hybrid import HybridSetup

    doc = shape.hybrid
    return HybridSetup(layout=HybridLayout.from_json(doc["layout"]),
                       mamba_ssm_cache_dtype=doc.get("mamba_ssm_cache_dtype") or "auto",
                       mamba_cache_dtype=doc.get("mamba_cache_dtype") or "auto",
                       tensor_parallel_size=shape.tensor_parallel_size, num_kv_heads=shape.num_kv_heads,
                       prefix_caching=doc.get("prefix_caching"))


def hybrid_block_size(backend: str, shape: TuneShape, capability: tuple[int, int], *,
                      vllm_version: Optional[str] = None) -> Optional[int]:
    """The block size vLLM uses for a hybrid model with `--attention-backend BACKEND` and no
    --block-size (interface.py `_align_hybrid_block_size`); None for other models or when vLLM raises."""
    if not shape.hybrid:
        return None
    profile, _rules_module, selector = _rules(vllm_version)
    ctx = _selection_context(selector, shape, capability, backend)
    explanation = selector.explain(profile, _selector_inputs(selector, shape, None), ctx)
    return None if explanation.error else explanation.block_size


def _hybrid_runs_as_given(profile, selector, backend: str, block_size: int, shape: TuneShape, ctx) -> list[str]:
    """A hybrid model's --block-size N is raised when one attention page of N tokens holds no Mamba
    state (or, 0.18-0.32, to the next multiple of N): vLLM then never runs N."""
    explanation = selector.explain(profile, _selector_inputs(selector, shape, block_size), ctx)
    if explanation.error:
        return [explanation.error]
    if explanation.block_size != block_size:
        # interface.py _align_hybrid_block_size: one attention page must hold a Mamba state
        return [f"hybrid: vLLM raises --block-size {block_size} to {explanation.block_size} (Mamba state page)"]
    return []


def vllm_verdict(backend: str, block_size: int, shape: TuneShape, capability: tuple[int, int], *,
                 vllm_version: Optional[str] = None) -> tuple[list[str], Optional[int]]:
    """What vLLM says about `--attention-backend BACKEND --block-size N` (vllm-rules §2, §5f):
    its reasons (empty = accepted) and the kernel block size the framework block is split into."""
    profile, versions, selector = _rules(vllm_version)
    cli_error = versions.block_size_cli_error(profile, block_size)
    if cli_error:
        # where the version has the BlockSize literal its argument parser refuses other sizes (vllm-rules §4, §9)
        return [cli_error], None
    ctx = _selection_context(selector, shape, capability, backend)
    try:
        reasons = list(selector.validate_backend(profile, backend, _selector_inputs(selector, shape, block_size), ctx))
    except Exception as exc:  # noqa: BLE001 -- VllmRaises / not modelled: vLLM's message is the reason
        return [getattr(exc, "message", str(exc))], None
    if not reasons and shape.hybrid:
        reasons = _hybrid_runs_as_given(profile, selector, backend, block_size, shape, ctx)
    if reasons:
        return reasons, None
    try:
        return [], int(selector.backend_kernel_block_size(profile, backend, block_size, ctx))
    except Exception as exc:  # noqa: BLE001 -- "No common block size for N."
        return [getattr(exc, "message", str(exc)).strip()], None


def vllm_default_choice(shape: TuneShape, capability: tuple[int, int], *,
                        vllm_version: Optional[str] = None) -> tuple[Optional[str], Optional[int], Optional[str]]:
    """What `explain` says vLLM picks with neither flag: (backend, block size, error)."""
    profile, _rules_module, selector = _rules(vllm_version)
    ctx = _selection_context(selector, shape, capability, None)
    explanation = selector.explain(profile, _selector_inputs(selector, shape, None), ctx)
    return explanation.selected, explanation.block_size, explanation.error
