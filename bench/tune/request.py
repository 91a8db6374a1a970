"""`attnsel tune`'s request and what it becomes before anything is timed: the shape (flags or
--model, the same derivation as `explain`) and the plan vLLM's rules filter (also `--dry-run`).
Torch-free.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from attnsel import __version__
from attnsel.attention.rules import shape_dtype
from attnsel.bench.plan import (
    WORKLOAD_KINDS,
    TuneShape,
    default_head_layout,
    hybrid_block_size,
    make_shape,
    shape_from_model,
    vllm_default_choice,
    vllm_verdict,
)
from attnsel.bench.plan import build as P
from attnsel.bench.plan import mla as plan_mla
from attnsel.bench.plan.shape import untimed_kv_cache_dtype
from attnsel.bench.plan.workloads import WorkloadKind
from attnsel.bench.sweep import SweepOptions
from attnsel.bench.tune import env_info
from attnsel.bench.tune import recommend as REC
from attnsel.errors import CheckFailed, UserInputError

if TYPE_CHECKING:
    from attnsel.attention.versions import FaultMatch, RuleProfile
    from attnsel.attention.versions.choice import ProfileChoice

PLAN_SCHEMA = "attnsel-tune-plan/1"


class LayerFlags(Protocol):
    """The flags that state one attention layer (or name a model): TuneFlags as given, TuneRequest resolved."""

    @property
    def model(self) -> str | None: ...
    @property
    def head_size(self) -> int | None: ...
    @property
    def num_heads(self) -> int | None: ...
    @property
    def num_kv_heads(self) -> int | None: ...
    @property
    def kv_cache_dtype(self) -> str: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def use_mla(self) -> bool: ...
    @property
    def kv_lora_rank(self) -> int | None: ...
    @property
    def qk_rope_head_dim(self) -> int | None: ...
    @property
    def qk_nope_head_dim(self) -> int | None: ...


@dataclass(frozen=True)
class TuneRequest:
    """One `attnsel tune`, checked and resolved once (bench/tune/flags.py `resolve_request`): the rule
    profile that filters the grid is chosen here, every later step reads it from the request."""

    choice: ProfileChoice  # --vllm-version, else the installed vLLM, else the newest profile
    model: str | None = None
    head_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    backends: tuple[str, ...] = ()  # empty: the model's grid (dense or MLA backends)
    block_sizes: tuple[int, ...] = P.DEFAULT_BLOCK_SIZES
    block_sizes_given: bool = False  # --block-sizes was passed
    kinds: tuple[WorkloadKind, ...] = WORKLOAD_KINDS
    grid: str = "default"
    weights: Mapping[str, float] = field(default_factory=lambda: dict(REC.DEFAULT_WEIGHTS))
    min_gain: float = REC.DEFAULT_MIN_GAIN  # --min-gain: below it a margin is not worth a flag change
    gpu_name: str | None = None  # --gpu (dry run without a GPU), or what NVML named for it
    capability: tuple[int, int] | None = None  # --capability (dry run), or what NVML said for it
    gpus: str | None = None  # --gpus all|0,1: spread the sweep over these GPUs (bench/sweep/multi_gpu.py)
    options: SweepOptions = field(default_factory=SweepOptions)
    # an MLA layer without a model (--use-mla): bench/plan/mla.py
    use_mla: bool = False
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    # hybrid models (--model): vLLM's --enable-prefix-caching / --mamba-ssm-cache-dtype; None: vLLM's default
    prefix_caching: bool | None = None
    mamba_ssm_cache_dtype: str | None = None
    mamba_cache_mode: str | None = None  # --mamba-cache-mode
    # where the sweep writes (bench/tune/run.py): --output, --resume, --retry-failed
    output: str | None = None
    resume: bool = False
    retry_failed: bool = False

    @property
    def profile(self) -> RuleProfile:
        return self.choice.profile


MLA_FLAGS = "--use-mla/--kv-lora-rank/--qk-rope-head-dim/--qk-nope-head-dim"


def check_layer_flags(req: LayerFlags) -> None:
    """Bad shape flags fail before anything starts (no GPU probe, no output folder)."""
    mla_flags = req.use_mla or any(v is not None for v in (req.kv_lora_rank, req.qk_rope_head_dim, req.qk_nope_head_dim))
    if req.model:
        if req.head_size or req.num_heads or req.num_kv_heads or mla_flags:
            raise UserInputError(f"pass either --model or --head-size/--num-heads/--num-kv-heads ({MLA_FLAGS}), not both")
        return
    if mla_flags:
        mla_shape(req, "bfloat16")
        return
    if req.head_size is None:
        raise UserInputError("pass --head-size (and optionally --num-heads/--num-kv-heads), or --model CONFIG")
    heads, kv_heads, _ = explicit_heads(req)
    make_shape(req.head_size, heads, kv_heads, "bfloat16", req.kv_cache_dtype, req.tensor_parallel_size)


def explicit_heads(req: LayerFlags) -> tuple[int, int | None, str | None]:
    """(heads, KV heads, what was assumed): --num-heads/--num-kv-heads, or with only --head-size the
    representative layout for that head size (`attnsel tune --head-size 128 --dtype bf16`). Heads
    are model totals (divided by TP in make_shape), so the default layout is scaled by TP."""
    if req.num_heads is not None:
        return req.num_heads, req.num_kv_heads, None
    q, kv, note = default_head_layout(int(req.head_size or 0))
    tp = max(1, int(req.tensor_parallel_size or 1))
    if req.num_kv_heads is not None:
        return req.num_kv_heads * (q // kv), req.num_kv_heads, note
    return q * tp, kv * tp, note


def mla_shape(req: LayerFlags, dtype: str) -> TuneShape:
    """`--use-mla --kv-lora-rank R --qk-rope-head-dim P --num-heads H` (an MLA layer, one latent cache)."""
    missing = [flag for flag, value in (("--use-mla", req.use_mla or None), ("--kv-lora-rank", req.kv_lora_rank),
                                        ("--qk-rope-head-dim", req.qk_rope_head_dim), ("--num-heads", req.num_heads))
               if value is None]
    rank, rope, heads = req.kv_lora_rank, req.qk_rope_head_dim, req.num_heads
    if missing or rank is None or rope is None or heads is None:
        raise UserInputError(f"an MLA layer needs --use-mla --kv-lora-rank --qk-rope-head-dim --num-heads "
                             f"(missing {', '.join(missing)}), e.g. DeepSeek-V3: --use-mla --kv-lora-rank 512 "
                             f"--qk-rope-head-dim 64 --num-heads 128")
    if req.num_kv_heads is not None:
        raise UserInputError("--num-kv-heads does not apply to MLA: its layers have one latent KV head")
    shape = plan_mla.make_mla_shape(rank, rope, heads, dtype, req.kv_cache_dtype, req.tensor_parallel_size,
                                    req.qk_nope_head_dim)
    if req.head_size is not None and req.head_size != shape.head_size:
        raise UserInputError(f"--head-size {req.head_size} contradicts the MLA head size --kv-lora-rank + "
                             f"--qk-rope-head-dim = {shape.head_size}")
    return shape


def resolve_shape(req: TuneRequest, capability: tuple[int, int] | None) -> TuneShape:
    """The layer tune times: --model's (the same derivation as `explain`), or the shape flags'."""
    if req.model:
        shape = shape_from_model(req.model, capability=capability, dtype=req.dtype,
                                 kv_cache_dtype=req.kv_cache_dtype, tensor_parallel_size=req.tensor_parallel_size,
                                 model_rules=req.profile.model_rules,
                                 mamba_ssm_cache_dtype=req.mamba_ssm_cache_dtype or "auto")
        if shape.hybrid:
            shape = dataclasses.replace(shape, hybrid={**shape.hybrid, "prefix_caching": req.prefix_caching,
                                                       "mamba_cache_mode": req.mamba_cache_mode})
        return shape
    # --dtype auto without a model: the platform's preferred dtype; no GPU known: a CC 8.0+ one (bf16)
    dtype = shape_dtype(req.dtype, capability or (8, 0))
    if req.use_mla or req.kv_lora_rank is not None:
        return mla_shape(req, dtype)
    assert req.head_size is not None  # check_layer_flags refused a request without a layer
    heads, kv_heads, assumed = explicit_heads(req)
    shape = make_shape(req.head_size, heads, kv_heads, dtype, req.kv_cache_dtype, req.tensor_parallel_size)
    return dataclasses.replace(shape, assumed=assumed)


def make_plan(req: TuneRequest, capability: tuple[int, int], gpu_name: str | None) -> P.Plan:
    """The grid vLLM's rules (the request's profile) leave on this GPU; a --kv-cache-dtype this GPU
    cannot hold is refused first (the request checked the rest)."""
    why = untimed_kv_cache_dtype(req.kv_cache_dtype, req.profile, capability)
    if why:
        raise CheckFailed(f"not timed: {why}")
    shape = resolve_shape(req, capability)
    profile = req.profile
    plan = P.build_plan(shape, capability, backends=req.backends, block_sizes=req.block_sizes, kinds=req.kinds,
                        grid=req.grid, gpu_name=gpu_name, block_sizes_given=req.block_sizes_given,
                        verdict=functools.partial(vllm_verdict, profile=profile),
                        default_choice=functools.partial(vllm_default_choice, profile=profile),
                        hybrid_size=functools.partial(hybrid_block_size, profile=profile))
    return dataclasses.replace(plan, rule_profile=profile.name, rule_profile_reason=req.choice.reason,
                               profile=profile, known_faults=plan_faults(profile, plan))


def plan_faults(profile: RuleProfile, plan: P.Plan) -> tuple[FaultMatch, ...]:
    """The release's known vLLM faults the planned rows meet. tune's fp8 rows run with per-tensor scales
    computed as vLLM's calc_kv_scales did (attention/kernels/kv_quant.py), so q_scale is never 1.0;
    whether FlashInfer's cubins are at hand is not known when the plan is made."""
    from attnsel.attention.versions import FaultConfig, QScale, faults_met

    found: list[FaultMatch] = []
    for backend in dict.fromkeys(c.backend for c in plan.runnable_configs):
        config = FaultConfig(backend=backend, kv_cache_dtype=plan.shape.kv_cache_dtype, capability=plan.capability,
                             q_scale=QScale.CALIBRATED, flashinfer_cubin=None)
        found += faults_met(profile.known_faults, config)
    return tuple(found)


def refused_grid_message(plan: P.Plan) -> str:
    reasons = "; ".join(sorted({f"{c.backend}: {', '.join(c.reasons)}" for c in plan.skipped_configs}))
    return f"vLLM would refuse every backend x block size in the grid, nothing to time ({reasons})"


def plan_document(plan: P.Plan, options: SweepOptions) -> dict:
    return {"schema": PLAN_SCHEMA, "attnsel_version": __version__, "options": options.to_dict(), **plan.to_dict()}


def capability_without_gpu(capability: tuple[int, int] | None,
                           gpu_name: str | None) -> tuple[tuple[int, int], str | None]:
    """For --dry-run: --capability / --gpu, else what NVML says about GPU 0, else an error."""
    if capability:
        return capability, gpu_name
    if gpu_name:
        from attnsel.probe import find_gpu

        spec = find_gpu(gpu_name)
        return spec.compute_capability, spec.name
    reader = env_info.NvmlReader()
    try:
        index = reader.index_for(None)
        if reader.session is not None and index is not None:
            cc = reader.session.get("nvmlDeviceGetCudaComputeCapability", index)
            if cc:
                return (int(cc[0]), int(cc[1])), reader.session.get("nvmlDeviceGetName", index)
    finally:
        reader.close()
    raise UserInputError("no GPU found: pass --gpu NAME (e.g. H100) or --capability X.Y for a dry run")
