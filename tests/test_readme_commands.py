"""The README is a user's first hour: every `$ command` it shows prints what the README says it
prints, run as a user runs it (a shell in the clone's root, `attnsel` on PATH, no GPU, no vLLM,
a 160-column terminal without colour), and its example report is what today's `report` renders."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WIDTH = "160"  # the README's samples are printed at this width


def readme_examples() -> list[tuple[str, str]]:
    """(command, expected output) for every `$ ` line of the README's code blocks."""
    examples: list[tuple[str, str]] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S):
        lines = block.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        for n, start in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            examples.append((lines[start][2:], "\n".join(lines[start + 1:end]).rstrip()))
    return examples


def _vllm_here() -> bool:
    from attnsel.attention.rules.imports import module_available

    return module_available("vllm")


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory) -> dict:
    """`attnsel` on PATH as the console script is after `pip install -e .`, this Python's attnsel."""
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "attnsel"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m attnsel "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNSEL_NVML_SCENARIO", "CUDA_VISIBLE_DEVICES")}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "NO_COLOR": "1", "COLUMNS": WIDTH}


def test_the_readme_shows_commands():
    commands = [command for command, _ in readme_examples()]
    assert len(commands) >= 8 and any(c.startswith("attnsel explain") for c in commands)


@pytest.mark.skipif(_vllm_here(), reason="the README's samples are those of a machine without vLLM")
@pytest.mark.parametrize("command,expected", readme_examples(), ids=[c[:60] for c, _ in readme_examples()])
def test_a_readme_command_prints_what_the_readme_shows(command, expected, shell_env, tmp_path):
    command = command.replace("/tmp/v", str(tmp_path / "v"))  # verify's output folder: never a shared one
    done = subprocess.run(["bash", "-c", "exec 2>&1; " + command], cwd=ROOT, env=shell_env, capture_output=True,
                          text=True, timeout=120)
    printed = "\n".join(line.rstrip() for line in done.stdout.rstrip().splitlines())
    shown = "\n".join(line.rstrip() for line in expected.splitlines()).replace("/tmp/v", str(tmp_path / "v"))
    assert printed == shown


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_readme_example_report_is_what_report_renders_today(fmt):
    from attnsel.bench.tools import example_report

    path = ROOT / example_report.EXAMPLES / f"{example_report.STEM}.{fmt}"
    assert path.name in README.read_text(encoding="utf-8")
    assert path.read_text(encoding="utf-8") == example_report.render(fmt), \
        "stale example: python -m attnsel.bench.tools.example_report"
