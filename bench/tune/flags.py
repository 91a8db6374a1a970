"""`attnsel tune`'s flags as typed (cli/tune_cmd.py parses them), checked once and resolved into the
frozen TuneRequest before any plan, worker or output folder exists. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnsel.attention.model import (
    check_hybrid_flags,
    check_names,
    check_size,
    check_tune_flags,
)
from attnsel.bench.plan import build as P
from attnsel.bench.plan import parse_workloads, rule_profile_choice
from attnsel.bench.plan.shape import check_kv_cache_dtype
from attnsel.bench.sweep import CHECK_POLICIES, SweepOptions, gpu_ordinals
from attnsel.bench.sweep.run import CheckPolicy
from attnsel.bench.timing.launch_mode import TIMERS, LaunchMode, Timer
from attnsel.bench.tune import recommend as REC
from attnsel.bench.tune.request import (
    TuneRequest,
    capability_without_gpu,
    check_layer_flags,
)
from attnsel.errors import UserInputError
from attnsel.probe import parse_capability

if TYPE_CHECKING:
    from attnsel.attention.versions.choice import ProfileChoice


@dataclass(frozen=True)
class TuneFlags:
    """The flags that describe the sweep, as given (their defaults and help: cli/tune_cmd.py)."""

    model: str | None
    head_size: int | None
    num_heads: int | None
    num_kv_heads: int | None
    dtype: str
    kv_cache_dtype: str
    use_mla: bool
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    qk_nope_head_dim: int | None
    tensor_parallel_size: int
    backends: str | None
    block_sizes: str | None
    workload: str
    weights: str | None
    min_gain: float  # percent
    quick: bool
    full: bool
    cuda_graph: bool
    eager: bool
    timer: str
    hot_l2: bool
    check: str
    tolerance: float | None
    timeout: float
    gpus: str | None
    output: str | None
    resume: bool
    retry_failed: bool
    gpu: str | None
    capability: str | None
    vllm_version: str | None
    dry_run: bool = False  # --dry-run: plan only, for --gpu/--capability or GPU 0
    prefix_caching: bool | None = None  # hybrid models: --enable-prefix-caching / --no-enable-prefix-caching
    mamba_ssm_cache_dtype: str | None = None
    mamba_cache_mode: str | None = None  # hybrid models: vLLM --mamba-cache-mode


def resolve_request(flags: TuneFlags) -> TuneRequest:
    """The flags checked and resolved once, in the order their errors are reported: bad or
    contradicting flags (exit 2), the list flags parsed, the GPU a dry run plans for (or a real
    sweep's refusal of --gpu/--capability), the layer the shape flags state, the rule profile
    (--vllm-version, else the installed vLLM, else the newest: chosen here, once) and the
    --kv-cache-dtype that release knows. Nothing is probed, no folder is made."""
    chooser = _ProfileChooser(flags.vllm_version)
    check_flags(flags, chooser)
    backends, block_sizes = P.parse_backends(flags.backends), P.parse_block_sizes(flags.block_sizes)
    kinds, weights = parse_workloads(flags.workload), REC.parse_weights(flags.weights)
    capability = parse_capability(flags.capability) if flags.capability else None
    gpu_name = flags.gpu
    if flags.dry_run:
        capability, gpu_name = capability_without_gpu(capability, gpu_name)
    elif flags.gpu or flags.capability:
        raise UserInputError("--gpu/--capability describe a GPU for --dry-run; a real sweep measures this machine's GPU")
    check_layer_flags(flags)
    choice = chooser()
    check_kv_cache_dtype(flags.kv_cache_dtype, choice.profile)
    return TuneRequest(
        choice=choice, model=flags.model, head_size=flags.head_size, num_heads=flags.num_heads,
        num_kv_heads=flags.num_kv_heads, dtype=flags.dtype, kv_cache_dtype=flags.kv_cache_dtype,
        tensor_parallel_size=flags.tensor_parallel_size, backends=tuple(backends), block_sizes=tuple(block_sizes),
        block_sizes_given=flags.block_sizes is not None, kinds=tuple(kinds), grid=_grid(flags), weights=weights,
        min_gain=flags.min_gain / 100.0, gpu_name=gpu_name, capability=capability, gpus=flags.gpus,
        use_mla=flags.use_mla, kv_lora_rank=flags.kv_lora_rank, qk_rope_head_dim=flags.qk_rope_head_dim,
        qk_nope_head_dim=flags.qk_nope_head_dim, prefix_caching=flags.prefix_caching,
        mamba_ssm_cache_dtype=flags.mamba_ssm_cache_dtype, mamba_cache_mode=flags.mamba_cache_mode,
        options=_sweep_options(flags), output=flags.output, resume=flags.resume, retry_failed=flags.retry_failed,
    )


class _ProfileChooser:
    """The rule profile, chosen on first need (the flag checks that need it come before the others
    that would report a bad --vllm-version) and never again."""

    def __init__(self, vllm_version: str | None):
        self.vllm_version = vllm_version
        self.choice: ProfileChoice | None = None

    def __call__(self) -> ProfileChoice:
        if self.choice is None:
            self.choice = rule_profile_choice(self.vllm_version)
        return self.choice


def check_flags(flags: TuneFlags, chooser: _ProfileChooser) -> None:
    """Bad or contradicting flags: one line, exit 2, before anything starts."""
    _check_choices(flags)
    _check_values(flags, chooser)
    if flags.retry_failed and not flags.resume:
        raise UserInputError("--retry-failed only makes sense with --resume")
    if flags.resume and flags.output is None:
        raise UserInputError("--resume needs --output DIR (the folder of the sweep to continue)")


def _check_choices(flags: TuneFlags) -> None:
    if flags.quick and flags.full:
        raise UserInputError("--quick and --full exclude each other")
    if flags.cuda_graph and flags.eager:
        raise UserInputError("--cuda-graph and --eager exclude each other")
    if not (0 <= flags.min_gain < 1000):  # also refuses nan
        raise UserInputError(f"--min-gain must be a percentage >= 0, got {flags.min_gain}")
    if flags.timer not in TIMERS:
        raise UserInputError(f"--timer must be auto, cupti or events, got {flags.timer!r}")
    if flags.check not in CHECK_POLICIES:
        raise UserInputError(f"--check must be one of {', '.join(CHECK_POLICIES)}")


def _check_values(flags: TuneFlags, chooser: _ProfileChooser) -> None:
    check_tune_flags(tolerance=flags.tolerance, timeout=flags.timeout, head_size=flags.head_size,
                     num_heads=flags.num_heads, num_kv_heads=flags.num_kv_heads,
                     tensor_parallel_size=flags.tensor_parallel_size,
                     names=(("--model", flags.model), ("--dtype", flags.dtype),
                            ("--kv-cache-dtype", flags.kv_cache_dtype), ("--backends", flags.backends),
                            ("--block-sizes", flags.block_sizes), ("--workload", flags.workload),
                            ("--weights", flags.weights), ("--gpu", flags.gpu), ("--capability", flags.capability),
                            ("--vllm-version", flags.vllm_version), ("--output", flags.output)))
    check_size("--kv-lora-rank", flags.kv_lora_rank)
    check_size("--qk-rope-head-dim", flags.qk_rope_head_dim)
    check_size("--qk-nope-head-dim", flags.qk_nope_head_dim, minimum=0)
    check_names((("--gpus", flags.gpus),))
    gpu_ordinals(flags.gpus)  # its form now, whether the GPUs exist when the sweep asks them
    if flags.mamba_ssm_cache_dtype is not None or flags.mamba_cache_mode is not None:
        # the --mamba-* values the target vLLM parses, as `explain` checks them: with or without a
        # model, before a GPU is asked (an unknown value is bad input, exit 2, not a missing GPU)
        check_hybrid_flags(flags, chooser().profile)


def _grid(flags: TuneFlags) -> str:
    return "quick" if flags.quick else "full" if flags.full else "default"


def _sweep_options(flags: TuneFlags) -> SweepOptions:
    launch = LaunchMode.GRAPH if flags.cuda_graph else LaunchMode.EAGER if flags.eager else LaunchMode.VLLM
    return SweepOptions(launch=launch, timer=Timer(flags.timer), cold_l2=not flags.hot_l2, check=CheckPolicy(flags.check),
                        tolerance=flags.tolerance, item_timeout_s=flags.timeout)
