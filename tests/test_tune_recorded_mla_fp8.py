"""Replays the H100 runs of MLA models and fp8 KV caches (issue "tune covers fp8 KV cache and MLA
models"): the `tune.json` of each run in tests/fixtures/tune/ (written by `attnsel tune ... --output`,
the commands in bench/tools/gpu_session.sh `mla_fp8`). The recommendation recomputed from the
recorded rows must be the one the run printed. (What the rows show about those GPU runs --
vLLM's own classes, the reference check, CUDA graphs, HBM peak, vLLM's refusals -- is evidence:
`python -m attnsel.bench.tools.evidence`.)"""

import json

import pytest
from recordings import recorded

from attnsel.bench.tune import recommend as REC

RUNS = [recorded("tune", run, "tune.json") for run in ("h100_mla_tp1", "h100_mla_tp8", "h100_fp8")]


@pytest.mark.parametrize("path", RUNS, ids=[p.parent.name for p in RUNS])
def test_the_recommendation_recomputed_from_the_recorded_rows_is_the_one_printed(path):
    doc = json.loads(path.read_text())
    labels = {}
    for w in doc["plan"]["workloads"]:
        labels.setdefault(w["kind"], []).append(w["label"])
    d = doc["plan"]["vllm_default"]
    weights = (doc["recommendation"].get("overall") or {}).get("weights") or dict(REC.DEFAULT_WEIGHTS)
    again = REC.recommend(doc["rows"], workload_labels=labels, vllm_default=(d["backend"], d["block_size"]),
                          weights=weights).to_dict()
    assert doc["recommendation"]["workloads"]
    for kind, decision in doc["recommendation"]["workloads"].items():
        assert again["workloads"][kind]["flags"] == decision["flags"]
        assert again["workloads"][kind]["verdict"] == decision["verdict"]
        assert again["workloads"][kind]["best"]["launch"] == decision["best"]["launch"]
