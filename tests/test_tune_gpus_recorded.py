"""`attnsel tune --gpus all` on a real 2 x H200 host (vLLM 0.24.0's kernels, Llama-3.1-8B default
grid), recorded by bench/tools/multi_gpu_evidence.sh and kept by bench/tools/gpus_fixture.py:
the lanes, the calibration, the rows each GPU timed, the phases, the advice. docs/tune-performance.md
quotes the wall times (speed targets live there, not in a timed test)."""

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from attnsel.bench.timing import stats as T
from attnsel.bench.sweep.multi_gpu import calibration_verdict
from attnsel.bench.tools import fidelity

ROOT = Path(__file__).parent
FIXTURES = ROOT / "fixtures" / "tune" / "h200x2_gpus"
# runs.json: the first 2 x H200 session; runs_prespawn.json: another 2 x H200 host, with each lane's
# first workers (and FlashInfer's pre-build) started during the calibration (2026-11-26)
RECORDED = {path.stem: json.loads(path.read_text())["runs"] for path in sorted(FIXTURES.glob("runs*.json"))}
RUNS = RECORDED["runs"]
DOC = (ROOT.parent / "docs" / "tune-performance.md").read_text()


def _rows(run: str, runs: dict = RUNS) -> dict:
    return {(b, bs, w): {"gpu": g, "median": m} for b, bs, w, g, status, m, _, _ in runs[run]["rows"] if status == "ok"}


def test_both_gpus_timed_the_reference_row_alike_so_the_lanes_were_mixed():
    for run in ("warm_2gpu", "cold_2gpu"):
        gpus = RUNS[run]["gpus"]
        agree, _ = calibration_verdict(gpus["calibration"]["per_gpu"])
        assert agree and gpus["calibration"]["agree"]
        lanes = gpus["lanes"]
        assert sorted(lanes) == ["0", "1"] and all(lanes.values())
        assert sorted(b for lane in lanes.values() for b in lane) == sorted(RUNS[run]["phases"]["backends"])


def test_every_row_records_the_gpu_of_its_lane():
    lanes = RUNS["warm_2gpu"]["gpus"]["lanes"]
    lane_of = {b: gpu for gpu, backends in lanes.items() for b in backends}
    rows = _rows("warm_2gpu")
    assert rows and all(r["gpu"] == lane_of[key[0]] for key, r in rows.items())
    assert {r["gpu"] for r in rows.values()} == {"0", "1"}


@pytest.mark.parametrize("recording", sorted(RECORDED))
def test_rows_timed_on_the_second_gpu_match_the_one_gpu_run(recording):
    one, two = _rows("warm_1gpu", RECORDED[recording]), _rows("warm_2gpu", RECORDED[recording])
    by_backend = defaultdict(list)
    for key, row in two.items():
        if key in one:
            by_backend[(key[0], row["gpu"])].append(row["median"] / one[key]["median"])
    assert any(gpu == "1" for _, gpu in by_backend)  # some backend moved to the second GPU
    for (backend, gpu), ratios in by_backend.items():
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        assert abs(geomean - 1) < T.RELATIVE_NOISE_THRESHOLD, (backend, gpu, geomean)
        assert fidelity.summarize(ratios)["met"], (backend, gpu)  # within +-5% on >= 95% of its rows


def test_one_gpu_or_two_the_advice_is_the_same():
    overall = {run: RUNS[run]["overall"] for run in RUNS}
    assert {o["advised_flags"] for o in overall.values()} == {None}  # keep vLLM's default, every time
    one, two = overall["warm_1gpu"], overall["warm_2gpu"]
    assert one["verdict"] == two["verdict"]
    assert one["best"] == two["best"] or one["best"] in two["equally_good"]


@pytest.mark.parametrize("recording, run", [(rec, run) for rec in sorted(RECORDED) for run in sorted(RECORDED[rec])])
def test_the_recorded_phases_account_for_the_wall_time_and_the_doc_quotes_it(recording, run):
    runs = RECORDED[recording]
    phases = runs[run]["phases"]
    assert runs[run]["options"]["repeat_ms"] == 50.0  # no timing budget lowered
    backends = phases["backends"].values()
    if runs[run]["options"]["gpus"] is None:  # one lane: the backends run one after another
        parts = phases["probe_s"] + phases["other_s"] + sum(b["wall_s"] for b in backends)
        assert abs(parts - phases["total_s"]) <= 0.02 * phases["total_s"]
    else:  # lanes overlap: the total is at least the longest lane and below the sum
        lanes = runs[run]["gpus"]["lanes"].values()
        longest = max(sum(phases["backends"][b]["wall_s"] for b in lane) for lane in lanes)
        assert longest <= phases["total_s"] < sum(b["wall_s"] for b in backends)
    assert f"{phases['total_s']:.1f} s" in DOC, run


def test_with_the_lanes_first_workers_started_during_calibration_their_start_is_hidden():
    # the second host's warm 2-GPU run: each lane's first backend started while the GPUs were
    # calibrated, so its import no longer waits behind the calibration (first host: 9.2 s and 15.5 s)
    runs = RECORDED["runs_prespawn"]
    phases, lanes = runs["warm_2gpu"]["phases"]["backends"], runs["warm_2gpu"]["gpus"]["lanes"]
    before = RUNS["warm_2gpu"]["phases"]["backends"]
    for backends in lanes.values():
        first = backends[0]
        assert phases[first]["startup_detail"]["overlapped_s"] > 0 == before[first]["startup_detail"]["overlapped_s"]
        assert phases[first]["startup_s"] < before[first]["startup_s"]
    speedup = runs["warm_1gpu"]["phases"]["total_s"] / runs["warm_2gpu"]["phases"]["total_s"]
    assert speedup > RUNS["warm_1gpu"]["phases"]["total_s"] / RUNS["warm_2gpu"]["phases"]["total_s"]
