"""The `attnsel tune` sweep plan: which (backend, block size, workload) rows to time.

Before anything runs, every (backend, --block-size) pair is checked with the `explain` rules for
this GPU (bench/plan/rules.py): a pair vLLM would refuse is listed as skipped with vLLM's own
reason and never timed. This module is torch-free (`--dry-run` works without a GPU).

Default grid: backends FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION (docs/vllm-rules.md §5a,
non-MLA); block sizes 16, 32, 64, 128, 256 (FLEX_ATTENTION: 16 only, unless --full or
--block-sizes: it recompiles per shape and block size); the workload shapes are in
bench/plan/workloads.py, the shape in bench/plan/shape.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnsel.attention.kernels import (
    BACKENDS,  # the dense backends tune times (one list)
)
from attnsel.bench.plan.rules import (
    DefaultChoice,
    HybridSize,
    Verdict,
    hybrid_block_size,
    vllm_default_choice,
    vllm_verdict,
)
from attnsel.bench.plan.shape import TuneShape
from attnsel.bench.plan.workloads import (
    WORKLOAD_KINDS,
    WorkloadKind,
    WorkloadSpec,
    workload_grid,
)
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.versions import FaultMatch, RuleProfile

DEFAULT_BLOCK_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)
# FlexAttention recompiles per shape and block size; the default/quick grids keep vLLM's own
# preferred size (16, docs/vllm-rules.md §5f) so the sweep stays inside its time budget.
LIMITED_DEFAULT_BLOCK_SIZES: dict[str, tuple[int, ...]] = {"FLEX_ATTENTION": (16,)}


MAX_BLOCK_SIZE_VALUES = 32  # the grid grows with every value: bound it before anything is built
MAX_TUNE_BLOCK_SIZE = 65536  # tokens per KV block; beyond this a page is larger than most KV caches


def parse_block_sizes(value: str | None) -> list[int]:
    if value is None:
        return list(DEFAULT_BLOCK_SIZES)
    if value.count(",") >= MAX_BLOCK_SIZE_VALUES * 4 or len(value) > 4096:
        raise UserInputError(f"--block-sizes lists too many values (at most {MAX_BLOCK_SIZE_VALUES})")
    try:
        sizes = [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise UserInputError(f"--block-sizes must be a comma-separated list of integers, got {value!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise UserInputError(f"--block-sizes must be positive integers, got {value!r}")
    if max(sizes) > MAX_TUNE_BLOCK_SIZE or len(set(sizes)) > MAX_BLOCK_SIZE_VALUES:
        raise UserInputError(f"--block-sizes: at most {MAX_BLOCK_SIZE_VALUES} values, each at most "
                             f"{MAX_TUNE_BLOCK_SIZE} tokens")
    return sorted(set(sizes))


def parse_backends(value: str | None) -> list[str]:
    """--backends as a list; empty: the model's grid (dense backends, or vLLM's MLA backends for an
    MLA model: bench/plan/mla.py)."""
    from attnsel.attention.kernels import MLA_BACKENDS, SPARSE_MLA_BACKENDS

    if not value:
        return []
    names = [v.strip().upper() for v in value.split(",") if v.strip()]
    if not names:  # "--backends ,,," names none, as --backends "" does: not the default grid
        raise UserInputError(f"--backends {value!r} names no backend; leave the flag out for the default grid")
    supported = BACKENDS + MLA_BACKENDS + SPARSE_MLA_BACKENDS
    bad = [n for n in names if n not in supported]
    if bad:
        from attnsel.attention.versions import close_backend_names

        hints = {n: close_backend_names(n, list(supported)) for n in bad}
        named = [f"{n} (did you mean {', '.join(hints[n])}?)" if hints[n] else n for n in bad]
        raise UserInputError(f"unknown backend(s) {', '.join(named)}; tune supports {', '.join(supported)}")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class PlannedConfig:
    backend: str
    block_size: int
    kernel_block_size: int | None
    reasons: tuple[str, ...] = ()  # vLLM's reasons; non-empty => skipped, never timed

    @property
    def runnable(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "block_size": self.block_size,
            "kernel_block_size": self.kernel_block_size,
            "status": "planned" if self.runnable else "skipped",
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Plan:
    shape: TuneShape
    capability: tuple[int, int]
    gpu_name: str | None
    configs: tuple[PlannedConfig, ...]
    workloads: tuple[WorkloadSpec, ...]
    grid: str
    vllm_default_backend: str | None
    vllm_default_block_size: int | None
    vllm_default_error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    rule_profile: str | None = None  # the vLLM rule profile that filtered the grid
    rule_profile_reason: str | None = None
    # the release's known vLLM faults the timed rows meet (attention/versions/faults.py FaultMatch; bench/tune/request.py)
    known_faults: tuple[FaultMatch, ...] = ()
    # the version object that filtered the grid (tune's request resolved it once); None: read by its name
    profile: RuleProfile | None = field(default=None, compare=False, repr=False)

    @property
    def runnable_configs(self) -> list[PlannedConfig]:
        return [c for c in self.configs if c.runnable]

    @property
    def skipped_configs(self) -> list[PlannedConfig]:
        return [c for c in self.configs if not c.runnable]

    def launch(self, backend: str, w: WorkloadSpec) -> tuple[str, str]:
        """How vLLM would launch this row's attention (graph replay or eager), from the recorded
        CUDA-graph facts of the plan's release (attention/selector/cudagraph.py); the worker replaces it
        with the installed vLLM's own dispatcher answer when it drives vLLM's classes."""
        from attnsel.attention import versions
        from attnsel.attention.selector import cudagraph

        profile = self.profile
        if profile is None and self.rule_profile:
            profile = versions.get_profile(self.rule_profile)
        version = profile.vllm_version if profile else "?"
        return cudagraph.decode_launch(profile.cudagraph if profile else None, version, backend,
                                       self.capability, w.kind, w.query_tokens)

    def launch_summary(self) -> dict[str, dict[str, str]]:
        """{backend: {workload label: "graph" | "eager"}} for the runnable backends."""
        out: dict[str, dict[str, str]] = {}
        for backend in dict.fromkeys(c.backend for c in self.runnable_configs):
            out[backend] = {w.label(): self.launch(backend, w)[0] for w in self.workloads}
        return out

    @property
    def timed_row_count(self) -> int:
        return len(self.runnable_configs) * len(self.workloads)

    def estimated_seconds(self, *, per_row_s: float = 0.15, per_backend_startup_s: float = 10.0) -> float:
        """A rough warm-run estimate: <= 0.15 s per row (25 ms warm-up + 100 ms timed budget, capped
        at 300 samples, + batch setup) plus imports per backend worker (FlashInfer: 8.5 s import,
        docs/gpu-facts.md §1). Cold runs add JIT: ~12 s FlashInfer, ~11 s torch.compile(flex) per shape."""
        backends = {c.backend for c in self.runnable_configs}
        return self.timed_row_count * per_row_s + len(backends) * per_backend_startup_s

    def to_dict(self) -> dict:
        return {
            "shape": self.shape.to_dict(),
            "capability": f"{self.capability[0]}.{self.capability[1]}",
            "gpu": self.gpu_name,
            "grid": self.grid,
            "rule_profile": self.rule_profile,
            "rule_profile_reason": self.rule_profile_reason,
            "vllm_default": {
                "backend": self.vllm_default_backend,
                "block_size": self.vllm_default_block_size,
                "error": self.vllm_default_error,
            },
            "configs": [c.to_dict() for c in self.configs],
            "workloads": [w.to_dict() for w in self.workloads],
            "launch": self.launch_summary(),
            "timed_rows": self.timed_row_count,
            "skipped_configs": len(self.skipped_configs),
            "estimated_seconds_warm": round(self.estimated_seconds(), 1),
            "notes": list(self.notes),
            "known_faults": [m.to_dict() for m in self.known_faults],
        }


def build_plan(
    shape: TuneShape,
    capability: tuple[int, int],
    *,
    backends: Sequence[str] = (),
    block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
    kinds: Sequence[WorkloadKind] = WORKLOAD_KINDS,
    grid: str = "default",
    gpu_name: str | None = None,
    verdict: Verdict = vllm_verdict,
    default_choice: DefaultChoice = vllm_default_choice,
    block_sizes_given: bool = False,
    hybrid_size: HybridSize = hybrid_block_size,
) -> Plan:
    """Filter backend x block size with vLLM's rules for this GPU; attach the workload shapes.
    `backends` empty: the model's grid (MLA models: vLLM's MLA backends, bench/plan/mla.py).
    `block_sizes_given`: the user passed --block-sizes (then every backend gets all of them)."""
    from attnsel.bench.plan import mla as plan_mla

    notes: list[str] = [shape.assumed] if shape.assumed else []
    backends = list(backends) or plan_mla.default_backends(shape.use_mla, BACKENDS, shape.use_sparse)
    kinds, mla_notes = plan_mla.workload_kinds(shape.use_mla, kinds)
    notes += mla_notes + plan_mla.shape_notes(shape)
    if shape.has_sink:
        notes.append("the model uses attention sinks; the timed kernels run without them, so the ranking is indicative")
    if shape.sliding_window:
        notes.append(f"the model uses a sliding window ({shape.sliding_window} tokens) on some layers; the timed "
                     f"kernels attend to the full context")
    if shape.is_hybrid:
        notes.append("hybrid (attention + Mamba) model: vLLM sizes its KV block from the Mamba state; only the "
                     "attention kernels are timed" + ("; block sizes vLLM would raise are skipped and the size it "
                                                     "picks per backend is added" if shape.hybrid else ""))
    configs = []
    for backend in backends:
        sizes = list(block_sizes)
        limited = LIMITED_DEFAULT_BLOCK_SIZES.get(backend)
        if limited and not block_sizes_given and grid != "full":
            sizes = [bs for bs in sizes if bs in limited]
            notes.append(f"{backend} is timed at --block-size {', '.join(map(str, limited))} only in the {grid} grid: "
                         f"torch.compile builds flex_attention again for every shape and block size (~11 s each "
                         f"cold, docs/gpu-facts.md); pass --full or --block-sizes to time more")
        aligned = hybrid_size(backend, shape, capability) if shape.hybrid else None
        if aligned is not None and aligned not in sizes:  # the size vLLM itself picks for a hybrid model
            sizes = sorted([*sizes, aligned])
        for bs in sizes:
            reasons, kernel_bs = verdict(backend, bs, shape, capability)
            configs.append(PlannedConfig(backend, bs, kernel_bs, tuple(reasons)))
    default_backend, default_bs, default_error = default_choice(shape, capability)
    return Plan(
        shape=shape,
        capability=(capability[0], capability[1]),
        gpu_name=gpu_name,
        configs=tuple(configs),
        workloads=tuple(workload_grid(kinds, grid)),
        grid=grid,
        vllm_default_backend=default_backend,
        vllm_default_block_size=default_bs,
        vllm_default_error=default_error,
        notes=tuple(notes),
    )

