"""Timing GPU kernels the way the best kernel benchmarks do it (docs/measuring.md §1).

Semantics copied from FlashInfer's ``bench_gpu_time`` (``flashinfer/testing/utils.py``):

* **Cold L2 by default.** Before every timed call a buffer of 2 x L2 bytes is zeroed
  ("use 2x L2 size to ensure complete flush"); the flush sits outside the timed span.
  Decode KV of a few MiB fits in L2 and would otherwise report bandwidth above HBM peak.
* **Budgets, not counts.** Warm-up and repetition counts come from 25 ms / 100 ms budgets over a
  5-call estimate, so a 5 us kernel gets many samples and a 5 ms kernel a few.
* **Median with p20/p80** of per-call samples.

This module holds the statistics and budgets (pure Python, checked in CI on synthetic samples);
bench/timing/gpu.py launches and times calls on the GPU (eager or CUDA graph, CUPTI or events).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# Budgets from FlashInfer's bench_gpu_time defaults (dry_run_time_ms=25, repeat_time_ms=100).
WARMUP_BUDGET_MS = 25.0
# FlashInfer uses 100 ms; 50 ms still gives 10-200 samples per row and kept the default sweep's
# warm wall time in reach of its 60 s target (100 ms: 89 s warm on an H200, 2026-11-21).
REPEAT_BUDGET_MS = 50.0
ESTIMATE_CALLS = 5
# nvbench's cold-mode quality gate needs at least 10 samples before it trusts a measurement.
MIN_SAMPLES = 10
# Caps the sample count so a 3 us kernel + a 40 us flush does not turn a 100 ms budget into
# seconds of wall time per row (the sweep must stay under 3 minutes per shape, issue "tune").
MAX_SAMPLES = 200
# nvbench holds the stream with a spin kernel while the host queues the launch: without it a
# small kernel's start event fires while the Python launch is still being prepared, and host
# overhead lands in the "GPU time" (seen on an H200: a 25 us Triton decode read 25-70 us).
SPIN_CLOCK_HZ = 2.0e9  # assumed SM clock for the spin; a slower clock only spins longer
MAX_SPIN_S = 1e-3
# A winner must beat the runner-up by more than this relative margin (and by more than the
# measured spread, see `compare`) before we name it; below it the honest answer is "noisy".
RELATIVE_NOISE_THRESHOLD = 0.02


@dataclass(frozen=True)
class TimingStats:
    """Summary of per-call times in milliseconds."""

    n: int
    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float

    @property
    def relative_spread(self) -> float:
        """(p80 - p20) / median: the width of the middle 60% relative to the median."""
        if self.median_ms <= 0:
            return math.inf
        return (self.p80_ms - self.p20_ms) / self.median_ms

    def to_dict(self) -> dict:
        d = asdict(self)
        d["relative_spread"] = self.relative_spread
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TimingStats:
        return cls(**{k: d[k] for k in ("n", "median_ms", "p20_ms", "p80_ms", "min_ms", "max_ms", "mean_ms")})


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already-sorted samples.

    >>> percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50)
    3.0
    >>> percentile([1.0, 2.0, 3.0, 4.0, 5.0], 20)
    1.8
    """
    if not sorted_samples:
        raise ValueError("no samples")
    if len(sorted_samples) == 1:
        return float(sorted_samples[0])
    pos = (len(sorted_samples) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_samples) - 1)
    frac = pos - lo
    return float(sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * frac)


def summarize(samples_ms: Sequence[float]) -> TimingStats:
    """Median with p20/p80 (FlashInfer reports medians; the 20/80 band is our noise measure)."""
    values = sorted(float(s) for s in samples_ms)
    if not values:
        raise ValueError("no samples to summarize")
    return TimingStats(
        n=len(values),
        median_ms=percentile(values, 50),
        p20_ms=percentile(values, 20),
        p80_ms=percentile(values, 80),
        min_ms=values[0],
        max_ms=values[-1],
        mean_ms=sum(values) / len(values),
    )


@dataclass(frozen=True)
class Comparison:
    """Outcome of the noise gate between two measurements of the same work."""

    verdict: str  # "faster" (a beats b), "slower" (b beats a), "noisy", "too few samples"
    speedup: float  # b.median / a.median: > 1 means a is faster
    margin_ms: float  # |a.median - b.median|
    required_ms: float  # what the margin had to exceed
    reason: str

    @property
    def decided(self) -> bool:
        return self.verdict in ("faster", "slower")

    def to_dict(self) -> dict:
        return asdict(self)


def compare(
    a: TimingStats,
    b: TimingStats,
    *,
    relative_threshold: float = RELATIVE_NOISE_THRESHOLD,
    min_samples: int = MIN_SAMPLES,
) -> Comparison:
    """The noise gate: say which of two timings is faster only when the data supports it.

    Rule (nvbench-style, documented in docs/measuring.md §4):
      * both sides need at least ``min_samples`` samples (nvbench: >= 10), else "too few samples";
      * the difference of medians must exceed BOTH the combined spread
        ``((a.p80 - a.p20) + (b.p80 - b.p20)) / 2`` and ``relative_threshold`` x the slower median;
      * otherwise the verdict is "noisy" and no winner is named.

    >>> fast = TimingStats(20, 1.0, 0.99, 1.01, 0.98, 1.05, 1.0)
    >>> slow = TimingStats(20, 1.2, 1.19, 1.21, 1.18, 1.25, 1.2)
    >>> compare(fast, slow).verdict
    'faster'
    """
    speedup = b.median_ms / a.median_ms if a.median_ms > 0 else math.inf
    margin = abs(a.median_ms - b.median_ms)
    spread = ((a.p80_ms - a.p20_ms) + (b.p80_ms - b.p20_ms)) / 2.0
    relative = relative_threshold * max(a.median_ms, b.median_ms)
    required = max(spread, relative)
    if min(a.n, b.n) < min_samples:
        return Comparison("too few samples", speedup, margin, required,
                          f"needs >= {min_samples} samples each, got {a.n} and {b.n}")
    if margin <= required:
        what = "the p20-p80 spread" if spread >= relative else f"{relative_threshold:.0%} of the median"
        return Comparison("noisy", speedup, margin, required,
                          f"difference {margin * 1000:.1f} us is within {what} ({required * 1000:.1f} us)")
    verdict = "faster" if a.median_ms < b.median_ms else "slower"
    return Comparison(verdict, speedup, margin, required,
                      f"difference {margin * 1000:.1f} us exceeds the noise bound {required * 1000:.1f} us")


def counts_from_budget(
    estimate_ms: float,
    *,
    warmup_budget_ms: float = WARMUP_BUDGET_MS,
    repeat_budget_ms: float = REPEAT_BUDGET_MS,
    min_samples: int = MIN_SAMPLES,
    max_samples: int = MAX_SAMPLES,
) -> tuple[int, int]:
    """(warm-up calls, timed calls) from the per-call estimate, the way bench_gpu_time does.

    >>> counts_from_budget(1.0)   # 25 ms / 1 ms warm-up calls, 50 ms / 1 ms timed calls
    (25, 50)
    >>> counts_from_budget(50.0)   # slow kernel: still the nvbench minimum of 10 samples
    (1, 10)
    """
    estimate_ms = max(estimate_ms, 1e-6)
    warmup = max(1, math.ceil(warmup_budget_ms / estimate_ms))
    repeat = math.ceil(repeat_budget_ms / estimate_ms)
    repeat = min(max(repeat, min_samples), max(max_samples, min_samples))
    warmup = min(warmup, max(max_samples, min_samples))
    return warmup, repeat


@dataclass(frozen=True)
class TimingResult:
    stats: TimingStats
    mode: str  # how the call was launched: "eager" | "graph" (a CUDA-graph replay)
    l2: str  # "cold" or "hot"
    warmup_calls: int
    samples_ms: tuple[float, ...]
    calls_per_sample: int = 1
    timer: str = "events"  # "cupti" (kernel spans) | "events" (CUDA events behind a GPU spin)
    note: str | None = None
    # host wall seconds of each part of timing this call (graph capture, estimate, warm-up, timed
    # calls, CUPTI start/stop): where a row's `timing_s` goes beyond the GPU time it measured
    host_s: dict | None = None

    def to_dict(self, *, with_samples: bool = False) -> dict:
        d = {
            "mode": self.mode,
            "timer": self.timer,
            "l2": self.l2,
            "warmup_calls": self.warmup_calls,
            "calls_per_sample": self.calls_per_sample,
            "note": self.note,
            **self.stats.to_dict(),
        }
        if self.host_s is not None:
            d["host_s"] = {k: round(v, 4) for k, v in self.host_s.items()}
        if with_samples:
            d["samples_ms"] = list(self.samples_ms)
        return d


# ---------------------------------------------------------------------------------------------
# The GPU spin that keeps host launch time out of event timings (used by bench/timing/gpu.py)
# ---------------------------------------------------------------------------------------------


def spin_cycles_for(host_launch_s: float, torch_module: Any = None) -> int:
    """GPU cycles to spin so the host can queue the timed call (1.5x its queueing time + 20 us).

    >>> spin_cycles_for(40e-6)
    160000
    >>> spin_cycles_for(1.0)  # capped at MAX_SPIN_S
    2000000
    """
    if torch_module is not None and not hasattr(torch_module.cuda, "_sleep"):
        return 0
    seconds = min(MAX_SPIN_S, 1.5 * max(0.0, host_launch_s) + 20e-6)
    return round(seconds * SPIN_CLOCK_HZ)


def gpu_spin(torch_module: Any, cycles: int) -> None:  # torch (imported by the caller)
    torch_module.cuda._sleep(int(cycles))


# ---------------------------------------------------------------------------------------------
# Derived figures (pure)
# ---------------------------------------------------------------------------------------------


def bandwidth_bytes_per_s(bytes_moved: float | None, median_ms: float) -> float | None:
    """Bytes of Q, K, V read and O written (actual lengths) over the median time."""
    if not bytes_moved or not median_ms or median_ms <= 0:
        return None
    return bytes_moved / (median_ms / 1e3)


def percent_of_peak(achieved_bytes_per_s: float | None, peak_bytes_per_s: float | None) -> float | None:
    """>100% means a hot L2 or a bytes-counting bug (docs/measuring.md §6)."""
    if not achieved_bytes_per_s or not peak_bytes_per_s:
        return None
    return 100.0 * achieved_bytes_per_s / peak_bytes_per_s


def tflops(flops: float | None, median_ms: float) -> float | None:
    if not flops or not median_ms or median_ms <= 0:
        return None
    return flops / (median_ms / 1e3) / 1e12
