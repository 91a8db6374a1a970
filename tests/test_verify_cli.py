"""`attnsel verify` and `attnsel tune --verify` from the command line: refusals as one line with
their exit code, a full run through a fake engine (our boundary) printed and written, and
`attnsel report` rendering the verify.json it wrote."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.attention.versions import choice
from attnsel.cli.app import app

NO_NVML = Path(__file__).parent / "fixtures" / "probe" / "nvml_missing.json"
SCENARIO = {
    "default": ["FLASH_ATTN", 16],
    "backends": {"FLASH_ATTN": {"step_ms": 18.1, "prefill_tok_s": 45000, "jitter": 0.001},
                 "FLASHINFER": {"step_ms": 18.2, "prefill_tok_s": 30000, "jitter": 0.001}},
}
QUICK = ["--shapes", "1x2048,16x1024", "--decode-steps", "32"]


def invoke(args, env=None):
    return CliRunner().invoke(app, args, env=env)


@pytest.fixture
def run_dir(tune_run_dir):
    return tune_run_dir


@pytest.fixture
def fake_env(fake_engine):
    return fake_engine(SCENARIO)


def test_no_vllm_is_one_line_and_exit_3(run_dir, monkeypatch):
    monkeypatch.setattr(choice, "installed_vllm_version", lambda: None)
    result = invoke(["verify", str(run_dir)], env={"ATTNSEL_VERIFY_ENGINE": ""})
    assert result.exit_code == 3
    assert result.stderr.strip().splitlines() == [
        "error: attnsel verify starts vLLM's own engine, and vLLM is not installed in this Python environment (pip install vllm)"]
    assert not (run_dir / "verify.json").exists()


def test_tune_verify_without_vllm_stops_before_the_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(choice, "installed_vllm_version", lambda: None)
    out = tmp_path / "never"
    result = invoke(["tune", "--model", "llama-3.1-8b", "--verify", "--output", str(out)], env={"ATTNSEL_VERIFY_ENGINE": ""})
    assert result.exit_code == 3 and "vLLM is not installed" in result.stderr
    assert not out.exists()


def test_no_gpu_is_one_line_and_exit_3(run_dir, fake_env):
    result = invoke(["verify", str(run_dir)], env=dict(fake_env, ATTNSEL_NVML_SCENARIO=str(NO_NVML)))
    assert result.exit_code == 3
    assert result.stderr.startswith("error: attnsel verify needs an NVIDIA GPU")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,message", [
    (["verify"], "pass a tune result folder"),
    (["verify", "--output", "x", "--candidates", "FLASH_ATTN"], "BACKEND:BLOCK_SIZE"),
    (["verify", "RUN", "--shapes", "64*4096"], "BATCHxCONTEXT"),
    (["verify", "RUN", "--repeats", "1"], "--repeats must be at least 2"),
    (["verify", "RUN", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["verify", "EMPTY"], "tune.json"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, run_dir, tmp_path, fake_env):
    (tmp_path / "empty").mkdir()
    args = [{"RUN": str(run_dir), "EMPTY": str(tmp_path / "empty")}.get(a, a) for a in args]
    result = invoke(args, env=fake_env)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output


def test_a_full_run_prints_the_verdict_and_the_report_renders_it(run_dir, fake_env):
    result = invoke(["verify", str(run_dir), *QUICK], env=fake_env)
    assert result.exit_code == 0, result.output
    # FLASHINFER/64: as fast per decode step, slower prefill: end to end it loses (the H100 case)
    assert "Verdict: REVERSED" in result.stdout
    assert "vLLM flags: (none: vLLM default)" in result.stdout
    doc = json.loads((run_dir / "verify.json").read_text())
    assert doc["verdict"]["verdict"] == "reversed"
    markdown = invoke(["report", str(run_dir)])
    assert markdown.exit_code == 0
    assert "## attnsel verify: reversed" in markdown.stdout  # after the tune report, one level down
    assert doc["verdict"]["text"] in markdown.stdout
    for row in doc["candidates"]:
        assert row["short"] in markdown.stdout
    as_json = json.loads(invoke(["report", str(run_dir), "--format", "json"]).stdout)
    assert as_json["verify"]["verdict"] == doc["verdict"]
    html = invoke(["report", str(run_dir), "--format", "html"]).stdout
    assert 'attnsel verify: <span class="bad">reversed</span>' in html


def test_json_output_is_one_document_and_progress_stays_on_stderr(run_dir, fake_env):
    result = invoke(["verify", str(run_dir), *QUICK, "--json"], env=fake_env)
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["schema"] == "attnsel-verify/1" and len(doc["candidates"]) == 3
    assert "engine started in" in result.stderr


def test_named_pairs_without_a_tune_result_and_a_csv_of_the_engines(tmp_path, fake_env):
    out = tmp_path / "named"
    result = invoke(["verify", "--model", "llama-3.1-8b", "--candidates", "FLASHINFER:64", "--output", str(out), *QUICK],
                    env=fake_env)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "verify.json").read_text())
    assert doc["tune"] is None and [r["roles"] for r in doc["candidates"]] == [["vllm-default"], ["named"]]
    assert all(c["predicted_kernel_margin_pct"] is None for c in doc["comparisons"])  # nothing predicted without tune
    csv = invoke(["report", str(out), "--format", "csv"]).stdout.splitlines()
    assert csv[0].startswith("candidate,roles,status,backend_used")
    assert len(csv) == 1 + 2 * 2  # two engines x two shapes


def test_nothing_to_compare_exits_1(tmp_path, fake_env):
    out = tmp_path / "refused"
    result = invoke(["verify", "--model", "llama-3.1-8b", "--candidates", "FLASH_ATTN:8", "--output", str(out), *QUICK],
                    env=fake_env)
    assert result.exit_code == 1
    assert "refused" in result.stdout and "Verdict: NOT MEASURED" in result.stdout


def test_sigterm_ends_the_run_and_the_engine_it_had_started(run_dir, fake_engine, tmp_path, gone):
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    scenario = json.loads(json.dumps(SCENARIO))
    scenario["default"] = ["FLASH_ATTN", 16]
    scenario["backends"]["FLASH_ATTN"]["on_start"] = "spawn-and-hang"
    scenario["pid_file"] = str(pid_file)
    fake_engine(scenario)
    proc = subprocess.Popen([sys.executable, "-m", "attnsel", "verify", str(run_dir), *QUICK],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(300):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert gone(child), "the hanging engine's process outlived the interrupted run"
    assert (run_dir / "verify.json").is_file()  # the plan was written before the first engine
