"""The GPU timers (bench/timing/gpu.py): CUPTI attribution on CPU from synthetic activity records,
and on a GPU (skipped without CUDA) the launch modes and timers against each other."""

import pytest

from attnsel.bench.timing import gpu as G
from attnsel.bench.timing import stats as T


def test_each_call_gets_only_the_kernels_it_launched():
    # two timed calls; the L2 flush (correlation 1) is launched before the first window opens and
    # a stray kernel from another stream (correlation 99) was launched by nobody in a window
    windows = [(100, 110), (200, 210)]
    launches = [(90, 1), (101, 2), (105, 3), (201, 4)]
    kernels = [(95, 99, 1), (120, 130, 2), (131, 160, 3), (400, 500, 99), (220, 228, 4)]
    assert G.kernel_spans_ns(windows, launches, kernels) == [40, 8]


def test_a_graph_replay_counts_every_kernel_of_the_graph():
    # a CUDA-graph launch is one API call; every kernel node carries its correlation id
    spans = G.kernel_spans_ns([(0, 5)], [(1, 7)], [(10, 20, 7), (22, 30, 7), (31, 35, 7)])
    assert spans == [25]


def test_a_call_that_launched_nothing_is_reported_as_missing():
    assert G.kernel_spans_ns([(0, 5), (10, 15)], [(1, 7)], [(3, 4, 7)]) == [1, None]


def test_events_are_the_fallback_when_cupti_is_absent(monkeypatch):
    monkeypatch.setattr(G, "cupti_unavailable_reason", lambda: "cupti-python is not installed")
    timer, note = G.resolve_timer("auto")
    assert timer == "events" and "cupti-python is not installed" in note
    assert G.resolve_timer("events") == ("events", None)
    with pytest.raises(ValueError):
        G.resolve_timer("stopwatch")


@pytest.mark.gpu
def test_cold_l2_stays_below_peak_and_hot_is_not_slower():
    import torch

    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    src = torch.randn(l2 // 8, device="cuda", dtype=torch.float16)  # 1/4 of L2: fits when hot
    fn = lambda: src.sum()  # noqa: E731 -- reads every byte once
    cold = G.time_call(fn, cold_l2=True, timer="events")
    hot = G.time_call(fn, cold_l2=False, timer="events")
    assert cold.stats.n >= T.MIN_SAMPLES and cold.l2 == "cold"
    assert hot.stats.median_ms <= cold.stats.median_ms * 1.05
    bw = T.bandwidth_bytes_per_s(src.numel() * 2, cold.stats.median_ms)
    assert bw < 6e12  # no current GPU reads HBM faster than 6 TB/s; a hot-L2 bug would exceed it


@pytest.mark.gpu
def test_graph_replay_and_eager_agree_on_a_large_kernel_and_cupti_agrees_with_events():
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    fn = lambda: a @ a  # noqa: E731 -- one ~0.1 ms kernel: launch mode and timer barely matter
    eager = G.time_call(fn, launch="eager", timer="events", cold_l2=False)
    graph = G.time_call(fn, launch="graph", timer="events", cold_l2=False)
    assert graph.mode == "graph" and eager.mode == "eager"
    assert graph.stats.median_ms == pytest.approx(eager.stats.median_ms, rel=0.1)
    if G.cupti_unavailable_reason() is None:
        cupti = G.time_call(fn, launch="graph", timer="cupti", cold_l2=False)
        assert cupti.timer == "cupti"
        assert cupti.stats.median_ms == pytest.approx(graph.stats.median_ms, rel=0.1)
    # where the row's timing wall went: every part of time_call accounted, none negative
    for result, parts in ((graph, {"graph_capture", "estimate", "warmup", "timed"}),
                          (eager, {"prepare", "estimate", "warmup", "timed"})):
        assert parts <= set(result.host_s) and all(v >= 0 for v in result.host_s.values())
        assert result.to_dict()["host_s"].keys() == result.host_s.keys()


@pytest.mark.gpu
def test_rows_timed_one_after_another_with_cupti_each_read_their_own_kernels():
    # CUPTI stays set up between rows (no finalize): a row must still see only its own calls
    import torch

    if G.cupti_unavailable_reason() is not None:
        pytest.skip("needs cupti-python")
    small, large = (torch.randn(n, n, device="cuda", dtype=torch.float16) for n in (1024, 4096))
    first = G.time_call(lambda: large @ large, launch="graph", timer="cupti", cold_l2=False)
    second = G.time_call(lambda: small @ small, launch="graph", timer="cupti", cold_l2=False)
    again = G.time_call(lambda: large @ large, launch="graph", timer="cupti", cold_l2=False)
    assert {first.timer, second.timer, again.timer} == {"cupti"}
    assert second.stats.median_ms < first.stats.median_ms / 8  # 1/64 of the work
    assert again.stats.median_ms == pytest.approx(first.stats.median_ms, rel=0.1)


def test_a_backends_timing_host_seconds_are_the_sum_of_its_rows_and_absent_for_older_rows():
    from attnsel.bench.tune import phases

    rows = [{"timing": {"host_s": {"timed": 0.05, "cupti_stop": 0.02}}},
            {"timing": {"host_s": {"timed": 0.07, "graph_capture": 0.01}}},
            {"timing": {"median_ms": 0.1}}, {"status": "error"}]
    assert phases.timing_host_s(rows) == {"timed": 0.12, "cupti_stop": 0.02, "graph_capture": 0.01}
    assert phases.timing_host_s(rows[2:]) == {}
    result = T.TimingResult(T.summarize([1.0, 2.0]), mode="eager", l2="cold", warmup_calls=1, samples_ms=(1.0, 2.0))
    assert "host_s" not in result.to_dict()  # recorded rows replay as they were written


def test_the_stopwatch_adds_each_part_since_the_previous_mark(monkeypatch):
    clock = iter([10.0, 10.5, 11.0, 12.0, 12.25])
    monkeypatch.setattr(G.time, "perf_counter", lambda: next(clock))
    host: dict = {}
    mark = G._Stopwatch(host)
    mark("warmup")
    mark("timed")
    mark.restart()
    mark("timed")
    assert host == {"warmup": 0.5, "timed": 0.75}
