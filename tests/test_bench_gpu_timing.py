"""GPU-only checks of the timers (skipped without CUDA): cold-L2 timing of a small read must not
report more than the device's peak, and hot L2 must not be slower than cold (users-and-measuring §C1)."""

import pytest

from attnsel.bench import timing as T


@pytest.mark.gpu
def test_cold_l2_events_stay_below_peak_and_hot_is_not_slower():
    import torch

    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    src = torch.randn(l2 // 8, device="cuda", dtype=torch.float16)  # 1/4 of L2: fits when hot
    fn = lambda: src.sum()  # noqa: E731 -- reads every byte once
    cold = T.time_events(fn, cold_l2=True)
    hot = T.time_events(fn, cold_l2=False)
    assert cold.stats.n >= T.MIN_SAMPLES and cold.l2 == "cold"
    assert hot.stats.median_ms <= cold.stats.median_ms * 1.05
    bw = T.bandwidth_bytes_per_s(src.numel() * 2, cold.stats.median_ms)
    assert bw < 6e12  # no current GPU reads HBM faster than 6 TB/s; a hot-L2 bug would exceed it


@pytest.mark.gpu
def test_cuda_graph_mode_divides_by_calls_per_replay():
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    fn = lambda: a @ a  # noqa: E731
    events = T.time_events(fn, cold_l2=False)
    graph = T.time_cuda_graph([fn])
    assert graph.mode == "cuda_graph" and graph.calls_per_sample == T.GRAPH_CALLS_PER_REPLAY
    assert graph.stats.median_ms == pytest.approx(events.stats.median_ms, rel=0.5)
