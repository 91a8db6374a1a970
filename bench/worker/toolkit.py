"""The tune worker's boundary to torch and the kernel adapters: the `Toolkit` protocol and its loader.

`KernelToolkit` (bench/worker/kernel_toolkit.py) is the real one; CI passes a fake toolkit with fake
adapters that hang, raise or abort (tests/fixtures/tune/fake_toolkit.py). Torch-free: the module
named by the spec brings torch, when the worker loads it.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Protocol

from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.timing import stats as T

if TYPE_CHECKING:
    from attnsel.attention.kernels.base import KernelAdapter, PreparedKernel
    from attnsel.attention.kernels.mla import MlaBatch
    from attnsel.attention.kernels.paged import PagedBatch, Workload

    Batch = PagedBatch | MlaBatch  # a paged KV cache, or MLA's latent one

DEFAULT_TOOLKIT = "attnsel.bench.worker.kernel_toolkit:KernelToolkit"


class Toolkit(Protocol):
    """What the worker needs from torch and the kernels package (our own boundary)."""

    def device_info(self) -> dict: ...

    def adapters_for(self, backend: str) -> list[KernelAdapter]: ...

    def workload(self, shape: dict, spec: WorkloadSpec) -> Workload: ...

    def make_batch(self, workload: Workload, block_size: int, seed: int) -> Batch: ...

    def first_call_seconds(self, prepared: PreparedKernel) -> float: ...

    def relative_error(self, prepared: PreparedKernel, batch: Batch) -> float: ...

    def time(self, adapter: KernelAdapter, prepared: PreparedKernel, batch: Batch, workload: Workload,
             block_size: int, options: dict,
             launch: str = "eager") -> T.TimingResult: ...

    def figures(self, batch: Batch) -> tuple[float | None, float | None]: ...

    def is_out_of_memory(self, exc: BaseException) -> bool: ...

    def release(self) -> None: ...


def load_toolkit(spec: str) -> Toolkit:
    """`module:attr` or `/path/to/file.py:attr`; attr is a class or factory called with no args."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ValueError(f"toolkit spec must be 'module:attr', got {spec!r}")
    if target.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location(f"attnsel_toolkit_{abs(hash(target))}", target)
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError(f"cannot load toolkit file {target}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)()

