"""Replays what GPUs with a vLLM release installed recorded (issue 21: tune for every release), through
that release's own backend classes and adapter facts:
- an H100 with vLLM 0.26.0 (tests/fixtures/tune/h100_vllm026_*/, carried with
  `VLLM_RELEASE=0.26.0 bash bench/tools/gpu_session.sh pack engine`): the dense sweep as users type it
  (`attnsel tune --head-size 128 --dtype bf16`, cold), the MLA decode sweep
  (`attnsel tune --model deepseek-v2-lite --workload decode`) and DeepSeek-V3.2's sparse MLA at TP 1/2/4/8;
- an H200 with vLLM 0.33.0 and its torch 2.14 (tests/fixtures/tune/h200_vllm033_*/, carried with
  `VLLM_RELEASE=0.33.0 bash bench/tools/gpu_session.sh pack`, run by `PLAN=release
  bench/tools/gpu_evidence_plan.sh`): the same two, `tune --model llama-3.1-8b --kv-cache-dtype fp8`,
  the sparse sweeps with FLASHINFER_MLA_SPARSE_SM90, and GLM-5-Next at TP 8.
The recommendation today's code recomputes from the recorded rows is the one the run printed, and
every timed row says which release and which adapter facts measured it; the engine checks are
tests/fixtures/verify/h100_vllm026_* and h200_vllm033_*, replayed by tests/test_verify_replay.py."""

import json

import pytest
from recordings import recorded

from attnsel.attention.versions import get_profile
from attnsel.bench.tune import recommend as REC

SPARSE = tuple(f"sparse_tp{tp}" for tp in (1, 2, 4, 8))  # DeepSeek-V3.2 at the per-GPU heads of TP 1, 2, 4, 8
RUNS = {**{f"h100_vllm026_{n}": recorded("tune", f"h100_vllm026_{n}", "tune.json") for n in ("dense", "mla", *SPARSE)},
        **{f"h200_vllm033_{n}": recorded("tune", f"h200_vllm033_{n}", "tune.json")
           for n in ("dense", "mla", "fp8", *SPARSE, "glm5_tp8")},
        # an H100 with vLLM 0.34.0 (0.33's torch 2.14 set with 0.34's vLLM and FlashInfer on top:
        # bench/tools/memory_release_run.sh): as typed, and the Llama-3.1-8B sweep its verify checked
        "h100_vllm034_dense": recorded("tune", "h100_vllm034_dense", "tune.json"),
        "h100_vllm034_llama8b": recorded("verify", "h100_vllm034_llama8b", "tune.json")}


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


@pytest.mark.parametrize("name", [f"h200_vllm033_{n}" for n in (*SPARSE, "glm5_tp8")])
def test_vllm_033_sparse_runs_time_its_hopper_flashinfer_backend_beside_the_others(name):
    """0.30+ adds FLASHINFER_MLA_SPARSE_SM90; on an H200 with 0.33 it was timed next to the two older
    sparse backends at every head count, through 0.33's own class."""
    doc = _doc(name)
    timed = {r["backend"] for r in doc["rows"] if r["status"] == "ok"}
    assert {"FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM90"} <= timed
    sm90 = [r for r in doc["rows"] if r["backend"] == "FLASHINFER_MLA_SPARSE_SM90" and r["status"] == "ok"]
    assert all("FlashInferMLASparseSM90" in r["provider"] for r in sm90), sm90[0]["provider"]
