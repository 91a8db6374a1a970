"""Timing statistics and the noise gate on synthetic samples (docs/measuring.md §1 and §4: median with
p20/p80, budgets of 25/100 ms, nvbench's >= 10 samples, "noisy" instead of a false winner)."""

import random

import pytest

from attnsel.bench.timing import stats as T


def test_median_and_percentiles_match_numpys_linear_method():
    samples = [float(v) for v in range(1, 101)]  # 1..100
    random.Random(0).shuffle(samples)
    stats = T.summarize(samples)
    # numpy.percentile(range(1, 101), [20, 50, 80]) == [20.8, 50.5, 80.2]
    assert stats.median_ms == pytest.approx(50.5)
    assert stats.p20_ms == pytest.approx(20.8)
    assert stats.p80_ms == pytest.approx(80.2)
    assert (stats.n, stats.min_ms, stats.max_ms) == (100, 1.0, 100.0)


def test_median_ignores_a_few_outliers_that_move_the_mean():
    samples = [1.0] * 18 + [50.0, 60.0]  # two preempted iterations
    stats = T.summarize(samples)
    assert stats.median_ms == 1.0
    assert stats.mean_ms > 5.0


def test_no_samples_is_an_error():
    with pytest.raises(ValueError):
        T.summarize([])


def test_budgets_turn_into_counts_like_bench_gpu_time():
    # 0.01 ms kernel: 25 ms / 0.01 = 2500 warm-up calls, 50 ms would be 5000 samples: capped
    _warmup, repeat = T.counts_from_budget(0.01)
    assert repeat == T.MAX_SAMPLES
    # 2 ms kernel: ceil(25 / 2) = 13 warm-up calls, ceil(50 / 2) = 25 timed calls
    assert T.counts_from_budget(2.0) == (13, 25)
    # 40 ms kernel: the budget would give 3 samples; nvbench's floor of 10 wins
    assert T.counts_from_budget(40.0)[1] == 10


def _stats(center, spread, n=50, seed=0):
    rng = random.Random(seed)
    return T.summarize([center + rng.uniform(-spread, spread) for _ in range(n)])


def test_clear_difference_names_a_winner():
    a, b = _stats(1.00, 0.005), _stats(1.20, 0.005, seed=1)
    result = T.compare(a, b)
    assert result.verdict == "faster" and result.decided
    assert result.speedup == pytest.approx(1.2, rel=0.01)
    assert T.compare(b, a).verdict == "slower"


def test_difference_inside_the_spread_is_noisy():
    # 3% apart, each jittering +-10%: the p20-p80 bands overlap
    a, b = _stats(1.00, 0.10), _stats(1.03, 0.10, seed=1)
    result = T.compare(a, b)
    assert result.verdict == "noisy" and not result.decided
    assert "spread" in result.reason


def test_tight_but_tiny_difference_is_below_the_relative_threshold():
    # 1% apart with almost no jitter: separable, but below the documented 2% bar
    a, b = _stats(1.00, 0.0005), _stats(1.01, 0.0005, seed=1)
    assert T.compare(a, b).verdict == "noisy"
    assert T.compare(a, b, relative_threshold=0.005).verdict == "faster"


def test_fewer_than_ten_samples_never_names_a_winner():
    a, b = _stats(1.0, 0.001, n=9), _stats(2.0, 0.001, n=50)
    assert T.compare(a, b).verdict == "too few samples"


def test_bandwidth_and_percent_of_peak_match_the_h200_anchor():
    # docs/gpu-facts.md §1: 64 x 4096 decode, 32/8 heads, d128, bf16 -> 0.259 ms at 4.15 TB/s, 86% of 4.81 TB/s
    kv_bytes = 64 * 4096 * 8 * 128 * 2 * 2
    q_and_o = 2 * 64 * 32 * 128 * 2
    bw = T.bandwidth_bytes_per_s(kv_bytes + q_and_o, 0.259)
    assert bw / 1e12 == pytest.approx(4.15, abs=0.01)
    peak = 6016 / 8 * 3201e6 * 2
    assert T.percent_of_peak(bw, peak) == pytest.approx(86, abs=1)
    assert T.percent_of_peak(bw, None) is None


def test_tflops_for_prefill():
    assert T.tflops(2e12, 1000.0) == pytest.approx(2.0)
    assert T.tflops(0, 1.0) is None
