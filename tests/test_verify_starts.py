"""`attnsel verify --repeat-engine N` and `--candidates default`: every pair's engine started N
times, the spread between starts of the same pair reported beside the within-engine noise, and a
gap judged against both. Real engine worker processes with the fake engine at our boundary
(tests/fixtures/verify_engine/fake_engine.py), each start of a pair measuring what its scenario says."""

import json

import pytest
from test_verify_replay import check_replay
from typer.testing import CliRunner

from attnsel.bench.verify import VerifyDocument, is_aa_check
from attnsel.bench.verify import plan as VP
from attnsel.bench.verify import run as V
from attnsel.cli.app import app

SHAPES = [(1, 2048), (16, 1024)]


def scenario(default_starts, pick_step=15.0, pick_starts=None):
    """vLLM's default FLASH_ATTN/16 and tune's pick FLASHINFER/64 (the runner-up FLASH_ATTN/128 is FLASH_ATTN's)."""
    return {"default": ["FLASH_ATTN", 16], "backends": {
        "FLASH_ATTN": {"step_ms": 18.1, "prefill_tok_s": 45000, "jitter": 0.001,
                       "by_start": [{"step_ms": s} for s in default_starts]},
        "FLASH_ATTN/128": {"by_start": []},
        "FLASHINFER": {"step_ms": pick_step, "prefill_tok_s": 45000, "jitter": 0.001,
                       "by_start": [{"step_ms": s} for s in pick_starts or []]}}}


def verify(run_dir, **kw):
    return V.run_verify(V.VerifyRequest(tune_dir=run_dir, shapes=SHAPES, decode_steps=32, **kw), run_dir)


def test_default_alone_started_twice_is_an_a_a_check_that_reports_the_spread_between_starts(fake_engine, tune_run_dir):
    fake_engine(scenario(default_starts=[18.1, 19.0]))
    doc = verify(tune_run_dir, candidates=VP.parse_candidates("default"), repeat_engine=2)
    [row] = doc["candidates"]
    assert row["roles"] == ["vllm-default"] and len(row["restarts"]) == 1
    again = row["restarts"][0]
    assert again["status"] == "ok" and (tune_run_dir / again["log"]).name == "engine-FLASH_ATTN-16-start2.log"
    assert doc["options"]["repeat_engine"] == 2 and doc["comparisons"] == []
    for entry in doc["engine_starts"]:
        step = entry["decode"]
        # each start's own median, the spread between them, beside the noise inside one engine
        assert step["medians"] == pytest.approx([18.1, 19.0], rel=0.01)
        assert step["start_spread_pct"] == pytest.approx(0.9 / 18.55 * 100, rel=0.05)
        assert step["within_noise_pct"] < 1.0 < step["start_spread_pct"]
        assert entry["end_to_end"]["start_spread_pct"] > entry["end_to_end"]["within_noise_pct"]
    assert is_aa_check(doc) and doc["verdict"]["verdict"] == "not measured"
    assert "2 engine starts, an A/A check" in doc["verdict"]["text"]
    assert "tokens/s between starts" in doc["verdict"]["text"]
    check_replay(tune_run_dir)


def test_a_gap_within_the_spread_between_starts_is_within_noise_and_the_verdict_says_why(fake_engine, tune_run_dir):
    # the pick's decode is ~4% faster than the default's median, far beyond the within-engine noise
    # (jitter 0.1%), but two starts of vLLM's default differ by ~9%
    fake_engine(scenario(default_starts=[17.4, 19.0], pick_step=17.5))
    doc = verify(tune_run_dir, repeat_engine=2)
    assert [len(r["restarts"]) for r in doc["candidates"]] == [1, 1, 1]
    pick = next(c for c in doc["comparisons"] if "pick" in c["short"] and c["batch"] == 1)
    decode = pick["decode"]
    assert decode["within_noise_pct"] < abs(decode["margin_pct"]) <= decode["start_spread_pct"]
    assert decode["noise_pct"] == decode["start_spread_pct"] and decode["result"] == "within noise"
    assert "not the start-to-start spread" in doc["verdict"]["text"]
    check_replay(tune_run_dir)


def test_a_gap_beyond_every_spread_holds_with_the_median_over_the_starts(fake_engine, tune_run_dir):
    fake_engine(scenario(default_starts=[18.1, 18.3], pick_step=15.0, pick_starts=[15.0, 14.0]))
    doc = verify(tune_run_dir, repeat_engine=2)
    assert doc["verdict"]["verdict"] == "holds"
    assert doc["verdict"]["flags"] == "--attention-backend FLASHINFER --block-size 64"
    spread = {(e["short"], e["batch"]): e for e in doc["engine_starts"]}
    pick = spread[(doc["candidates"][1]["short"], 1)]["decode"]
    assert pick["median"] == pytest.approx(14.5, rel=0.01)  # the median of the two starts' medians
    assert "engine starts: each pair's figure is the median over its starts" in doc["verdict"]["text"]
    assert VerifyDocument.from_dict(doc).to_dict() == json.loads(json.dumps(doc, default=str))


def test_one_start_per_pair_writes_what_verify_always_wrote(fake_engine, tune_run_dir):
    fake_engine(scenario(default_starts=[18.1, 19.0]))
    doc = verify(tune_run_dir)
    assert "engine_starts" not in doc and "repeat_engine" not in doc["options"]
    assert all("restarts" not in r for r in doc["candidates"])
    assert all("start_spread_pct" not in c["end_to_end"] for c in doc["comparisons"])


def test_resume_runs_only_the_starts_still_missing(fake_engine, tune_run_dir):
    fake_engine(scenario(default_starts=[18.1, 18.2]))
    first = verify(tune_run_dir, candidates=[], repeat_engine=2)
    second = verify(tune_run_dir, candidates=[], repeat_engine=2, resume=True)
    assert second["candidates"][0]["resumed"] and second["candidates"][0]["restarts"] == first["candidates"][0]["restarts"]
    with pytest.raises(Exception, match="other repeat_engine"):
        verify(tune_run_dir, candidates=[], repeat_engine=3, resume=True)


def test_the_cli_prints_the_spread_and_an_a_a_check_exits_0(fake_engine, tune_run_dir):
    env = fake_engine(scenario(default_starts=[18.1, 19.0]))
    result = CliRunner().invoke(app, ["verify", str(tune_run_dir), "--candidates", "default", "--repeat-engine", "2",
                                      "--shapes", "1x2048", "--decode-steps", "32"], env=env)
    assert result.exit_code == 0, result.output
    assert "start-to-start" in result.stdout and "A/A check" in result.stdout
    md = CliRunner().invoke(app, ["report", str(tune_run_dir)])
    assert md.exit_code == 0 and "Engine starts" in md.stdout


@pytest.mark.parametrize("value", ["0", "11"])
def test_repeat_engine_out_of_range_is_bad_input(value, tune_run_dir, fake_engine):
    env = fake_engine(scenario(default_starts=[]))
    result = CliRunner().invoke(app, ["verify", str(tune_run_dir), "--repeat-engine", value], env=env)
    assert result.exit_code == 2 and "--repeat-engine" in result.stderr and "Traceback" not in result.output
