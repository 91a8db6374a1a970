"""What every kernel adapter promises the `tune` harness (torch-free: importable without torch).

An adapter wraps one provider of one vLLM backend's kernel (e.g. FLASH_ATTN through FA4's CuTe
kernels). The harness asks `availability()` once, `unsupported_reason(...)` per shape, then
`prepare(batch)` and times `PreparedKernel.run` with the plan/compile cost already paid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Protocol, TypedDict, cast, runtime_checkable

from attnsel.words import Word

if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeAlias

    import torch

    from attnsel.attention.kernels.mla import MlaBatch
    from attnsel.attention.kernels.paged import PagedBatch, Workload

    Batch: TypeAlias = PagedBatch | MlaBatch
    """What the harness hands `prepare`: a paged batch, or a latent (MLA) one for an MLA workload."""

class WorkloadKind(Word):
    """What a timed batch holds (paged.Workload.kind): one new token per request, a chunked-prefill
    chunk per request, or both in one step as vLLM's scheduler mixes them."""

    DECODE = "decode"
    PREFILL = "prefill"
    MIXED = "mixed"


# The dense backends tune times, in the order its plan and reports list them
BACKENDS: tuple[str, ...] = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
# vLLM's dense MLA backends (docs/vllm-rules.md §3b), timed at decode over a latent cache (kernels/mla.py)
MLA_BACKENDS: tuple[str, ...] = ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA")
# vLLM's sparse MLA backends (an index_topk model, DeepSeek-V3.2): decode over the indexer's top-k
# positions of the latent cache (kernels/mla.py, vllm/sparse_mla.py); Hopper has the first two and,
# from vLLM 0.33, FLASHINFER_MLA_SPARSE_SM90 (a release without it says so in its rows: bench/plan/rules.py)
SPARSE_MLA_BACKENDS: tuple[str, ...] = ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE",
                                        "FLASHINFER_MLA_SPARSE_SM90")


@dataclass
class PreparedKernel:
    run: Callable[[], torch.Tensor | None]
    """One call = one attention launch (or the launches vLLM makes for that batch) over the batch."""
    output: Callable[[], torch.Tensor | None]
    """The output tensor of the last run, shaped like PagedBatch.query."""
    provider: str
    """Which library and version ran, and which path, e.g. 'flashinfer 0.7.2.post1 (decode, tensor cores)'."""
    kernel_block_size: int
    setup_seconds: float
    """Plan + JIT/compile time, first call included, measured apart from run time."""
    notes: tuple[str, ...] = ()
    poison_output: Callable[[], object] | None = None
    """Fill the output buffer with NaN so that a kernel which writes nothing cannot pass the check.
    None when the kernel allocates a fresh output on every call (then nothing stale can survive).
    prepare() has already poisoned once after its warm-up call."""
    writes_into_given_output: bool = False
    """True when the kernel writes into a buffer we pass (vLLM's `out=`) rather than returning a new one."""
    details: dict[str, object] = field(default_factory=dict)
    """Provider-specific facts worth recording (tuning knobs used, layout, fa_version...)."""


@runtime_checkable
class KernelAdapter(Protocol):
    backend: str
    """vLLM's name: FLASHINFER | FLASH_ATTN | TRITON_ATTN | FLEX_ATTENTION, or an MLA backend (MLA_BACKENDS)."""
    name: str
    """Provider short name, e.g. 'flashinfer', 'fa4-cute', 'attnsel-triton'."""

    def availability(self) -> str | None:
        """None if usable here, else why not (package missing, no GPU...)."""

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        """None if this provider can run that shape with that KV block size on that device."""

    def prepare(self, b: Batch) -> PreparedKernel:
        """Plan, convert layouts, compile; may raise (the harness isolates failures)."""


class HasKind(Protocol):
    """A workload item as the tune worker hands it to `prebuild` (bench's WorkloadSpec): its kind."""

    @property
    def kind(self) -> str: ...


class _PrebuildCounts(TypedDict):
    modules: list[str]
    built: int
    cached: int
    error: str | None


class PrebuildSummary(_PrebuildCounts, total=False):
    """What `prebuild` returns: the modules it named, how many it built and found cached, the error
    (None when all went well); FlashInfer's also the seconds it took and its requests' labels."""

    seconds: float
    requests: list[str]


class PrebuildingAdapter(Protocol):
    """An OPTIONAL hook an adapter may add (not part of KernelAdapter: most adapters lack it).

    A pre-spawned tune worker (bench/worker/main.py, Prebuild) calls it in a background thread after
    importing the library and BEFORE it may touch CUDA, while the previous backend is timing on
    the GPU: compile what `prepare()` would JIT-compile for these workloads into the library's
    on-disk cache (nvcc / ninja: CPU work). It must not create a CUDA context, allocate on the GPU
    or launch a kernel. It may raise: the worker records the error and prepare() compiles as
    usual. Returns a summary: {"modules": [names], "built": n, "cached": n, "error": str | None}."""

    def prebuild(self, workloads: Sequence[HasKind | str], *, dtype: str, head_size: int,
                 num_q_heads: int | None = None, num_kv_heads: int | None = None, kv_cache_dtype: str = "auto",
                 capability: tuple[int, int] | list[int] | None = None) -> PrebuildSummary:
        """`workloads`: bench.workloads.WorkloadSpec items (kind, batch, lengths) this worker will time."""


class TritonPrecompilingAdapter(Protocol):
    """An OPTIONAL fact an adapter may state (not part of KernelAdapter).

    `precompiles_triton` True: `prepare()`'s first call JIT-compiles Triton kernels launched as
    `kernel[grid](...)` (no multi-config `triton.autotune`), so calling `prepare()` once with Triton
    launches turned into compiles (attention/kernels/triton_precompile.CompileOnly) compiles, ahead
    of the rows and several at once, the very kernels the rows' first calls look up. The tune
    worker does that after "go" for every planned row (bench/worker/precompile.py), with its own
    adapter instances, then runs the rows as before. prepare() must tolerate an output nothing
    wrote (no host read of kernel results inside it)."""

    precompiles_triton: bool


class KernelUnavailable(RuntimeError):
    """The provider cannot run here (missing package, wrong GPU); the message says why."""


def paged(b: Batch) -> PagedBatch:
    """The batch a dense adapter's prepare() gets: its unsupported_reason refused MLA workloads
    (shape_kind_reason), so the harness built a paged batch (a no-op at run time)."""
    return cast("PagedBatch", b)


def latent(b: Batch) -> MlaBatch:
    """The batch an MLA adapter's prepare() gets: its unsupported_reason refused dense workloads."""
    return cast("MlaBatch", b)


def installed_version(*distributions: str) -> str | None:
    """Version of the first installed distribution among `distributions`, without importing it."""
    for dist in distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def module_importable(module: str) -> str | None:
    """None if `module` imports, else a one-line reason. Imports it (callers only do this lazily)."""
    import importlib

    try:
        importlib.import_module(module)
    except Exception as exc:  # ImportError, but also CUDA/ABI errors raised at import time
        return f"{module} not importable: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    return None


def module_missing(module: str) -> str | None:
    """Why `module` is absent (without importing it; parents are imported), or None if present."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except Exception:  # a missing parent package raises instead of returning None
        found = False
    return None if found else f"{module} is not installed"


def cuda_device_reason(device: str) -> str | None:
    """None if `device` is a CUDA device torch can use, else why not."""
    if not str(device).startswith("cuda"):
        return f"needs a CUDA device, got {device!r}"
    try:
        import torch
    except Exception:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    return None


def shape_kind_reason(w: Workload, *, mla: bool = False, fp8: bool = False) -> str | None:
    """Why a provider cannot run `w` because of what it is, not its size: an MLA workload for a
    non-MLA kernel (or the reverse), or an fp8 KV cache for a provider without an fp8 path
    (`fp8`: the provider has one)."""
    from attnsel.attention.kernels.kv_quant import is_fp8

    is_mla = getattr(w, "kv_lora_rank", None) is not None
    if is_mla != mla:
        return "an MLA (latent) workload: not this kernel's shape" if is_mla else "needs an MLA (latent) workload"
    kv = getattr(w, "kv_cache_dtype", "auto")
    if is_fp8(kv) and not fp8:
        return f"--kv-cache-dtype {kv}: this provider has no fp8 KV-cache path in attnsel"
    return None


def compute_capability(device: str = "cuda") -> tuple[int, int] | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]
    except Exception:
        return None
