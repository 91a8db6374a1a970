"""GPU timers: how one prepared call is launched (eager or CUDA-graph replay, as vLLM would launch
it) and how its time is read (CUPTI kernel spans where cupti-python works, CUDA events otherwise).

Semantics follow FlashInfer's ``bench_gpu_time`` (flashinfer/testing/utils.py), so that a row
and FlashInfer's own figure for the same call can be compared (bench/tools/fidelity.py):

* **Cold L2 by default**: a 2 x L2 buffer is zeroed before every timed call, outside the span.
* **Budgets, not counts**: warm-up and sample counts from 25 / 50 ms budgets over an estimate.
* **Launch**: "eager" calls the function; "graph" captures ONE call in a CUDA graph and times
  replays (vLLM replays full decode graphs; FlashInfer's CUPTI + graph mode does the same). The
  flush between replays keeps every replay cold without rotating input copies.
* **Timer**: "cupti" records the kernels each call launched (CUPTI activity records, matched to
  the call by the correlation ids of the runtime/driver launches made inside the call) and takes
  first kernel start to last kernel end: kernel-exact, no host time, no event resolution. Below
  ~50 us CUDA events read -16% to +31% off that on an H100 (docs/gpu-facts.md §4), which is why CUPTI is
  preferred. "events" brackets the call with CUDA events, behind a GPU spin so that host launch
  time stays out of the span (nvbench's blocking kernel).

torch and cupti are imported inside the functions; `kernel_spans_ns` is pure (tested on CPU).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence
from typing import Any

from attnsel.bench.timing import stats as T
from attnsel.bench.timing.launch_mode import TIMERS, LaunchMode, Timer

LAUNCHES = (LaunchMode.EAGER, LaunchMode.GRAPH)
CUPTI_MIN_MAJOR = 13  # FlashInfer: "CUPTI needs to be >= 13.0.0"
CUPTI_BUFFER_BYTES = 8 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Pure: which kernels belong to which call


def kernel_spans_ns(
    windows: Sequence[tuple[int, int]],
    launches: Sequence[tuple[int, int]],
    kernels: Sequence[tuple[int, int, int]],
) -> list[int | None]:
    """For each host window (start, end) of one timed call: last kernel end - first kernel start of
    the kernels whose launch (runtime/driver API record (start timestamp, correlation id)) began
    inside the window. `kernels` are (start, end, correlation id). None for a window without any
    kernel (the caller treats that as a failed measurement).

    >>> kernel_spans_ns([(0, 10), (100, 110)], [(2, 7), (3, 8), (101, 9)],
    ...                 [(20, 30, 7), (31, 45, 8), (120, 150, 9), (5, 6, 99)])
    [25, 30]
    """
    ordered = sorted(launches)
    starts = [start for start, _ in ordered]
    by_correlation: dict[int, list[tuple[int, int]]] = {}
    for start, end, correlation in kernels:
        by_correlation.setdefault(correlation, []).append((start, end))
    spans: list[int | None] = []
    for begin, end in windows:
        lo, hi = bisect.bisect_left(starts, begin), bisect.bisect_right(starts, end)
        found = [k for _, corr in ordered[lo:hi] for k in by_correlation.get(corr, ())]
        spans.append(max(e for _, e in found) - min(s for s, _ in found) if found else None)
    return spans


# ---------------------------------------------------------------------------------------------
# CUPTI


def cupti_unavailable_reason() -> str | None:
    """None if cupti-python >= 13 imports here, else why not (then events are used)."""
    from importlib import metadata

    try:
        version = metadata.version("cupti-python")
    except metadata.PackageNotFoundError:
        return "cupti-python is not installed"
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = 0
    if major < CUPTI_MIN_MAJOR:
        return f"cupti-python {version} is older than {CUPTI_MIN_MAJOR}.0"
    try:
        from cupti import cupti  # type: ignore # noqa: F401
    except Exception as exc:  # noqa: BLE001 -- missing libcupti, ABI mismatch
        return f"cupti-python does not load: {type(exc).__name__}: {exc}"
    return None


# CUPTI's activity API is set up once per process and left set up between recordings: a recording
# enables the activity kinds, and its stop flushes and disables them (the range mode of NVIDIA's
# cupti-python samples). Finalizing after every recording, as FlashInfer's bench_gpu_time does,
# made each row pay CUPTI's set-up again: 2.2 s to start and 0.6-1.7 s to stop per 80-row backend
# on an H200 (timing_host_s, docs/tune-performance.md). ATTNSEL_CUPTI_FINALIZE=1 finalizes after
# every recording, as before (the A/B of bench/tools/cupti_ab.py).
CUPTI_FINALIZE_ENV = "ATTNSEL_CUPTI_FINALIZE"


class _CuptiActivity:
    """This process's CUPTI activity API: callbacks registered once, records routed to the recorder
    that is recording (records delivered while none is go nowhere)."""

    KERNEL_KINDS = ("CONCURRENT_KERNEL",)
    LAUNCH_KINDS = ("RUNTIME", "DRIVER")
    _process: _CuptiActivity | None = None

    def __init__(self, cupti: Any):
        self.cupti = cupti
        self.kernel_kinds = [getattr(cupti.ActivityKind, name) for name in self.KERNEL_KINDS]
        self.launch_kinds = [getattr(cupti.ActivityKind, name) for name in self.LAUNCH_KINDS]
        self.registered = False
        self.recorder: CuptiRecorder | None = None

    @classmethod
    def of_process(cls, cupti: Any) -> _CuptiActivity:
        if cls._process is None or cls._process.cupti is not cupti:
            cls._process = cls(cupti)
        return cls._process

    def _requested(self) -> tuple[int, int]:
        return CUPTI_BUFFER_BYTES, 0

    def _completed(self, activities: Any) -> None:
        recorder = self.recorder
        if recorder is None:
            return
        for activity in activities:
            if activity.kind in self.kernel_kinds:
                recorder.kernels.append((int(activity.start), int(activity.end), int(activity.correlation_id)))
            elif activity.kind in self.launch_kinds:
                recorder.launches.append((int(activity.start), int(activity.correlation_id)))

    def begin(self, recorder: CuptiRecorder) -> None:
        self.recorder = recorder
        try:
            for kind in self.kernel_kinds + self.launch_kinds:
                self.cupti.activity_enable(kind)
            if not self.registered:
                self.cupti.activity_register_callbacks(self._requested, self._completed)
                self.registered = True
        except Exception:
            self._disable_quietly()
            raise

    def end(self, finalize: bool) -> None:
        """Delivers the recording's records, then disables the kinds. Without finalize the flush is
        forced, so that no buffer of this recording is left for the next one (the caller has
        synchronized, so its kernels' records are complete)."""
        try:
            self.cupti.activity_flush_all(0 if finalize else int(self.cupti.ActivityFlag.FLUSH_FORCED))
            for kind in self.kernel_kinds + self.launch_kinds:
                self.cupti.activity_disable(kind)
            if finalize:
                self.registered = False
                self.cupti.finalize()
        finally:
            self.recorder = None

    def _disable_quietly(self) -> None:
        self.recorder = None
        for kind in self.kernel_kinds + self.launch_kinds:
            try:
                self.cupti.activity_disable(kind)
            except Exception:  # noqa: BLE001 -- a kind that was never enabled
                pass


class CuptiRecorder:
    """Kernel and launch activity records between start() and stop()."""

    def __init__(self) -> None:
        import os

        from cupti import cupti  # type: ignore

        self.cupti = cupti
        self.activity = _CuptiActivity.of_process(cupti)
        self.finalize = os.environ.get(CUPTI_FINALIZE_ENV) == "1"
        self.launches: list[tuple[int, int]] = []
        self.kernels: list[tuple[int, int, int]] = []

    def start(self) -> None:
        self.activity.begin(self)

    def now(self) -> int:
        return int(self.cupti.get_timestamp())

    def stop(self) -> None:
        self.activity.end(self.finalize)


# ---------------------------------------------------------------------------------------------
# Launching and timing one call


def l2_flush_bytes(device_index: int = 0) -> int:
    """2 x the device's L2 (FlashInfer: "Use 2x L2 size to ensure complete flush")."""
    import torch

    l2 = int(getattr(torch.cuda.get_device_properties(device_index), "L2_cache_size", 0) or 0)
    return 2 * l2 if l2 > 0 else 256 * 2**20  # Triton's do_bench clears 256 MB when L2 is unknown


def measure_first_call(fn: Callable[[], object]) -> float:
    """Wall seconds of one call + synchronize: JIT/compile cost, reported apart from run time."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def graph_runner(fn: Callable[[], object]) -> Callable[[], object]:
    """One call captured in a CUDA graph (after warm-up calls on a side stream, so lazy
    allocations and autotuning happen outside the capture); returns its replay."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()

    def runner() -> None:  # the closure keeps the graph (and its memory pool) alive
        graph.replay()

    return runner


def resolve_timer(timer: str) -> tuple[Timer, str | None]:
    """("cupti" | "events", why events when CUPTI was asked for or auto found none)."""
    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {tuple(map(str, TIMERS))}, got {timer!r}")
    if timer == Timer.EVENTS:
        return Timer.EVENTS, None
    reason = cupti_unavailable_reason()
    if reason is None:
        return Timer.CUPTI, None
    return Timer.EVENTS, f"CUPTI unavailable ({reason}); timed with CUDA events"


def time_call(
    fn: Callable[[], object],
    *,
    launch: str = LaunchMode.EAGER,
    timer: str = Timer.AUTO,
    cold_l2: bool = True,
    warmup_budget_ms: float = T.WARMUP_BUDGET_MS,
    repeat_budget_ms: float = T.REPEAT_BUDGET_MS,
    max_samples: int = T.MAX_SAMPLES,
    device_index: int = 0,
) -> T.TimingResult:
    """Time `fn` launched as `launch`, read by `timer`; raises if graph capture fails (the caller
    decides whether to fall back)."""
    import torch

    if launch not in LAUNCHES:
        raise ValueError(f"launch must be one of {tuple(map(str, LAUNCHES))}, got {launch!r}")
    used_timer, note = resolve_timer(timer)
    host: dict[str, float] = {}
    mark = _Stopwatch(host)
    runner = graph_runner(fn) if launch == LaunchMode.GRAPH else fn
    mark("graph_capture" if launch == LaunchMode.GRAPH else "prepare")
    flush = torch.empty(l2_flush_bytes(device_index) if cold_l2 else 1, dtype=torch.int8, device="cuda")
    events = _EventSampler(torch, runner, flush if cold_l2 else None)
    events.learn_host_time()
    estimate = T.summarize(events.samples(T.ESTIMATE_CALLS)).median_ms
    warmup, repeat = T.counts_from_budget(estimate, warmup_budget_ms=warmup_budget_ms,
                                          repeat_budget_ms=repeat_budget_ms, max_samples=max_samples)
    mark("estimate")
    events.run_untimed(warmup)
    mark("warmup")
    samples: list[float] | None = None
    if used_timer == Timer.CUPTI:
        try:
            samples = _cupti_samples(torch, runner, flush if cold_l2 else None, repeat, host)
        except Exception as exc:  # noqa: BLE001 -- e.g. another CUPTI subscriber: fall back
            used_timer, note = Timer.EVENTS, f"CUPTI failed ({type(exc).__name__}: {exc}); timed with CUDA events"
        mark.restart()
    if samples is None:
        samples = events.samples(repeat)
        mark("timed")
    return T.TimingResult(T.summarize(samples), mode=launch, l2="cold" if cold_l2 else "hot",
                          warmup_calls=warmup, samples_ms=tuple(samples), timer=used_timer, note=note,
                          host_s=host)


class _Stopwatch:
    """Adds the seconds since the previous mark to `into[name]` (time_call's `host_s`)."""

    def __init__(self, into: dict):
        self.into, self.last = into, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = self.into.get(name, 0.0) + now - self.last
        self.last = now

    def restart(self) -> None:
        self.last = time.perf_counter()


class _EventSampler:
    """Per-call CUDA events behind a GPU spin (see the module docstring)."""

    def __init__(self, torch: Any, runner: Callable[[], object], flush: Any):
        self.torch, self.runner, self.flush = torch, runner, flush
        self.spin_cycles = 0

    def learn_host_time(self) -> None:
        queued = []
        for _ in range(T.ESTIMATE_CALLS):
            if self.flush is not None:
                self.flush.zero_()
            started = time.perf_counter()
            self.runner()
            queued.append(time.perf_counter() - started)
        self.torch.cuda.synchronize()
        self.spin_cycles = T.spin_cycles_for(sorted(queued)[len(queued) // 2], self.torch)

    def run_untimed(self, count: int) -> None:
        for _ in range(count):
            if self.flush is not None:
                self.flush.zero_()
            self.runner()
        self.torch.cuda.synchronize()

    def samples(self, count: int) -> list[float]:
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        for i in range(count):
            if self.flush is not None:
                self.flush.zero_()  # outside the timed span
            if self.spin_cycles:
                T.gpu_spin(torch, self.spin_cycles)  # holds the GPU until the call is queued
            starts[i].record()
            self.runner()
            ends[i].record()
        torch.cuda.synchronize()  # once per pass, not per call
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _cupti_samples(torch: Any, runner: Callable[[], object], flush: Any, count: int,
                   host: dict | None = None) -> list[float]:
    mark = _Stopwatch(host if host is not None else {})
    windows: list[tuple[int, int]] = []
    try:
        recorder = CuptiRecorder()
        recorder.start()
    finally:  # a CUPTI that refuses to start still costs the row these seconds (then events time it)
        mark("cupti_start")
    try:
        for _ in range(count):
            if flush is not None:
                flush.zero_()
            torch.cuda.synchronize()  # the flush and the previous call end before the window opens
            begin = recorder.now()
            runner()
            windows.append((begin, recorder.now()))
            torch.cuda.synchronize()
        mark("timed")
    finally:
        recorder.stop()
        mark("cupti_stop")
    spans = kernel_spans_ns(windows, recorder.launches, recorder.kernels)
    if any(span is None for span in spans):
        raise RuntimeError(f"CUPTI saw no kernel for {sum(s is None for s in spans)} of {count} calls")
    return [span / 1e6 for span in spans]  # type: ignore[operator]
