"""From what a user asked for (+ a model's derived facts) to the selector's inputs. Pure, no torch.

`build_selection()` is the one place that decides, field by field, where each input of vLLM's
selector comes from: an explicit flag wins, then the model config (attention/model/config.py
`ModelFacts`), then vLLM's default. `attnsel explain` and `attnsel preflight` both use it, so the
two commands cannot disagree about the same deployment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnsel.attention.model import check_heads, kv_heads_split_assertion
from attnsel.attention.rules import SelectionContext, SelectorInputs, shape_dtype
from attnsel.attention.selector.engine import explain
from attnsel.attention.versions import block_size_cli_error
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.hybrid import HybridSetup
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.rules import Explanation
    from attnsel.attention.versions import RuleProfile


@dataclass(frozen=True)
class SelectionRequest:
    """Explicit inputs (command-line or deployment flags). None means "not given": the model
    config, then vLLM's default, fills it."""

    head_size: int | None = None
    dtype: str | None = None  # any spelling parse_dtype accepts (attention/rules/dtype.py), or "auto"
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    attention_backend: str | None = None
    use_mla: bool | None = None
    has_sink: bool | None = None
    use_sparse: bool | None = None
    use_mm_prefix: bool | None = None
    attn_type: str | None = None
    # the model's totals, as vLLM's flags and configs state them; build_selection divides them by
    # tensor_parallel_size (heads_per_gpu), as vLLM's ModelConfig does
    num_heads: int | None = None
    tensor_parallel_size: int = 1
    qk_nope_head_dim: int | None = None
    has_index_topk: bool | None = None
    flash_attn_version: int | None = None
    use_trtllm_attention: bool | None = None
    batch_invariant: bool = False
    flashinfer_cubin: bool = True
    hybrid: bool | None = None
    mamba_cache_float32: bool | None = None
    # later selector inputs (docs/vllm-rules.md §9)
    sliding_window: bool | None = None
    non_causal: bool = False
    kv_connector: bool = False
    dcp: int = 1
    pcp: int = 1
    per_head_quant_scales: bool = False
    rswa: bool = False
    adaptive_verification: bool = False
    # model facts later rules read from vLLM's VllmConfig (docs/vllm-rules.md §9)
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_kv_heads: int | None = None  # total, like num_heads
    kv_lora_rank: int | None = None
    index_topk: int | None = None
    # hybrid models (attention/hybrid): --enable-prefix-caching / --no-enable-prefix-caching and
    # --mamba-cache-mode; None: vLLM's default for the version
    prefix_caching: bool | None = None
    mamba_cache_mode: str | None = None
    # --mamba-ssm-cache-dtype / --mamba-cache-dtype (vLLM `MambaDType`); None: "auto"
    mamba_ssm_cache_dtype: str | None = None
    mamba_cache_dtype: str | None = None
    # what the flags said that the rules do not read (e.g. --attention-config keys attnsel does not model)
    notes: tuple[str, ...] = ()
    # the attention layers' q_scale is calibrated (not 1.0): True/False as stated; None: from the model's
    # config (attention/explain/faults.py q_scale_of). Not a selector input: known faults read it.
    calibrated_q_scale: bool | None = None


# SelectionContext fields only some versions' rules read (a version lists them in its data's
# `context_inputs`): (field, flag, what for)
CONTEXT_INPUTS = (
    ("num_kv_heads", "--num-kv-heads", "KV heads per GPU"),
    ("kv_lora_rank", "--kv-lora-rank", "MLA kv_lora_rank"),
    ("index_topk", "--index-topk N", "sparse-indexer index_topk value"),
)


# the model's hf_text_config fields vLLM's MLA rules read, with the flag that states each (bare shapes:
# once one is given, the config counts as stated, and fields not given read as absent from it)
MODEL_DIM_FIELDS = {
    "qk_nope_head_dim": "--qk-nope-head-dim",
    "qk_rope_head_dim": "--qk-rope-head-dim",
    "v_head_dim": "--v-head-dim",
    "kv_lora_rank": "--kv-lora-rank",
    "index_topk": "--index-topk N",
    "has_index_topk": "--[no-]index-topk",
}


def _pick(explicit: Any, from_model: Any, default: Any) -> Any:
    if explicit is not None:
        return explicit
    if from_model is not None:
        return from_model
    return default


def _has_window(facts: Any) -> bool | None:
    if facts is None:
        return None
    return getattr(facts, "sliding_window", None) is not None


def heads_per_gpu(num_heads: int | None, num_kv_heads: int | None,
                  tensor_parallel_size: int) -> tuple[int | None, int | None]:
    """(query heads, KV heads) per GPU from the model's totals, as vLLM splits them (None stays None).

    config/model.py: `get_num_attention_heads` is total // TP, after `verify_with_parallel_config`
    refused a total TP does not divide; `get_num_kv_heads` is max(1, total_kv // TP): fewer KV heads
    than GPUs are replicated, which the model code (models/llama.py and the other decoders) asserts
    is an even replication (TP % KV == 0), and more are split evenly (KV % TP == 0).

    >>> heads_per_gpu(32, 8, 2), heads_per_gpu(64, 4, 8)
    ((16, 4), (8, 1))
    """
    tp = int(tensor_parallel_size or 1)
    if num_heads is not None and num_heads % tp:
        raise UserInputError(f"--num-heads {num_heads} is not divisible by --tensor-parallel-size {tp}")
    failed = kv_heads_split_assertion(num_kv_heads, tp) if num_kv_heads is not None and num_kv_heads > 0 else None
    if failed == "total_num_kv_heads % tp_size == 0":
        raise UserInputError(f"--num-kv-heads {num_kv_heads} cannot be split over --tensor-parallel-size {tp} "
                             f"(vLLM's model code asserts {failed})")
    if failed:
        raise UserInputError(f"--tensor-parallel-size {tp} is not a multiple of --num-kv-heads {num_kv_heads} "
                             f"to replicate (vLLM's model code asserts {failed})")
    per_gpu = None if num_heads is None else num_heads // tp
    kv_per_gpu = None if num_kv_heads is None else max(1, num_kv_heads // tp)
    return per_gpu, kv_per_gpu


def build_selection(
    profile: RuleProfile,
    request: SelectionRequest = SelectionRequest(),
    *,
    model_facts: ModelFacts | None = None,
    capability: tuple[int, int],
    gpu_name: str | None = None,
    importable: Mapping[str, bool] | None = None,
) -> tuple[SelectorInputs, SelectionContext, list[str]]:
    """(SelectorInputs, SelectionContext, notes) for `profile`'s rules.

    `model_facts`: a `ModelFacts` (its dtype is already resolved against the GPU), an object with the
    same selector-facing attributes (tune's shape: bench/plan/rules.py), or None for explicit inputs
    only. Notes name explicit inputs this profile's rules do not read (ignored).
    Raises UserInputError when neither a head size nor a model is given.
    """
    req, facts = request, model_facts
    if req.head_size is None and facts is None:
        raise UserInputError("pass --head-size N (or --model PATH)")
    heads, kv_heads = heads_per_gpu(req.num_heads, req.num_kv_heads, req.tensor_parallel_size)
    # the heads that will run, flags over the model's: 64 KV heads for 32 query heads is no model
    check_heads(_pick(heads, getattr(facts, "num_heads_per_gpu", None), None),
                _pick(kv_heads, _kv_heads_per_gpu(facts), None), " (flags and model config together)")
    inputs = _selector_inputs(profile, req, facts, capability)
    model_float32 = _model_mamba_cache_float32(req, facts)
    stated = {name: getattr(req, name) for name, _flag, _what in CONTEXT_INPUTS}
    extra, notes = _context_inputs_read_by(profile, dict(stated, num_kv_heads=kv_heads))
    ctx = _selection_context(req, facts, extra, heads=heads, use_sparse=inputs.use_sparse,
                             model_float32=model_float32, capability=capability, gpu_name=gpu_name,
                             importable=importable)
    if inputs.use_mla and not ctx.model_dims_known:
        notes.append(unknown_model_dims_note(profile, inputs, ctx))
    elif not ctx.model_dims_known:
        notes.extend(bare_shape_note(profile, inputs, ctx))
    return inputs, ctx, [*notes, *req.notes]


def _selector_inputs(profile: RuleProfile, req: SelectionRequest, facts: ModelFacts | None, capability: tuple[int, int]) -> SelectorInputs:
    """vLLM's AttentionSelectorConfig fields: the flag, else the model's, else vLLM's default."""
    if facts is not None:
        dtype = facts.dtype  # the config helper resolved --dtype (auto included) against the model
    else:
        dtype = shape_dtype(req.dtype or "auto", capability)
    return SelectorInputs(
        head_size=_pick(req.head_size, getattr(facts, "head_size", None), None),
        dtype=dtype,
        kv_cache_dtype=_pick(req.kv_cache_dtype, getattr(facts, "kv_cache_dtype_forced", None), "auto"),
        block_size=req.block_size,
        use_mla=bool(_pick(req.use_mla, getattr(facts, "use_mla", None), False)),
        has_sink=bool(_pick(req.has_sink, getattr(facts, "has_sink", None), False)),
        use_sparse=bool(_pick(req.use_sparse, getattr(facts, "use_sparse", None), False)),
        use_mm_prefix=bool(_pick(req.use_mm_prefix, getattr(facts, "use_mm_prefix", None), False)),
        attn_type=_pick(req.attn_type, getattr(facts, "attn_type", None), "decoder"),
        use_per_head_quant_scales=req.per_head_quant_scales,
        # later inputs (docs/vllm-rules.md §9): a config `sliding_window` means sliding-window layers
        has_sliding_window=bool(_pick(req.sliding_window, _has_window(facts), False)),
        use_non_causal=req.non_causal,
        # VLLM_BATCH_INVARIANT is also a selector input where the version has the field
        use_batch_invariant=req.batch_invariant and profile.has_selector_field("use_batch_invariant"),
        use_kv_connector=req.kv_connector,
        use_dcp=req.dcp > 1,
        use_pcp=req.pcp > 1,
        use_rswa=req.rswa,
        use_adaptive_verification=req.adaptive_verification,
    )


def _model_mamba_cache_float32(req: SelectionRequest, facts: Any) -> bool | None:
    """Whether the model's (or the flags') Mamba cache dtypes name float32; None when neither says."""
    if facts is not None:
        return "float32" in (facts.mamba_ssm_cache_dtype, facts.mamba_cache_dtype)
    if req.mamba_ssm_cache_dtype is not None or req.mamba_cache_dtype is not None:
        return "float32" in (req.mamba_ssm_cache_dtype, req.mamba_cache_dtype)
    return None


def _context_inputs_read_by(profile: RuleProfile, stated: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The CONTEXT_INPUTS flags as given (KV heads per GPU), those `profile`'s rules do not read set
    to None, with a note each."""
    notes: list[str] = []
    extra = dict(stated)
    for name, flag, what in CONTEXT_INPUTS:
        if name not in profile.context_inputs and extra[name] is not None:
            notes.append(
                f"{what} ({flag}) is not an input of the vLLM {profile.vllm_version} rules "
                f"(profile {profile.name}): ignored"
            )
            extra[name] = None
    return extra, notes


def _selection_context(
    req: SelectionRequest, facts: Any, extra: Mapping[str, Any], *, heads: int | None, use_sparse: bool,
    model_float32: bool | None, capability: tuple[int, int], gpu_name: str | None,
    importable: Mapping[str, bool] | None,
) -> SelectionContext:
    """What vLLM's rules read besides the selector config: flag, else model, else default."""
    return SelectionContext(
        capability=(capability[0], capability[1]),
        num_heads=_pick(heads, getattr(facts, "num_heads_per_gpu", None), None),
        user_backend=req.attention_backend,
        is_hybrid=bool(_pick(req.hybrid, getattr(facts, "is_hybrid", None), False)),
        is_attention_free=bool(getattr(facts, "is_attention_free", False)),
        mamba_cache_float32=bool(_pick(req.mamba_cache_float32, model_float32, False)),
        qk_nope_head_dim=_pick(req.qk_nope_head_dim, getattr(facts, "qk_nope_head_dim", None), None),
        model_dims_known=facts is not None or any(getattr(req, name) is not None for name in MODEL_DIM_FIELDS),
        # vLLM's use_sparse *is* `hasattr(hf_config, "index_topk")` for MLA models (docs/vllm-rules.md §6)
        has_index_topk=bool(_pick(req.has_index_topk, getattr(facts, "has_index_topk", None), use_sparse)),
        use_trtllm_attention=req.use_trtllm_attention,
        batch_invariant=req.batch_invariant,
        has_flashinfer_cubin=req.flashinfer_cubin,
        flash_attn_version_override=req.flash_attn_version,
        importable=importable,
        gpu_name=gpu_name,
        qk_rope_head_dim=_pick(req.qk_rope_head_dim, getattr(facts, "qk_rope_head_dim", None), None),
        v_head_dim=_pick(req.v_head_dim, getattr(facts, "v_head_dim", None), None),
        kv_lora_rank=_pick(extra["kv_lora_rank"], getattr(facts, "kv_lora_rank", None), None),
        index_topk=_pick(extra["index_topk"], getattr(facts, "index_topk", None), None),
        decode_context_parallel_size=req.dcp,
        prefill_context_parallel_size=req.pcp,
        num_kv_heads=_pick(extra["num_kv_heads"], _kv_heads_per_gpu(facts), None),
        hybrid=_hybrid_setup(req, facts),
    )


def _hybrid_setup(req: SelectionRequest, facts: ModelFacts | None) -> HybridSetup | None:
    """What vLLM's hybrid block-size alignment reads (attention/hybrid/pages.py), or None."""
    layout = getattr(facts, "hybrid_layout", None)
    if facts is None or layout is None or req.hybrid is False:
        return None
    # deferred: the hybrid modules (~3 ms of dataclasses) load only for a hybrid model, off the
    # start-up path of every other `attnsel explain`
    from attnsel.attention.hybrid import HybridSetup

    return HybridSetup(layout=layout, mamba_ssm_cache_dtype=facts.mamba_ssm_cache_dtype,
                       mamba_cache_dtype=facts.mamba_cache_dtype, tensor_parallel_size=facts.tensor_parallel_size,
                       num_kv_heads=_kv_heads_per_gpu(facts) or 1, prefix_caching=req.prefix_caching,
                       mamba_cache_mode=req.mamba_cache_mode)


def unknown_model_dims_note(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> str:
    """Bare MLA shapes: which backends' verdicts hang on the model's MLA fields, found by asking the
    rules once more as if a model config without those fields were there."""
    as_if_stated = ctx.replace(model_dims_known=True)
    depends = [  # valid now, refused for a model whose config lacks the fields
        name for name in profile.backend_names
        if not profile.validate(name, inputs, ctx) and profile.validate(name, inputs, as_if_stated)
    ]
    flags = ", ".join(flag for _field, flag in MODEL_DIM_FIELDS.items())
    verb = "depends" if len(depends) == 1 else "depend"
    which = f"{', '.join(depends)} {verb} on them" if depends else "no backend here depends on them"
    return (
        f"MLA model dimensions unknown (no --model, none of {flags}): vLLM applies no check that reads "
        f"them when it has no model config, and neither does attnsel; {which}: pass --model or those flags"
    )


def bare_shape_note(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
    """A dense shape without --model selects as vLLM does with no model config; where a verdict reads
    the model config (mm-prefix and R-SWA before FA4's head-256 kernel, fa_utils.py; FlashInfer's
    query-lens check), say which backends a real model's config would refuse."""
    with_model = ctx.replace(model_dims_known=True)
    depends = [name for name in profile.backend_names
               if not profile.validate(name, inputs, ctx) and profile.validate(name, inputs, with_model)]
    if not depends:
        return []
    return [f"no --model: vLLM selects without a model config here, as attnsel does; with a model's config "
            f"{', '.join(depends)} would be refused (those checks read it): pass --model"]


def _kv_heads_per_gpu(facts: Any) -> int | None:
    """vLLM's ModelConfig.get_num_kv_heads: max(1, total KV heads // tensor_parallel_size)."""
    total = getattr(facts, "num_kv_heads", None)
    if not total:
        return None
    return heads_per_gpu(None, int(total), int(getattr(facts, "tensor_parallel_size", 1) or 1))[1]


def explain_selection(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext,
                      notes: Sequence[str] = ()) -> Explanation:
    """selector.explain plus what vLLM's argument parser says about --block-size first, and the
    build notes in front of the explanation's own."""
    expl = explain(profile, inputs, ctx)
    cli_error = block_size_cli_error(profile, inputs.block_size)
    if cli_error is not None:
        expl = dataclasses.replace(expl, error=cli_error, error_type="argparse error", error_phase="cli", selected=None)
    if notes:
        expl = dataclasses.replace(expl, notes=(*notes, *expl.notes))
    return expl


__all__ = ["CONTEXT_INPUTS", "SelectionRequest", "build_selection", "explain_selection", "heads_per_gpu"]
