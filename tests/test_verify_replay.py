"""Recorded `attnsel verify` runs (tests/fixtures/verify/<run>/verify.json, with the tune.json it
checked when there was one) replayed through `attnsel report`, and re-derived by the same bench
code: the figures from the recorded calls, the comparisons and the verdict from the figures.
Real GPU runs are committed there as they are made; with none, the recorded cases skip, and the
same checks run on a run made here with the fake engine, so they are exercised in any case."""

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.bench.verify import compare as EC
from attnsel.bench.verify import run as V
from attnsel.bench.verify import verdict as VV
from attnsel.bench.tools import verify_fixture
from attnsel.cli.app import app

ROOT = Path(__file__).parent
RECORDED = sorted((ROOT / "fixtures" / "verify").glob("*/verify.json"))


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
    assert again["comparisons"] == doc["comparisons"]
    assert VV.summarize(again) == doc["verdict"]


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


@pytest.mark.skipif(not RECORDED, reason="no recorded verify run in tests/fixtures/verify/ yet")
@pytest.mark.parametrize("path", RECORDED, ids=[p.parent.name for p in RECORDED])
def test_recorded_runs_replay_through_the_report(path):
    doc = check_replay(path.parent)
    assert doc["schema"] == V.SCHEMA
    measured = [r for r in doc["candidates"] if r["status"] == "ok"]
    assert len(measured) >= 2, "a recorded run compares at least two engines"


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


H100_LLAMA = ROOT / "fixtures" / "verify" / "h100_llama8b"


@pytest.mark.skipif(not (H100_LLAMA / "verify.json").is_file(), reason="no recorded H100 verify run")
def test_on_the_h100_vllms_engine_confirmed_tunes_keep_the_default_advice():
    # H100 80GB, vLLM 0.24.0, Llama-3.1-8B (dummy weights): tune's kernel margins were small, so its
    # overall advice was to keep vLLM's default; vLLM's own engine, once per candidate, agrees, and
    # the runner-up tune ranked below the default (FLASHINFER/256) decodes slower there too.
    doc = json.loads((H100_LLAMA / "verify.json").read_text())
    tune = json.loads((H100_LLAMA / "tune.json").read_text())
    assert tune["recommendation"]["overall"]["verdict"] in ("small", "keep default", "within noise")
    # tune's advice was to keep the default, and nothing beat it end to end by --min-gain: it holds
    assert doc["verdict"]["verdict"] == "holds" and doc["verdict"]["flags"] == ""
    assert doc["verdict"]["tune_advised_flags"] is False
    for row in doc["candidates"]:  # every engine ran what it was asked for, read back from vLLM
        asked = tuple(row["predicted"]) if row["backend"] is None else (row["backend"], row["block_size"])
        assert (row["engine"]["backend_used"], row["engine"]["block_size_used"]) == asked
        assert row["engine"]["vllm_version"] == "0.24.0"
    runner_up = [c for c in doc["comparisons"] if "runner-up" in c["short"]]
    assert runner_up and all(c["decode"]["result"] == "slower" for c in runner_up), runner_up


H100_QWEN = ROOT / "fixtures" / "verify" / "h100_qwen06"
H100_HYBRID = ROOT / "fixtures" / "verify" / "h100_nemotron_h"


def _read_back_matches_the_request(doc: dict) -> None:
    for row in doc["candidates"]:
        asked = tuple(row["predicted"]) if row["backend"] is None else (row["backend"], row["block_size"])
        assert (row["engine"]["backend_used"], row["engine"]["block_size_used"]) == asked
        assert row["engine"]["vllm_version"] == "0.24.0"


@pytest.mark.skipif(not (H100_QWEN / "verify.json").is_file(), reason="no recorded H100 verify run")
def test_on_the_h100_a_small_model_at_32k_spends_its_step_in_attention_and_the_default_still_holds():
    # H100 80GB, vLLM 0.24.0, Qwen3-0.6B at 1 x 32768 and 16 x 32768 (issue 16: a model whose step is
    # mostly attention). tune's decode sweep found FLASH_ATTN/128 0.6% ahead, within noise: keep the default.
    doc = json.loads((H100_QWEN / "verify.json").read_text())
    _read_back_matches_the_request(doc)
    shares = {(s["batch"], s["context"]): s["attention_share"] for s in doc["candidates"][0]["shapes"]}
    assert shares[(16, 32768)] > 0.9 and shares[(1, 32768)] > 0.5  # kernel time x 28 layers / engine step
    # FLASH_ATTN/128 is +3.4% tokens/s at 16 x 32k (faster prefill), -0.9% at 1 x 32k: above noise at one
    # shape, below --min-gain overall -> tune's advice to keep the default holds, no flags
    verdict = doc["verdict"]
    assert verdict["verdict"] == "holds" and verdict["flags"] == "" and verdict["tune_advised_flags"] is False
    assert verdict["best_end_to_end"]["flags"] == ""
    pick = [c for c in doc["comparisons"] if "pick" in c["short"]]
    assert any(c["end_to_end"]["result"] == "faster" for c in pick)
    assert all(c["end_to_end"]["margin_pct"] < verdict["min_gain_pct"] for c in pick)
    # FlashInfer: a kernel gain at 16 x 32k that the engine turns into a loss at both shapes
    runner_up = {c["batch"]: c for c in doc["comparisons"] if "runner-up" in c["short"]}
    assert runner_up[16]["predicted_kernel_margin_pct"] > 0 > runner_up[16]["decode"]["margin_pct"]
    assert all(c["end_to_end"]["result"] == "slower" for c in runner_up.values())


@pytest.mark.skipif(not (H100_HYBRID / "verify.json").is_file(), reason="no recorded H100 verify run")
def test_on_the_h100_the_hybrid_engine_used_the_block_size_explain_computes():
    # H100 80GB, vLLM 0.24.0, Nemotron-H-8B (4 attention + 24 Mamba-2 layers): vLLM sizes the KV block
    # from the Mamba state (issue 11, item 3); verify starts every candidate at that size
    doc = json.loads((H100_HYBRID / "verify.json").read_text())
    _read_back_matches_the_request(doc)
    runner = CliRunner()
    explained = runner.invoke(app, ["explain", "--model", "nemotron-h-8b", "--gpu", "H100", "--vllm-version", "0.24",
                                    "--no-enable-prefix-caching", "--json"])
    answer = json.loads(explained.stdout)
    for row in doc["candidates"]:
        assert row["engine"]["block_size_used"] == answer["block_size"]
        assert row["engine"]["is_hybrid"] is True
    default = doc["candidates"][0]
    assert (default["engine"]["backend_used"], answer["selected"]) == ("FLASH_ATTN", "FLASH_ATTN")
    # 4 attention layers of 52: a kernel margin barely reaches the step
    assert all(s["attention_share"] < 0.2 for s in default["shapes"])
    assert all(abs(c["expected_step_margin_pct"]) < 1.0 for c in doc["comparisons"])
    assert doc["verdict"]["verdict"] == "holds" and doc["verdict"]["flags"] == ""


H100_FP8 = ROOT / "fixtures" / "verify" / "h100_llama8b_fp8"


@pytest.mark.skipif(not (H100_FP8 / "verify.json").is_file(), reason="no recorded H100 verify run")
def test_on_the_h100_the_fp8_kernel_gain_tune_advised_is_within_noise_end_to_end():
    # H100 80GB, vLLM 0.24.0, Llama-3.1-8B with --kv-cache-dtype fp8: tune advised FLASH_ATTN/128
    # (+5.7% decode geomean at kernel level). vLLM's engine: the decode step gains what the attention
    # share predicts, but tokens/s with the prompts' prefill included moves by less than the noise.
    doc = json.loads((H100_FP8 / "verify.json").read_text())
    tune = json.loads((H100_FP8 / "tune.json").read_text())
    assert tune["recommendation"]["overall"]["verdict"] == "faster"
    assert doc["model"]["kv_cache_dtype"] == "fp8" and doc["verdict"]["tune_advised_flags"] is True
    _read_back_matches_the_request(doc)
    for c in doc["comparisons"]:
        assert c["predicted_kernel_margin_pct"] > 5.0  # what tune measured at this shape
        assert c["expected_step_margin_pct"] < c["predicted_kernel_margin_pct"]  # attention is part of a step
        assert abs(c["decode"]["margin_pct"] - c["expected_step_margin_pct"]) <= c["decode"]["noise_pct"]
        assert c["end_to_end"]["result"] == "within noise"
    assert doc["verdict"]["verdict"] == "within noise" and doc["verdict"]["flags"] == ""
    # an fp8 cache holds twice the tokens of the bf16 run in tests/fixtures/verify/h100_llama8b
    bf16 = json.loads((H100_LLAMA / "verify.json").read_text())["candidates"][0]["engine"]["kv_cache_tokens"]
    assert doc["candidates"][0]["engine"]["kv_cache_tokens"] == pytest.approx(2 * bf16, rel=0.01)
