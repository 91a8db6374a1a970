"""Replays the H100 runs of MLA models and fp8 KV caches (issue "tune covers fp8 KV cache and MLA
models"): every `tune.json` under tests/fixtures/tune/h100_mla*/ and h100_fp8*/ (written by
`attnsel tune ... --output`, the commands in bench/tools/gpu_session.sh `mla_fp8`). Skips cleanly
while none is recorded. What a recorded run must show: vLLM's own classes ran every timed row
(MLA: forward_mqa), every checked row passed against the fp32 reference (fp8: from the dequantized
cache, with the stated tolerance), decode rows launched as vLLM launches them, no row above HBM
peak, the skipped configs carry vLLM's reasons, and the recommendation recomputed from the
recorded rows is the one the run printed."""

import json
from pathlib import Path

import pytest

from attnsel.attention.kernels import kv_quant
from attnsel.bench.tune import recommend as REC
from attnsel.bench.sweep import results as R
from attnsel.bench.plan.mla import MLA_BACKENDS

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
RUNS = sorted(p for pattern in ("h100_mla*/**/tune.json", "h100_fp8*/**/tune.json") for p in FIXTURES.glob(pattern))
pytestmark = pytest.mark.skipif(not RUNS, reason="no recorded H100 MLA / fp8 run")


def _ids(path):
    return str(path.parent.relative_to(FIXTURES))


@pytest.fixture(params=RUNS or [None], ids=_ids if RUNS else None)
def doc(request):
    return json.loads(request.param.read_text())


def _ok(doc):
    return [r for r in doc["rows"] if r["status"] == R.STATUS_OK]


def test_every_timed_row_ran_vllms_own_classes(doc):
    rows = _ok(doc)
    assert rows
    for r in rows:
        assert r["adapter"] == "vllm" and r["provider"].startswith("vllm 0.24.0 "), r["provider"]
        if r["backend"] in MLA_BACKENDS:
            assert "forward_mqa" in r["provider"] and r["kind"] == "decode"


def test_checked_rows_pass_the_reference_with_the_tolerance_of_their_cache(doc):
    fp8 = kv_quant.is_fp8(doc["plan"]["shape"]["kv_cache_dtype"])
    checked = [r for r in doc["rows"] if r.get("checked")]
    assert checked
    for r in checked:
        assert r["tolerance"] == (kv_quant.FP8_TOLERANCE if fp8 else 1e-2)
        assert r["status"] != R.STATUS_WRONG and r["rel_error"] < r["tolerance"], (r["backend"], r["rel_error"])
    assert not doc["recommendation"]["disqualified"]


def test_decode_rows_replayed_cuda_graphs_where_vllm_does(doc):
    for r in _ok(doc):
        if r["kind"] == "decode" and r["workload"]["batch"] <= 512:
            assert (r["launch"], r["launch_source"]) == ("graph", "installed vLLM"), r.get("launch_reason")
            assert r["timing"]["mode"] == "graph", r["timing"].get("note")


def test_no_row_beats_hbm_peak_and_the_best_decode_row_reports_its_share(doc):
    rows = [r for r in _ok(doc) if r.get("pct_of_peak_bandwidth") is not None]
    assert rows and all(0 < r["pct_of_peak_bandwidth"] < 100 for r in rows)
    best = max(rows, key=lambda r: r["pct_of_peak_bandwidth"])
    assert best["pct_of_peak_bandwidth"] > 30  # a decode kernel reading a large KV cache is bandwidth-bound


def test_skipped_configs_carry_vllms_reasons(doc):
    skipped = [r for r in doc["rows"] if r["status"] == R.STATUS_SKIPPED_BY_VLLM]
    shape = doc["plan"]["shape"]
    if shape["use_mla"]:
        reasons = {(r["backend"], r["block_size"]): r["error"] for r in skipped}
        assert "compute capability not supported" in reasons[("FLASHINFER_MLA", 64)]
        assert "block_size not supported" in reasons[("FLASHMLA", 16)]
    if kv_quant.is_fp8(shape["kv_cache_dtype"]) and not shape["use_mla"]:
        assert any(r["backend"] == "FLEX_ATTENTION" and "kv_cache_dtype not supported" in r["error"] for r in skipped)


def test_the_recommendation_recomputed_from_the_recorded_rows_is_the_one_printed(doc):
    labels = {}
    for w in doc["plan"]["workloads"]:
        labels.setdefault(w["kind"], []).append(w["label"])
    d = doc["plan"]["vllm_default"]
    weights = (doc["recommendation"].get("overall") or {}).get("weights") or dict(REC.DEFAULT_WEIGHTS)
    again = REC.recommend(doc["rows"], workload_labels=labels, vllm_default=(d["backend"], d["block_size"]),
                          weights=weights).to_dict()
    for kind, decision in doc["recommendation"]["workloads"].items():
        assert again["workloads"][kind]["flags"] == decision["flags"]
        assert again["workloads"][kind]["verdict"] == decision["verdict"]
        assert decision["best"]["launch"] in ("graph", "eager", "graph+eager")
