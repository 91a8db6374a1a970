"""Recorded `attnsel verify` runs (tests/fixtures/verify/<run>/verify.json, with the tune.json it
checked when there was one) replayed through `attnsel report`, and re-derived by the same bench
code: the figures from the recorded calls, the comparisons and the verdict from the figures. The
same checks run on a run made here with the fake engine. A missing recording fails the replay;
what the H100 runs showed (verdicts, margins, attention shares) is evidence, checked by
`python -m attnsel.bench.tools.evidence`."""

import copy
import json
from pathlib import Path

import pytest
from recordings import recorded
from typer.testing import CliRunner

from attnsel.bench.tools import verify_fixture
from attnsel.bench.verify import compare as EC
from attnsel.bench.verify import run as V
from attnsel.bench.verify import verdict as VV
from attnsel.cli.app import app

# the H100 runs docs/verify.md quotes (vLLM 0.24.0), the vLLM 0.26.0 runs of issue 21: dense,
# MLA (DeepSeek-V2-Lite) and the A/A check (vLLM's default started twice), 0.33.0's dense and MLA on an H200,
# and 0.34.0's Llama-3.1-8B on an H100: tune's pairs, and its prefill pick at 8 x 8192 and 2 x 32768
RECORDED = [recorded("verify", run, "verify.json")
            for run in ("h100_llama8b", "h100_qwen06", "h100_nemotron_h", "h100_llama8b_fp8", "h100_vllm026_dense",
                        "h100_vllm026_mla", "h100_vllm026_aa", "h200_vllm033_dense", "h200_vllm033_mla",
                        "h100_vllm034_llama8b", "h100_vllm034_llama8b_prefill")]
# the sparse-MLA TP-8 shard in vLLM 0.26.0's engine: the tune run it checked was not kept, so its
# comparisons (which quote tune's predicted margins) cannot be re-derived; the report and the read-back can
SPARSE_SHARD = recorded("verify", "h100_vllm026_sparse_tp8", "verify.json")


def check_replay(folder: Path) -> dict:
    doc = json.loads((folder / "verify.json").read_text())
    tune = json.loads((folder / "tune.json").read_text()) if (folder / "tune.json").is_file() else None
    _check_report(folder, doc)
    _check_rederived(doc, tune)
    _check_read_back(doc)
    return doc


def _check_report(folder: Path, doc: dict) -> None:
    runner = CliRunner()
    md = runner.invoke(app, ["report", str(folder)])
    assert md.exit_code == 0, md.output
    verdict = doc["verdict"]
    assert f"attnsel verify: {verdict['verdict']}" in md.stdout
    assert verdict["text"] in md.stdout
    if verdict.get("flags"):
        assert f"vLLM flags: `{verdict['flags']}`" in md.stdout
    for row in doc["candidates"]:
        assert row["short"] in md.stdout
    as_json = json.loads(runner.invoke(app, ["report", str(folder), "--format", "json"]).stdout)
    assert as_json["verify"]["verdict"] == verdict
    html = runner.invoke(app, ["report", str(folder), "--format", "html"])
    assert html.exit_code == 0 and f">{verdict['verdict']}</span>" in html.stdout


def _check_rederived(doc: dict, tune) -> None:
    """The committed numbers follow from the committed calls with today's code (JSON keeps floats
    exactly, so the same arithmetic gives the same numbers)."""
    again = copy.deepcopy(doc)
    for row in again["candidates"]:
        for shape in row.get("shapes") or []:
            if shape.get("status") == "ok":
                assert EC.shape_figures(shape) == shape["figures"], (row["name"], shape.get("label"))
    again["comparisons"] = VV.build_comparisons(again, tune)
    # as written: the same keys in the same order, the same values (the records keep the written order)
    assert _written(again["comparisons"]) == _written(doc["comparisons"])
    if "engine_starts" in doc:  # --repeat-engine: the spread between starts of the same pair
        assert _written(VV.engine_start_spreads(again)) == _written(doc["engine_starts"])
    assert _written(VV.summarize(again)) == _written(doc["verdict"])


def _written(value: object) -> str:
    return json.dumps(value, indent=1)


def _check_read_back(doc: dict) -> None:
    """What each engine ran is read back from it, not assumed; a mismatch is a warning."""
    for row in doc["candidates"]:
        if row["status"] != "ok":
            assert row.get("error"), row["name"]
            continue
        engine = row["engine"]
        assert engine["backend_used"] and engine["block_size_used"] and engine["vllm_version"]
        assert engine["kv_cache_tokens"] > 0 and engine["num_gpu_blocks"] > 0
        if row.get("backend") and engine["backend_used"] != row["backend"]:
            assert any(row["name"] in w for w in doc["warnings"])


@pytest.mark.parametrize("path", RECORDED, ids=[p.parent.name for p in RECORDED])
def test_recorded_runs_replay_through_the_report(path):
    doc = check_replay(path.parent)
    assert doc["schema"] == V.SCHEMA


def test_the_replay_checks_hold_for_a_run_made_with_the_fake_engine(fake_engine, tune_run_dir):
    fake_engine({"default": ["FLASH_ATTN", 16], "backends": {
        "FLASH_ATTN": {"step_ms": 18.1, "prefill_tok_s": 45000, "jitter": 0.002},
        "FLASHINFER": {"step_ms": 16.5, "prefill_tok_s": 46000, "jitter": 0.002}}})
    V.run_verify(V.VerifyRequest(tune_dir=tune_run_dir, shapes=[(1, 16384), (16, 1024)], decode_steps=32), tune_run_dir)
    doc = check_replay(tune_run_dir)
    assert doc["verdict"]["verdict"] == "holds"
    # the fixture tool keeps what the replay needs, and little else
    fixture = tune_run_dir.parent / "fixture"
    written = verify_fixture.copy_run(tune_run_dir, fixture)
    assert {p.name for p in written} >= {"verify.json", "tune.json", "engine-FLASH_ATTN-16.log"}
    assert (fixture / "tune.json").stat().st_size < (tune_run_dir / "tune.json").stat().st_size / 5
    assert check_replay(fixture) == doc
    # tune timed 1 x 16384: the kernel margin and the attention share sit beside the engine's
    entry = next(c for c in doc["comparisons"] if "pick" in c["short"] and c["batch"] == 1)
    assert entry["predicted_source"] == "this shape" and entry["expected_step_margin_pct"] is not None


H100_HYBRID = recorded("verify", "h100_nemotron_h")


def test_on_the_h100_the_hybrid_engine_used_the_block_size_explain_computes():
    # H100 80GB, vLLM 0.24.0, Nemotron-H-8B (4 attention + 24 Mamba-2 layers): vLLM sizes the KV block
    # from the Mamba state (issue 11, item 3); offline, explain must compute the size and the backend
    # vLLM's engine read back there
    doc = json.loads((H100_HYBRID / "verify.json").read_text())
    runner = CliRunner()
    explained = runner.invoke(app, ["explain", "--model", "nemotron-h-8b", "--gpu", "H100", "--vllm-version", "0.24",
                                    "--no-enable-prefix-caching", "--json"])
    answer = json.loads(explained.stdout)
    assert explained.exit_code == 0, explained.output
    assert answer["hybrid"] and all(row["engine"]["is_hybrid"] for row in doc["candidates"])
    assert {row["engine"]["block_size_used"] for row in doc["candidates"]} == {answer["block_size"]}
    assert doc["candidates"][0]["engine"]["backend_used"] == answer["selected"]  # vLLM's default, no flags



def test_the_sparse_mla_shard_run_replays_through_the_report_and_reads_back_its_backends():
    doc = json.loads(SPARSE_SHARD.read_text())
    _check_report(SPARSE_SHARD.parent, doc)
    _check_read_back(doc)
    assert {row["backend"] for row in doc["candidates"]} >= {"FLASHMLA_SPARSE"}
