"""The bad-input promise checked in real processes, where the corpus's in-process runner cannot be
faithful: stdout that cannot be written (/dev/full, closed), `--model -` and `--model <(...)`
pipes, a named pipe whose writer never writes, and Ctrl-C (SIGINT) arriving while a command waits
or while `tune` sweeps: exit 130, no partial JSON on stdout, results.jsonl whole and resumable."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile import CATALOG, FIXTURES, SCENARIO, TRACEBACK_MARKERS

ATTNSEL = [sys.executable, "-m", "attnsel"]
LIMIT_S = 30
ENV = {**os.environ, "ATTNSEL_NVML_SCENARIO": SCENARIO, "NO_COLOR": "1"}
LLAMA = str(CATALOG / "llama-3.1-8b.json")


def _one_error_line(stderr: str, fragment: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], stderr[-2000:]
    assert not any(marker in stderr for marker in TRACEBACK_MARKERS[:2])


def _shell(command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=ENV, timeout=LIMIT_S, **kwargs)


def _attnsel() -> str:
    return " ".join(ATTNSEL)


def test_stdout_that_cannot_be_written_is_one_line_exit_2():
    full = _shell(f"{_attnsel()} explain --gpu H100 --json > /dev/full")
    assert full.returncode == 2
    _one_error_line(full.stderr, "cannot write to stdout: No space left on device")
    closed = _shell(f"{_attnsel()} probe >&-")
    assert closed.returncode == 2
    _one_error_line(closed.stderr, "cannot write to stdout")


def test_a_reader_that_leaves_ends_the_command_as_sigpipe_does():
    done = _shell(f"{_attnsel()} explain --gpu all | head -c 10 >/dev/null; echo \"${{PIPESTATUS[0]}}\"")
    assert done.stdout.strip() == "141" and done.stderr == ""


def test_model_from_standard_input_and_from_a_dev_fd_pipe():
    piped = _shell(f"cat {LLAMA} | {_attnsel()} explain --gpu H100 --model - --json")
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["model"]["source"] == "stdin"
    substituted = _shell(f"{_attnsel()} explain --gpu H100 --json --model <(cat {LLAMA})")
    assert substituted.returncode == 0, substituted.stderr
    doc = json.loads(substituted.stdout)
    assert doc["model"]["source"] == "pipe" and doc["selected"] == "FLASH_ATTN"
    garbage = _shell(f"{_attnsel()} preflight --gpu H100 --model <(echo '{{\"model_type\": [1]}}')")
    assert garbage.returncode == 2
    _one_error_line(garbage.stderr, "model_type must be a name")


def _interrupt_while_waiting(args: list[str], stdin=None) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([*ATTNSEL, *args], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    time.sleep(1.5)  # start-up, then it waits for input that does not come
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=LIMIT_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_while_a_command_waits_on_a_pipe_is_130_with_nothing_on_stdout(tmp_path):
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer that stays silent
    try:
        done = _interrupt_while_waiting(["report", str(fifo), "--json"])
    finally:
        os.close(writer)
    assert done.returncode == 130 and done.stdout == ""
    _one_error_line(done.stderr, "interrupted")
    read_end, write_end = os.pipe()
    try:
        done = _interrupt_while_waiting(["explain", "--gpu", "H100", "--model", "-", "--json"], stdin=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 130 and done.stdout == ""
    _one_error_line(done.stderr, "interrupted")


def test_a_named_pipe_nobody_writes_to_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = subprocess.run([*ATTNSEL, "report", str(fifo)], capture_output=True, text=True, env=ENV, timeout=LIMIT_S)
    assert done.returncode == 2 and time.monotonic() - started < LIMIT_S
    _one_error_line(done.stderr, "is empty")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash")
def test_ctrl_c_during_tune_keeps_whole_rows_and_resume_finishes(tmp_path):
    tune_fixtures = FIXTURES / "tune"
    env = {**ENV, "ATTNSEL_TUNE_TOOLKIT": f"{tune_fixtures / 'fake_toolkit.py'}:FakeToolkit",
           "ATTNSEL_NVML_SCENARIO": str(tune_fixtures / "nvml_h200.json"),
           "ATTNSEL_FAKE_TUNE_SCENARIO": json.dumps({"*": {"*": "ok:0.2"}, "FLASH_ATTN": {"*": "ok:0.2", "sleep": 0.4}})}
    out = tmp_path / "sweep"
    args = [*ATTNSEL, "tune", "--head-size", "128", "--num-heads", "32", "--num-kv-heads", "8", "--dtype", "bf16",
            "--quick", "--workload", "decode", "--backends", "FLASH_ATTN", "--block-sizes", "16,32,64",
            "--output", str(out), "--json"]
    # its own process group, as a shell job: Ctrl-C reaches attnsel and its workers together
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 2):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=LIMIT_S)
    assert proc.returncode == 130, stderr[-2000:]
    assert stdout == ""  # --json: the document is written whole at the end, or not at all
    assert "--resume" in stderr.strip().splitlines()[-1] and "Traceback" not in stderr
    rows = [json.loads(line) for line in results.read_text().splitlines()]  # every line whole
    assert 2 <= len(rows) < 9
    resumed = subprocess.run([*args, "--resume"], capture_output=True, text=True, env=env, timeout=LIMIT_S * 2)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    doc = json.loads(resumed.stdout)
    assert len(doc["rows"]) == 9 and all(r["status"] == "ok" for r in doc["rows"])
    assert Path(out / "tune.json").is_file()


def _unprivileged() -> list[str]:
    """A prefix that runs a command as a user who cannot read root's 0700 folders: nothing when
    we are not root, setpriv to `nobody` when we are and it can start this Python."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, sys.executable, "-c", "import attnsel"],
                                                         capture_output=True, cwd="/").returncode != 0:
        pytest.skip("needs a non-root user (setpriv) that can run this Python")
    return prefix


def test_a_config_we_may_not_read_is_one_line_exit_2(tmp_path):
    prefix = _unprivileged()
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "config.json").write_text((CATALOG / "llama-3.1-8b.json").read_text())
    tmp_path.chmod(0o755)
    locked.chmod(0o700 if prefix else 0o000)
    try:
        for model in (locked / "config.json", locked):
            done = subprocess.run([*prefix, *ATTNSEL, "explain", "--gpu", "H100", "--model", str(model)],
                                  capture_output=True, text=True, env=ENV, timeout=LIMIT_S, cwd="/")
            assert done.returncode == 2, done.stderr
            _one_error_line(done.stderr, "permission denied")
    finally:
        locked.chmod(0o755)
