"""A GPU name (or bus id) holding control characters never reaches the terminal raw: the NVML funnel
keeps them visibly as \\xNN (probe/nvml/session.py printable), in text and in --json alike."""

import json
import subprocess
import sys
from pathlib import Path

SCENARIO = Path(__file__).parent / "fixtures" / "probe" / "h200_x2_nvlink.json"


def _scenario_with_escapes(tmp_path: Path) -> Path:
    text = SCENARIO.read_text().replace("NVIDIA H200", "NVIDIA \\u001b[31mH200\\u0007")
    path = tmp_path / "escapes.json"
    path.write_text(text)
    return path


def _probe(scenario: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"ATTNSEL_NVML_SCENARIO": str(scenario), "NO_COLOR": "1", "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "attnsel", "probe", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_a_gpu_name_with_an_escape_sequence_prints_it_visibly(tmp_path):
    done = _probe(_scenario_with_escapes(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "NVIDIA \\x1b[31mH200\\x07" in done.stdout


def test_the_json_names_the_same_visible_text(tmp_path):
    done = _probe(_scenario_with_escapes(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    names = {gpu["name"] for gpu in json.loads(done.stdout)["gpus"]}
    assert names == {"NVIDIA \\x1b[31mH200\\x07"}
