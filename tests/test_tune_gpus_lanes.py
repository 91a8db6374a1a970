"""`attnsel tune --gpus`: lanes made of backend parts (some of a backend's block sizes), balanced by
estimated cost, and a backend split over lanes giving the rows one GPU gives.

The planner's default grid for an H100 (bench/plan) and real worker processes with fake adapters
(tests/fixtures/tune/fake_toolkit.py), as in tests/test_tune_multi_gpu.py."""

import json
from pathlib import Path

import pytest

from attnsel.bench.plan import build as P
from attnsel.bench.plan import make_shape
from attnsel.bench.sweep import SweepOptions, items_for, run_sweep
from attnsel.bench.sweep import lanes as L
from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.run import STARTUP_ORDER, ordered_groups
from attnsel.bench.tune.phases import phase_breakdown
from attnsel.reports.tune.text import phase_line

FAKE = f"{Path(__file__).parent / 'fixtures' / 'tune' / 'fake_toolkit.py'}:FakeToolkit"
SHAPE = make_shape(128, 32, 8, "bf16")


def _order(**plan_args):
    return ordered_groups(items_for(P.build_plan(SHAPE, (9, 0), **plan_args), SweepOptions()))


def _load(lane):
    return L.lane_load([(backend, len(items)) for backend, items in lane])


def _whole_backends_max(order, lanes):
    """The most loaded lane when whole backends are placed largest first (the rule before parts)."""
    placed = [[] for _ in range(lanes)]
    for backend, items in sorted(order, key=lambda kv: -L.part_cost(kv[0], len(kv[1]))):
        lightest = min(range(lanes), key=lambda i: (_load(placed[i]), i))
        placed[lightest] = sorted(placed[lightest] + [(backend, items)], key=lambda kv: STARTUP_ORDER.index(kv[0]))
    return max(_load(lane) for lane in placed)


def _sizes(items):
    return sorted({i["block_size"] for i in items})


def _no_move_lowers_the_heaviest_lane(lanes):
    """Moving any backend's block sizes off the most loaded lane to another lane would leave one
    of the two at least as loaded as the most loaded lane is now."""
    loads = [_load(lane) for lane in lanes]
    heavy = loads.index(max(loads))
    for backend, items in lanes[heavy]:
        for dst, lane in enumerate(lanes):
            for size in _sizes(items) if dst != heavy else ():
                rows = [i for i in items if i["block_size"] == size]
                rest = [i for i in items if i["block_size"] != size]
                src_after = [(b, rest if b == backend else i) for b, i in lanes[heavy] if b != backend or rest]
                joined = dict(lane)
                joined[backend] = joined.get(backend, []) + rows
                dst_after = sorted(joined.items(), key=lambda kv: STARTUP_ORDER.index(kv[0]))
                if max(_load(src_after), _load(dst_after)) < loads[heavy]:
                    return False
    return True


@pytest.mark.parametrize("lanes", [2, 4])
def test_default_grid_lanes_are_balanced_and_keep_each_lane_s_order(lanes):
    order = _order()
    assert len(order) == 4 and {b for b, _ in order} == set(STARTUP_ORDER)
    chosen = L.assign_lanes(order, lanes)
    assert len(chosen) == lanes
    keys = sorted(i["key"] for lane in chosen for _, items in lane for i in items)
    assert keys == sorted(i["key"] for _, items in order for i in items)  # every row once
    placed = [(b, bs) for lane in chosen for b, items in lane for bs in _sizes(items)]
    assert len(placed) == len(set(placed))  # a block size is never split between lanes
    for lane in chosen:
        backends = [b for b, _ in lane]
        assert len(set(backends)) == len(backends)  # at most one part of a backend per lane
        assert backends == sorted(backends, key=STARTUP_ORDER.index)  # FLASHINFER last in its lane
    heaviest = max(_load(lane) for lane in chosen)
    assert heaviest <= _whole_backends_max(order, lanes)
    assert _no_move_lowers_the_heaviest_lane(chosen)


@pytest.mark.parametrize("lanes", [2, 4])
def test_a_large_grid_splits_backends_until_the_lanes_balance(lanes):
    order = _order(grid="full")
    chosen = L.assign_lanes(order, lanes)
    loads = [_load(lane) for lane in chosen]
    assert max(loads) < _whole_backends_max(order, lanes)
    assert max(loads) < 1.25 * L.lane_load([(b, len(items)) for b, items in order]) / lanes
    assert _no_move_lowers_the_heaviest_lane(chosen)
    parts = [b for lane in chosen for b, _ in lane]
    assert len(parts) > len(set(parts))  # some backend runs in several lanes


def test_fewer_backends_than_gpus_still_use_every_gpu():
    order = _order(backends=["TRITON_ATTN", "FLASH_ATTN"])
    chosen = L.assign_lanes(order, 4)
    assert len(chosen) == 4 and all(chosen)
    assert max(_load(lane) for lane in chosen) < _whole_backends_max(order, 4)
    assert _no_move_lowers_the_heaviest_lane(chosen)


def test_one_lane_is_the_sweep_s_order_itself():
    order = _order()
    [lane] = L.assign_lanes(order, 1)
    assert [b for b, _ in lane] == [b for b, _ in order]
    assert all(a is b for (_, a), (_, b) in zip(lane, order))  # the same groups, the same items


def _sweep(tmp_path, monkeypatch, gpus):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    scenario = {"TRITON_ATTN": {"*": "ok:0.25"}, "FLASH_ATTN": {"*": "ok:0.30"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    plan = P.build_plan(SHAPE, (9, 0), backends=["TRITON_ATTN", "FLASH_ATTN"], block_sizes=[16, 32, 64, 128],
                        kinds=["decode"], grid="quick", block_sizes_given=True)
    options = SweepOptions(toolkit=FAKE, item_timeout_s=20, startup_timeout_s=30, gpus=gpus)
    facts, outcomes = {}, {}
    rows, infos = run_sweep(plan, options, tmp_path, facts=facts, outcomes=outcomes)
    return [r for r in rows if r["status"] != R.STATUS_SKIPPED_BY_VLLM], facts, outcomes, infos


def test_a_backend_split_over_lanes_gives_one_gpu_s_rows_and_one_merged_outcome(tmp_path, monkeypatch):
    one, _, _, _ = _sweep(tmp_path / "one", monkeypatch, None)
    rows, facts, outcomes, infos = _sweep(tmp_path / "four", monkeypatch, ["0", "1", "2", "3"])
    assert sorted(r["key"] for r in rows) == sorted(r["key"] for r in one)
    assert {r["status"] for r in rows} == {R.STATUS_OK} and {r["gpu"] for r in rows} == {"0", "1", "2", "3"}
    ran_on = {}
    for r in rows:
        ran_on.setdefault((r["backend"], r["block_size"]), set()).add(r["gpu"])
    assert all(len(g) == 1 for g in ran_on.values())  # a (backend, block size)'s rows share one lane
    recorded = {(b, bs): {gpu} for gpu, parts in facts["lane_block_sizes"].items() for b, sizes in parts.items()
                for bs in sizes}
    assert recorded == ran_on  # tune.json says which lane ran which backend and block sizes
    assert {gpu: list(parts) for gpu, parts in facts["lane_block_sizes"].items()} == facts["lanes"]
    breakdown = phase_breakdown(outcomes, probe_s=0.0, total_s=60.0, probe_source="nvml")
    phases = breakdown["backends"]
    assert sorted(phases) == sorted(outcomes) == sorted(infos) == ["FLASH_ATTN", "TRITON_ATTN"]
    for backend, phase in phases.items():
        parts = phase["parts"]
        assert len(parts) > 1  # both backends were split (2 backends, 4 GPUs)
        assert phase["rows"] == sum(p["rows"] for p in parts) == sum(1 for r in rows if r["backend"] == backend)
        assert phase["wall_s"] == pytest.approx(sum(p["wall_s"] for p in parts), abs=0.01)
        assert phase["workers"] == sum(p["workers"] for p in parts)
        assert {(backend, bs): {p["gpu"]} for p in parts for bs in p["block_sizes"]} == \
            {k: v for k, v in ran_on.items() if k[0] == backend}
        for p in parts:
            assert (tmp_path / "four" / f"worker-{backend}-gpu{p['gpu']}.log").exists()
        assert f"{backend} {phase['wall_s']:.1f} on {len(parts)} GPUs (" in phase_line(breakdown)


def test_flashinfer_split_over_two_gpus_pre_builds_in_each_lane_and_keeps_the_first_gpu_s_facts(tmp_path, monkeypatch):
    # each part's pre-spawned worker builds; with real flashinfer the second waits on the module's file lock
    log = tmp_path / "prebuild.jsonl"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(
        {"FLASHINFER": {"*": "ok:0.2", "prebuild": "sleep:0.3", "prebuild_log": str(log)}}))
    plan = P.build_plan(SHAPE, (9, 0), backends=["FLASHINFER"], block_sizes=[16, 32, 64, 128], kinds=["decode"],
                        grid="quick", block_sizes_given=True)
    options = SweepOptions(toolkit=FAKE, item_timeout_s=20, startup_timeout_s=30, gpus=["0", "1"])
    facts, outcomes = {}, {}
    rows, infos = run_sweep(plan, options, tmp_path / "out", facts=facts, outcomes=outcomes)
    rows = [r for r in rows if r["status"] != R.STATUS_SKIPPED_BY_VLLM]
    assert {r["status"] for r in rows} == {R.STATUS_OK} and {r["gpu"] for r in rows} == {"0", "1"}
    assert facts["lanes"] == {"0": ["FLASHINFER"], "1": ["FLASHINFER"]}
    parts = outcomes["FLASHINFER"].parts
    assert [gpu for gpu, _, _ in parts] == ["0", "1"]
    assert all(part.workers[0]["prespawned"] and part.workers[0]["prebuild"] for _, _, part in parts)
    starts = [json.loads(line) for line in log.read_text().splitlines() if json.loads(line)["event"] == "start"]
    assert len(starts) == 2
    assert infos["FLASHINFER"]["cuda_visible_devices"] == "0"  # the first GPU's worker info, whichever lane ended last
