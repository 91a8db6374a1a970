"""The release kit (bench/tools/release_kit.py): one command runs every fact extractor of a release as a
step of its own and writes the data patch, summary.json and report.md. Here the steps are replaced at
the subprocess boundary by a runner that hands back what the real run for vLLM 0.34.0 wrote
(tests/fixtures/release_kit/vllm_0_34/, the outputs of `release_kit 0.34.0 --reuse --cases 2000`);
the command line of every step is the real one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnsel.bench.tools import release_kit as KIT
from attnsel.bench.tools import release_kit_report as REPORT

RECORDED = Path(__file__).parent / "fixtures" / "release_kit" / "vllm_0_34"
SUMMARY = json.loads((RECORDED / "summary.json").read_text(encoding="utf-8"))
VERSION = SUMMARY["vllm_version"]
SITE = Path("/layers") / VERSION / "site-packages"


def _in_layer(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "attnsel.bench.tools.release_env", "run", VERSION, "--", "-m",
            f"attnsel.bench.tools.{module}", *args]


def expected_commands(out: Path, previous: str, name: str, cases: int, seed: int) -> dict[str, list[str]]:
    return {
        "env": [sys.executable, "-m", "attnsel.bench.tools.release_env", "build", VERSION, "--base", "/venvs/base",
                "--override", "flashinfer-python==0.7.4"],
        "derive": _in_layer("derive_profile", "--base", previous, "--name", name, "--out", str(out / "derive.json")),
        "parity": _in_layer("parity_live", "--vllm-version", VERSION, "--cases", str(cases), "--seed", str(seed),
                            "--out", str(out / "parity.json"), "--record", str(out / "parity_record.json"),
                            "--max-print", "0"),
        "cudagraph": _in_layer("cudagraph_facts", "--profile", VERSION),
        "hybrid": _in_layer("hybrid_live", "--vllm-version", VERSION, "--record", str(out / "hybrid.json")),
        "memory": [sys.executable, "-m", "attnsel.bench.tools.memory_facts", VERSION, "--site-packages", str(SITE),
                   "--json", "--record", str(out / "memory.json")],
        "serve": [sys.executable, "-m", "attnsel.bench.tools.serve_flags", VERSION, "--site-packages", str(SITE), "--json"],
        "adapters": _in_layer("vllm_cpu_check", "--save", str(out / "vllm_cpu.json")),
        "engine": _in_layer("engine_cpu_check", "--record", str(out / "engine.json")),
    }


class Replay:
    """The subprocess boundary: each step's recorded exit status, its stdout from the recorded log and its
    outputs (copied where the step's command line writes them); `fail` steps exit 1 with nothing."""

    def __init__(self, out: Path, fail: tuple[str, ...] = ()):
        self.out = out
        self.calls: list[list[str]] = []
        self.fail = fail
        self.recorded = {s["name"]: s for s in SUMMARY["steps"]}

    def __call__(self, argv, **kw):
        self.calls.append(argv)
        name = next(step for tool, step in TOOLS.items() if any(a == tool or a.endswith("." + tool) for a in argv))
        if name in self.fail:
            return subprocess.CompletedProcess(argv, 1, "", "Traceback ...\nRuntimeError: boom\n")
        step = self.recorded.get(name, {"exit": 0, "outputs": {}, "log": f"{name}.log"})
        for file in step["outputs"].values():
            if file.endswith(".json"):
                shutil.copy(RECORDED / file, self.out / file)
        stdout = REPORT.log_stdout(RECORDED / step["log"])
        return subprocess.CompletedProcess(argv, step["exit"], stdout, "")


TOOLS = {"build": "env", "derive_profile": "derive", "parity_live": "parity", "cudagraph_facts": "cudagraph",
         "hybrid_live": "hybrid", "memory_facts": "memory", "serve_flags": "serve", "vllm_cpu_check": "adapters", "engine_cpu_check": "engine"}


def _run(tmp_path, fail=(), *extra):
    out = tmp_path / "kit"
    replay = Replay(out, fail)
    req = KIT.parse_args([VERSION, "--base-env", "/venvs/base", "--override", "flashinfer-python==0.7.4",
                          "--cases", "2000", "--seed", "34", "--out", str(out), *extra])
    return out, replay, KIT.run_kit(req, runner=replay, site_packages=lambda v: Path("/layers") / v / "site-packages")


def test_every_step_runs_its_real_command_line_in_order(tmp_path):
    out, replay, summary = _run(tmp_path)
    expected = expected_commands(out, summary["previous"], summary["profile_name"], 2000, 34)
    assert replay.calls == list(expected.values())
    assert [s["name"] for s in summary["steps"]] == list(KIT.STEP_NAMES)
    for step in summary["steps"]:
        assert (out / step["log"]).read_text(encoding="utf-8").startswith("$ " + " ".join(expected[step["name"]]))


def test_reuse_leaves_the_build_out_and_skip_drops_a_step(tmp_path):
    _out, _replay, summary = _run(tmp_path, (), "--reuse", "--skip", "adapters")
    assert [s["name"] for s in summary["steps"]] == [n for n in KIT.STEP_NAMES if n not in ("env", "adapters")]


def test_a_failing_step_is_reported_and_the_next_steps_still_run(tmp_path):
    out, _replay, summary = _run(tmp_path, ("parity",), "--reuse")
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["parity"]["exit"] == 1 and steps["parity"]["outputs"] == {}
    assert "RuntimeError: boom" in (out / "parity.log").read_text(encoding="utf-8")
    assert list(steps) == [n for n in KIT.STEP_NAMES if n != "env"]  # hybrid, memory, ... ran after it
    assert "parity" not in summary["facts"] and "hybrid" in summary["facts"]
    report = (out / "report.md").read_text(encoding="utf-8")
    failed = next(line for line in report.splitlines() if line.startswith("Steps that failed:"))
    assert "parity" in failed and "No output (the step failed or was skipped)." in report.split("## Selector parity")[1]


def test_a_step_past_its_time_or_unable_to_start_is_a_failed_step(tmp_path):
    def hangs(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw["timeout"], output=b"half a line")

    step = KIT.Step("parity", ("python", "-m", "x"), {"parity": "parity.json"})
    result = KIT.run_step(step, tmp_path, 5.0, hangs)
    assert (result.exit, result.note, result.outputs) == (124, "ran past 5.0 s", {})
    assert "half a line" in (tmp_path / "parity.log").read_text(encoding="utf-8")

    def missing(argv, **kw):
        raise FileNotFoundError(2, "No such file", argv[0])

    assert KIT.run_step(step, tmp_path, None, missing).exit == 127


def test_the_report_and_the_data_patch_come_from_the_recorded_outputs(tmp_path):
    out, _replay, summary = _run(tmp_path, (), "--reuse")
    facts = summary["facts"]
    recorded = SUMMARY["facts"]
    assert facts == json.loads(json.dumps(recorded))  # the digests are re-derived from the same outputs
    patch = json.loads((out / f"{summary['profile_name']}.json").read_text(encoding="utf-8"))
    derive = json.loads((RECORDED / "derive.json").read_text(encoding="utf-8"))
    assert patch == derive["patch"] and patch["base"] == summary["previous"]
    report = (out / "report.md").read_text(encoding="utf-8")
    # everything after the steps table is rendered from the outputs alone: as the real run rendered it
    recorded_report = (RECORDED / "report.md").read_text(encoding="utf-8")
    assert report.split("\n## Data patch")[1] == recorded_report.split("\n## Data patch")[1]
    parity = facts["parity"]
    assert f"{parity['cases_compared']} cases compared" in report
    assert f"**{parity['mismatching_cases']} mismatching**" in report
    for key in facts["derive"]["changed_keys"]:
        assert key in report
    for field in facts["engine"]["log_patterns_found"]:
        assert field in report
    for memory in facts.get("memory", {}).get("releases", {}).values():
        assert all(line in report for line in memory["differs_from_previous"])


def test_the_exit_status_says_whether_every_step_exited_0(tmp_path, monkeypatch):
    monkeypatch.setattr(KIT, "run_kit", lambda req: {"steps": [{"name": "parity", "exit": 0}, {"name": "memory", "exit": 1}]})
    assert KIT.main([VERSION, "--reuse", "--out", str(tmp_path)]) == 1
    monkeypatch.setattr(KIT, "run_kit", lambda req: {"steps": [{"name": "parity", "exit": 0}]})
    assert KIT.main([VERSION, "--reuse", "--out", str(tmp_path)]) == 0


@pytest.mark.parametrize("argv", [["0.34"], ["v0.34.0", "--reuse"], ["0.34.0"], ["0.34.0", "--reuse", "--override", "flashinfer"],
                                  ["0.34.0", "--reuse", "--cases", "0"], ["0.34.0", "--reuse", "--skip", "nothing"]])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        KIT.parse_args(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("release_kit: error:")


def test_report_only_digests_an_earlier_run_again(tmp_path):
    out, _replay, summary = _run(tmp_path, (), "--reuse")
    (out / "report.md").unlink()
    assert KIT.main([VERSION, "--reuse", "--report-only", "--out", str(out)]) == 1  # steps failed in that run
    again = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert again["facts"] == summary["facts"] and (out / "report.md").is_file()


def test_the_report_module_examples_hold():
    import doctest

    result = doctest.testmod(REPORT)
    assert result.attempted > 0 and result.failed == 0
