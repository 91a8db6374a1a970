"""Issue 25's second sitting, replayed: a 4 x H200 host (vLLM 0.26.0, torch 2.11.0+cu130, flashinfer
0.6.14), `PLAN=speed bash bench/tools/gpu_evidence_plan.sh` (each run in a lane of one GPU and 16 cores
unless it used more), then a repeat of tune before | after | CUPTI-per-row side by side, kept by
bench/tools/speed_fixture.py. docs/tune-performance.md "Before and after in one sitting" quotes it.

What a user relies on here: CUPTI set up once per process times the same kernels as CUPTI set up for
every row, for less host time; `verify` finishes its three engines; an A/A verify (vLLM's default
started twice, the second engine's worker pre-spawned) reads the same end-to-end speed twice;
`--gpus` on four GPUs times the same kernels and says where its time goes."""

import json
from pathlib import Path

import pytest

from tests.test_speed_recorded import geomean_ratio_per_backend, medians

SITTING = json.loads((Path(__file__).parent / "fixtures" / "speed" / "h200x4_vllm026.json").read_text())
GPUS, RUNS = SITTING["gpus"], SITTING["runs"]
BACKENDS = {"FLEX_ATTENTION", "TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"}


def _cupti_seconds(backend: dict) -> float:
    host = backend.get("timing_host_s") or {}
    return host.get("cupti_start", 0.0) + host.get("cupti_stop", 0.0)


# CUPTI once per process (the after checkout) against ATTNSEL_CUPTI_FINALIZE=1, side by side, twice
CUPTI_PAIRS = [("phase 2", GPUS["1"]["warm"], GPUS["1_cupti_finalize"]["warm"]),
               ("repeat", RUNS["after_warm2"], RUNS["finalize_warm2"])]


@pytest.mark.parametrize("name,once,per_row", CUPTI_PAIRS, ids=[p[0] for p in CUPTI_PAIRS])
def test_cupti_set_up_once_times_the_same_kernels_for_less_host_time(name, once, per_row):
    a, b = medians(once), medians(per_row)
    assert len(a) == len(b) == 256
    for backend, ratio in geomean_ratio_per_backend(a, b).items():
        assert ratio == pytest.approx(1.0, abs=0.01), backend
    for backend, phases in once["phases"]["backends"].items():
        if phases["rows"] == 80:  # FLEX_ATTENTION's 16 rows cost CUPTI little either way
            assert _cupti_seconds(phases) < 0.6 * _cupti_seconds(per_row["phases"]["backends"][backend]), backend
    timing = [sum(b["timing_s"] for b in run["phases"]["backends"].values()) for run in (once, per_row)]
    assert timing[0] < timing[1] - 4.0  # 31.3 vs 37.1 s and 31.9 vs 40.3 s of the warm runs' timing
    assert once["overall"]["best"] == per_row["overall"]["best"]


def test_cupti_ab_reads_the_same_medians_and_costs_a_third_of_the_host_time():
    for where, ab in SITTING["cupti_ab"].items():
        assert ab["device"] == "NVIDIA H200", where
        for call, ratio in ab["median_ms_ratio_process_over_finalize"].items():
            assert ratio == pytest.approx(1.0, abs=0.005), (where, call)
        assert ab["process"]["cupti_host_s_per_row_median"] < 0.5 * ab["finalize"]["cupti_host_s_per_row_median"]


def test_before_and_after_time_the_same_kernels_in_the_repeat_too():
    for warm in ("tune_warm", "tune_warm2"):
        after = SITTING["after"].get(warm) or RUNS["after_warm2"]
        before = SITTING["before"].get(warm) or RUNS["before_warm2"]
        for backend, ratio in geomean_ratio_per_backend(medians(after), medians(before)).items():
            assert ratio == pytest.approx(1.0, abs=0.01), (warm, backend)
    cold = {side: [SITTING[side]["tune_cold"]["phases"]["total_s"], RUNS[f"{side}_cold2"]["phases"]["total_s"]]
            for side in ("before", "after")}
    assert all(a < b - 10 for a, b in zip(cold["after"], cold["before"]))  # 141.3 vs 153.0, 136.9 vs 156.1 s
    triton = [RUNS[f"{side}_cold2"]["phases"]["backends"]["TRITON_ATTN"] for side in ("after", "before")]
    assert triton[0]["precompile_s"] + triton[0]["setup_s"] < triton[1]["setup_s"]


def test_verify_finishes_three_engines_and_hides_the_later_ones_imports():
    verify = SITTING["after"]["verify"]
    assert SITTING["after"]["steps"]["verify"][0] == 0  # exit 0: the 2 x H200 sitting hit its limit
    first, *later = verify["candidates"]
    assert [c["status"] for c in verify["candidates"]] == ["ok", "ok", "ok"]
    assert verify["elapsed_s"] < 480.0  # 470 s; f05ee86 passed 598 s on the 2 x H200 host
    assert first["start_s"] > 120.0  # the cold first engine (torch.compile, graphs) is most of the rest
    for engine in later:
        assert engine["prespawn"]["worker"] == "pre-spawned" and engine["prespawn"]["import_hidden_s"] > 15
        assert engine["start_s"] < 50.0
    assert verify["prebuild"]["built"] == 3 and verify["prebuild"]["error"] is None


def test_an_aa_verify_reads_the_same_end_to_end_speed_from_both_starts():
    aa = SITTING["after"]["aa"]
    assert aa["verdict"]["verdict"] == "not measured" and aa["options"]["repeat_engine"] == 2
    for shape in aa["engine_starts"]:
        assert shape["starts"] == shape["measured"] == 2
        assert shape["end_to_end"]["start_spread_pct"] < shape["end_to_end"]["gate_pct"], shape["shape"]
    # the decode step moved more between the starts than within one (2.8% at b=4): engine to engine
    spread = {s["shape"]: s["decode"]["start_spread_pct"] for s in aa["engine_starts"]}
    assert max(spread.values()) == pytest.approx(2.82, abs=0.01)


def test_four_gpus_time_the_same_kernels_and_the_flashinfer_build_bounds_the_cold_run():
    one, four = GPUS["1"], GPUS["4"]
    lanes = four["warm"]["gpus"]["lanes"]
    assert sorted(len(backends) for backends in lanes.values()) == [1, 1, 1, 1]
    assert {b for backends in lanes.values() for b in backends} == BACKENDS
    for backend, ratio in geomean_ratio_per_backend(medians(four["warm"]), medians(one["warm"])).items():
        assert ratio == pytest.approx(1.0, abs=0.01), backend
    speedup = {run: one[run]["phases"]["total_s"] / four[run]["phases"]["total_s"] for run in ("cold", "warm")}
    assert 1.3 < speedup["cold"] < 1.8 and 1.4 < speedup["warm"] < 3.0  # x1.35 and x1.58: short of x3
    flashinfer = four["cold"]["phases"]["backends"]["FLASHINFER"]
    assert flashinfer["startup_s"] > 60.0  # its lane waited for FlashInfer's JIT build
    assert four["cold"]["phases"]["total_s"] - flashinfer["wall_s"] < 20.0  # that lane is the critical path
    assert four["warm"]["phases"]["total_s"] < 40.0


def test_probe_with_bytecode_on_four_gpus():
    before, after = SITTING["before"]["probe"], SITTING["after"]["probe"]
    assert after["subprocess"]["median_s"] < 0.85 * before["subprocess"]["median_s"]
    assert after["in_process"]["gpus"] == 4 and not after["subprocess"]["torch_imported"]


def test_the_fixture_keeps_the_four_gpu_layout(tmp_path):
    # PLAN=speed on 4 GPUs: the A/A verify in a lane of its own, the CUPTI A/B lane beside --gpus
    from attnsel.bench.tools import speed_fixture

    res = tmp_path / "res"
    aa = res / "phase1" / "after_aa"
    (aa / "aa").mkdir(parents=True)
    (aa / "aa" / "verify.json").write_text(json.dumps(SITTING["after"]["aa"]))
    (aa / "times.txt").write_text("aa 0 284.1\n")
    ab = res / "phase2" / "cupti_finalize"
    ab.mkdir(parents=True)
    (ab / "cupti_ab.json").write_text(json.dumps(SITTING["cupti_ab"]["phase2/cupti_finalize"]))
    (ab / "times.txt").write_text("cold 0 142.0\nwarm 0 70.7\ncupti_ab 0 18.2\n")
    dest = tmp_path / "kept.json"
    assert speed_fixture.main([str(res), str(dest)]) == 0
    kept = json.loads(dest.read_text())
    assert kept["after"]["aa"] == SITTING["after"]["aa"] and kept["after"]["aa_step"] == [0, 284.1]
    assert kept["before"]["aa"] is None
    assert kept["cupti_ab"] == {"phase2/cupti_finalize": SITTING["cupti_ab"]["phase2/cupti_finalize"]}
    assert kept["gpus"]["1_cupti_finalize"]["steps"]["cupti_ab"] == [0, 18.2]


BYTECODE = json.loads((Path(__file__).parent / "fixtures" / "speed" / "h200x4_bytecode_probe.json").read_text())


def test_the_carried_packages_missing_bytecode_is_not_what_slows_a_workers_start():
    # PLAN=bytecode: the device writes no .pyc; the same sweep with vLLM's modules compiled | not, side by side
    compiled, plain = BYTECODE["pyc"], BYTECODE["nopyc"]
    for run in ("cold", "warm"):
        totals = [lane[run]["phases"]["total_s"] for lane in (compiled, plain)]
        assert abs(totals[0] - totals[1]) < 3.0, (run, totals)  # 141.1 / 141.0 s, 64.8 / 66.8 s
        starts = [lane[run]["phases"]["backends"]["FLEX_ATTENTION"]["startup_s"] for lane in (compiled, plain)]
        assert min(starts) > 12.0, starts  # the first worker's start stays 13-17 s either way
    for backend, ratio in geomean_ratio_per_backend(medians(compiled["warm"]), medians(plain["warm"])).items():
        assert ratio == pytest.approx(1.0, abs=0.01), backend
    assert BYTECODE["gpus_all_warm"]["phases"]["total_s"] < 40.0  # 4 GPUs, warm, again under 40 s


def test_nvml_calls_asked_ahead_save_little_because_nvml_answers_them_one_at_a_time():
    threads, serial = BYTECODE["probe"]["threads"], BYTECODE["probe"]["serial"]
    assert threads["in_process"]["gpus"] == serial["in_process"]["gpus"] == 4
    assert threads["in_process"]["median_s"] < 0.8 * serial["in_process"]["median_s"]  # 0.121 vs 0.162 s
    assert threads["in_process"]["first_s"] < serial["in_process"]["first_s"]  # 0.222 vs 0.242 s
    # a fresh process pays NVML's first touch of each GPU either way: the command line did not get faster
    assert threads["subprocess"]["median_s"] == pytest.approx(serial["subprocess"]["median_s"], rel=0.05)
    for run in BYTECODE["probe"]["nvml_times"]["runs"]:
        if run["mode"] == "init":  # the calls' own durations add up to ~9x the wall: they waited for each other
            assert sum(c["ms"] for c in run["calls"].values()) > 5 * run["collect_ms"]
        else:  # nvmlInitWithFlags(NO_ATTACH) sees no GPU at all: no shortcut for the probe
            assert run["gpus"] == 0
