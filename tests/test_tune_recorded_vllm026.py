"""Replays what an H100 with vLLM 0.26.0 installed recorded (issue 21: tune for every release): the
dense sweep as users type it (`attnsel tune --head-size 128 --dtype bf16`, cold) and the MLA decode
sweep (`attnsel tune --model deepseek-v2-lite --workload decode`), both through vLLM 0.26.0's own
backend classes with 0.26's adapter facts (tests/fixtures/tune/h100_vllm026_*/, carried with
`VLLM_RELEASE=0.26.0 bash bench/tools/gpu_session.sh pack engine`). The recommendation today's
code recomputes from the recorded rows is the one the run printed, and every timed row says which
release and which adapter facts measured it; the run's engine check is tests/fixtures/verify/
h100_vllm026_dense, replayed by tests/test_verify_replay.py."""

import json

import pytest

from attnsel.attention.versions import get_profile
from attnsel.bench.tune import recommend as REC
from recordings import recorded

RUNS = {"dense": recorded("tune", "h100_vllm026_dense", "tune.json"),
        "mla": recorded("tune", "h100_vllm026_mla", "tune.json"),
        # DeepSeek-V3.2's sparse MLA at the per-GPU heads of TP 1, 2, 4 and 8 (`gpu_session.sh sparse`)
        **{f"sparse_tp{tp}": recorded("tune", f"h100_vllm026_sparse_tp{tp}", "tune.json") for tp in (1, 2, 4, 8)}}


def _doc(name):
    return json.loads(RUNS[name].read_text())


def _labels(doc):
    labels = {}
    for w in doc["plan"]["workloads"]:
        labels.setdefault(w["kind"], []).append(w["label"])
    return labels


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recomputed_recommendation_matches_what_the_run_printed(name):
    doc = _doc(name)
    printed = doc["recommendation"]
    default = printed["vllm_default"]
    rec = REC.recommend(doc["rows"], workload_labels=_labels(doc),
                        vllm_default=(default["backend"], default["block_size"]),
                        weights=printed["overall"]["weights"],
                        min_gain=printed["overall"]["min_gain_pct"] / 100).to_dict()
    for scope, got in rec["workloads"].items():
        want = printed["workloads"][scope]
        assert (got["best"]["backend"], got["best"]["block_size"]) == (want["best"]["backend"], want["best"]["block_size"])
        assert got["verdict"] == want["verdict"]
    assert rec["overall"]["verdict"] == printed["overall"]["verdict"]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_timed_row_names_the_release_and_the_adapter_facts_that_measured_it(name):
    doc = _doc(name)
    release = doc["environment"]["versions"]["vllm"]
    facts = get_profile(release).adapter_facts
    timed = [r for r in doc["rows"] if r["status"] == "ok"]
    # FLEX_ATTENTION is torch's kernel, not a vLLM class: its rows name torch instead
    by_vllm = [r for r in timed if r["provider"].startswith(f"vllm {release} ")]
    assert by_vllm and all(r["backend"] == "FLEX_ATTENTION" for r in timed if r not in by_vllm)
    for row in by_vllm:
        details = row["provider_details"]
        assert details["vllm"] == release
        assert details["adapter_facts"].startswith(f"{facts.profile} (checked on vLLM {release}"), details["adapter_facts"]
