"""Triton kernels compiled before their first launch, several at once (docs/tune-performance.md, change 10).

Cold, vLLM's TRITON_ATTN rows compile its unified-attention kernels one by one, each at the first
row that needs a new specialisation (block size, 2D/3D, the int arguments Triton specialises on).
`CompileOnly` lets the tune worker run every planned row's prepared call once with each Triton
launch turned into a compile: inside it,

* `JITFunction.run` is called with `warmup=True` (triton/runtime/jit.py, `run`: with warmup the
  kernel is looked up or compiled and returned, never launched; Triton 3.6 jit.py:695-746, 3.8
  jit.py:726-781), so vLLM's own `kernel[grid](...)` (vllm/v1/attention/ops/
  triton_unified_attention.py:1090 in 0.26) computes its own key and compiles, and what vLLM does
  with the unwritten output afterwards is harmless;
* Triton's `AsyncCompileMode(executor)` is active (triton/runtime/_async_compile.py): `_do_compile`
  submits each new compile to our thread pool instead of compiling in place (jit.py:826-852 in
  3.6), deduplicated by Triton's own cache key; leaving it puts every compiled kernel in the
  JITFunction's in-memory cache (and Triton's disk cache), under the key its launch computes;
* then each compiled kernel's handles are loaded in the same pool (`CompiledKernel._init_handles`:
  the launcher stub built with the C compiler, once per signature, and the module loaded on the
  GPU): what the first launch would do next.

So a row's first call afterwards finds its kernel compiled and loaded: the same kernel, only
compiled earlier. A kernel behind `triton.autotune` with several configs is not touched here (its
benchmark would time launches that do not run): it compiles at its first real call as before.
vLLM's unified attention has no autotuner in 0.26 or 0.33.

Torch-free; triton is imported when a `CompileOnly` is entered.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime._async_compile import AsyncCompileMode
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

_COMPILE_ONLY: ContextVar[bool] = ContextVar("attnsel_triton_compile_only", default=False)
_INSTALL_LOCK = threading.Lock()
_installed = False
_autotuners_skipped = 0


def compile_only_active() -> bool:
    """True inside a CompileOnly block (in the thread that entered it)."""
    return _COMPILE_ONLY.get()


def install_compile_only_switch() -> None:
    """Wraps `JITFunction.run` (and `Autotuner.run`) once per process so that, while a CompileOnly
    block is active in the calling thread, a launch becomes `warmup=True`. Outside such a block
    both behave exactly as Triton's own."""
    global _installed
    with _INSTALL_LOCK:
        if _installed:
            return
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction

        jit_run = JITFunction.run
        tune_run = Autotuner.run

        def run(self: JITFunction, *args: object, grid: object, warmup: bool, **kwargs: object) -> object:
            return jit_run(self, *args, grid=grid, warmup=warmup or _COMPILE_ONLY.get(), **kwargs)

        def autotuned_run(self: Autotuner, *args: object, **kwargs: object) -> object:
            global _autotuners_skipped
            if _COMPILE_ONLY.get() and len(getattr(self, "configs", ())) > 1:
                _autotuners_skipped += 1  # its benchmark needs real launches: left to the first real call
                return None
            return tune_run(self, *args, **kwargs)

        JITFunction.run = run  # type: ignore[method-assign]
        Autotuner.run = autotuned_run  # type: ignore[method-assign]
        _installed = True


@dataclass
class CompileReport:
    """What one CompileOnly block did (the tune worker records it: bench/worker/precompile.py)."""

    threads: int
    kernels: int = 0  # distinct compiles Triton was asked for (its cache key)
    compiled: int = 0
    loaded: int = 0  # handles loaded (launcher built, module on the GPU) after compiling
    errors: list[str] = field(default_factory=list)
    autotuned_skipped: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"threads": self.threads, "kernels": self.kernels, "compiled": self.compiled, "loaded": self.loaded,
                "errors": list(self.errors[:5]), "error_count": len(self.errors),
                "autotuned_skipped": self.autotuned_skipped, "seconds": round(self.seconds, 3)}


def _one_line(exc: BaseException) -> str:
    """Type, first and last line: Triton's compile errors put the source location first and the
    reason last (`CompilationError: at 2:4: ... <reason>`)."""
    lines = [line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text[:300]


class CompileOnly:
    """`with CompileOnly(threads, load=True) as block:` Triton launches in this thread only compile,
    `threads` at a time; on exit the compiles are awaited, put in the kernels' caches and (load)
    their handles loaded. Never raises for a failed compile: `block.report.errors` says it (the
    row that needs that kernel compiles it again at its first call and fails as it did before)."""

    def __init__(self, threads: int, *, load: bool = True):
        self.report = CompileReport(threads=max(1, int(threads)))
        self.load = load
        self._executor: ThreadPoolExecutor | None = None
        self._mode: AsyncCompileMode | None = None
        self._token: Token[bool] | None = None
        self._started = 0.0
        self._skipped_before = 0

    def __enter__(self) -> CompileOnly:
        from triton.runtime._async_compile import AsyncCompileMode

        install_compile_only_switch()
        self._started = time.perf_counter()
        self._skipped_before = _autotuners_skipped
        self._executor = ThreadPoolExecutor(self.report.threads, thread_name_prefix="attnsel-triton-compile")
        self._mode = AsyncCompileMode(self._executor, ignore_errors=True)
        self._mode.__enter__()
        self._token = _COMPILE_ONLY.set(True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        from triton.runtime import _async_compile

        assert self._mode is not None and self._token is not None  # set by __enter__
        _COMPILE_ONLY.reset(self._token)
        futures: list[Future[CompiledKernel]] = list(self._mode.raw_futures)  # Triton 3.9 clears them on exit
        try:
            self._mode.__exit__(None, None, None)  # awaits every compile, fills the kernel caches
        except BaseException as exc:  # noqa: BLE001 -- recorded; the rows compile as before
            self.report.errors.append(_one_line(exc))
        finally:
            _async_compile.active_mode.set(None)  # Triton 3.6 leaves it set when finalising raised
        try:
            self._account(futures)
        finally:
            assert self._executor is not None
            self._executor.shutdown(wait=True)
            self.report.autotuned_skipped = _autotuners_skipped - self._skipped_before
            self.report.seconds = time.perf_counter() - self._started

    def _account(self, futures: list[Future[CompiledKernel]]) -> None:
        kernels: list[CompiledKernel] = []
        for future in futures:
            error = future.exception()
            if error is not None:
                self.report.errors.append(_one_line(error))
            else:
                kernels.append(future.result())
        self.report.kernels = len(futures)
        self.report.compiled = len(kernels)
        if self.load and kernels:
            self._load_handles(kernels)

    def _load_handles(self, kernels: list[CompiledKernel]) -> None:
        """`_init_handles` of each compiled kernel, in the pool: the per-signature launcher (a C
        compile, cached on disk like the kernel) and the module load, as the first launch would
        (triton/compiler/compiler.py, CompiledKernel._init_handles: 3.6 compiler.py:436-471)."""
        from triton.runtime.driver import driver

        device = driver.active.get_current_device()

        def load(kernel: CompiledKernel) -> None:
            driver.active.set_current_device(device)  # a pool thread starts on the default device
            kernel._init_handles()

        assert self._executor is not None
        done, _ = wait([self._executor.submit(load, k) for k in kernels])
        for future in done:
            error = future.exception()
            if error is None:
                self.report.loaded += 1
            else:
                self.report.errors.append(f"loading: {_one_line(error)}")
