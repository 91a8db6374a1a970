"""`attnsel probe`'s quick start (cli/entry.py): a plain local probe runs without Typer and prints
exactly what the Typer command prints -- stdout, stderr and exit code byte for byte -- over the
recorded NVML scenarios (tests/fixtures/probe, replayed through ATTNSEL_NVML_SCENARIO); anything it
does not take goes to the Typer app."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app
from attnsel.cli.entry import quick_probe_options, run_quick_probe

FIXTURES = Path(__file__).parent / "fixtures" / "probe"
SCENARIOS = sorted(p.name for p in FIXTURES.glob("*.json"))
NO_ENV: dict = {}

ARGS = [
    ["--json"],
    [],
    ["-q"],
    ["-v", "--json"],
    ["--json", "--require-gpus", "2"],
    ["--json", "--require-gpus=9", "--require-nvlink"],
    ["--require-capability", "9.0", "--require-same-model"],
    ["--json", "--require-capability=8.0", "-q"],
    ["--require-capability", "nine"],  # bad input: exit 2 before any probing
    ["--require-capability", "99.0", "--json"],
    ["--require-nvlink", "--require-same-model", "--require-gpus", "1", "--json"],
]


def typer_run(args, scenario):
    result = CliRunner().invoke(app, args, env={"ATTNSEL_NVML_SCENARIO": scenario})
    return result.exit_code, result.stdout, result.stderr


def quick_run(args, scenario, monkeypatch, capsys):
    monkeypatch.setenv("ATTNSEL_NVML_SCENARIO", scenario)
    options = quick_probe_options(args, NO_ENV)
    assert options is not None, args
    capsys.readouterr()
    code = run_quick_probe(options)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_visible_devices_set(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("args", ARGS, ids=" ".join)
def test_quick_probe_prints_what_the_typer_command_prints(scenario, args, monkeypatch, capsys):
    path = str(FIXTURES / scenario)
    assert quick_run(["probe", *args], path, monkeypatch, capsys) == typer_run(["probe", *args], path)


def test_root_flags_before_the_command_too(monkeypatch, capsys):
    path = str(FIXTURES / "l40s_x2_pcie.json")
    for args in (["-q", "probe", "--require-nvlink"], ["--verbose", "probe", "--json"], ["-q", "-v", "probe"]):
        assert quick_run(args, path, monkeypatch, capsys) == typer_run(args, path)


def test_visible_devices_and_order_reach_both_the_same(monkeypatch, capsys):
    path = str(FIXTURES / "mixed_3090x2_1080tix3.json")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0,4")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    for args in (["probe", "--json"], ["probe", "--require-same-model"]):
        assert quick_run(args, path, monkeypatch, capsys) == typer_run(args, path)


def test_random_flag_combinations_agree(monkeypatch, capsys):
    """Every argument list the quick start takes, drawn from its own vocabulary, answers as Typer does."""
    vocabulary = ["--json", "-q", "--quiet", "-v", "--verbose", "--require-nvlink", "--require-same-model",
                  "--require-gpus", "--require-gpus=3", "--require-capability", "--require-capability=8.6", "1",
                  "7.5", "x.y", "10.0"]
    draw = random.Random(25)
    taken = 0
    for _ in range(400):
        args = ["probe", *draw.choices(vocabulary, k=draw.randint(0, 4))]
        if quick_probe_options(args, NO_ENV) is None:
            continue
        path = str(FIXTURES / draw.choice(SCENARIOS))
        assert quick_run(args, path, monkeypatch, capsys) == typer_run(args, path), args
        taken += 1
        if taken == 40:
            break
    assert taken == 40


@pytest.mark.parametrize("args", [
    [], ["--help"], ["--version"], ["explain", "--gpu", "H100"], ["probe", "--help"], ["probe", "-h"],
    ["probe", "--ray"], ["probe", "--timeout", "5"], ["probe", "--measure-p2p"], ["probe", "--"],
    ["probe", "extra"], ["probe", "--require-gpus", "0"], ["probe", "--require-gpus", "two"],
    ["probe", "--require-gpus=08"], ["probe", "--require-gpus", "-1"], ["probe", "--require-gpus"],
    ["probe", "--require-gpus", "1", "--require-gpus", "2"], ["probe", "--require-capability", "--json"],
    ["probe", "--require-capability="], ["probe", "--json=1"], ["probe", "-qv"], ["-q", "--version", "probe"],
    ["probe", "--install-completion"],
])
def test_anything_else_goes_to_the_typer_app(args):
    assert quick_probe_options(args, NO_ENV) is None


def test_shell_completion_goes_to_the_typer_app():
    assert quick_probe_options(["probe"], {"_ATTNSEL_COMPLETE": "bash_complete"}) is None
    assert quick_probe_options(["probe"], {"COMP_WORDS": "attnsel probe"}) is not None


# --- real processes: the entry point (`python -m attnsel`) against the Typer app's own main ---

TYPER_MAIN = [sys.executable, "-c", "import sys; from attnsel.cli.app import main; sys.argv[0] = 'attnsel'; main()"]
QUICK_MAIN = [sys.executable, "-m", "attnsel"]


def _process(command, args, scenario, **extra):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1", "COLUMNS": "120", **extra}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env["ATTNSEL_NVML_SCENARIO"] = str(FIXTURES / scenario)
    out = subprocess.run([*command, *args], capture_output=True, env=env, timeout=60)
    return out.returncode, out.stdout, out.stderr


@pytest.mark.parametrize("args, scenario", [
    (["probe", "--json"], "h200_x2_nvlink.json"),
    (["probe"], "a100_x2_mig.json"),
    (["-q", "probe", "--json", "--require-gpus", "9"], "h100_sxm_x8_nvlink.json"),
    (["probe", "--require-capability", "9.10"], "h100_sxm_x8_nvlink.json"),
    (["probe", "--json"], "does-not-exist.json"),
])
def test_the_entry_point_and_the_typer_main_agree_byte_for_byte(args, scenario):
    assert _process(QUICK_MAIN, args, scenario) == _process(TYPER_MAIN, args, scenario)


@pytest.mark.parametrize("redirect", ["> /dev/full", ">&-"])
def test_stdout_that_cannot_be_written_ends_the_same_both_ways(redirect):
    """One line, exit 2 (docs/errors.md), from the quick start as from the Typer command."""
    import shlex

    answers = [_process(["bash", "-c", f"{shlex.join([*command, 'probe', '--json'])} {redirect}"], [],
                        "h100_sxm_x8_nvlink.json") for command in (QUICK_MAIN, TYPER_MAIN)]
    assert answers[0] == answers[1]
    assert answers[0][0] == 2 and answers[0][2].startswith(b"error: cannot write to stdout")


def test_quick_json_probe_imports_neither_typer_nor_rich():
    code = ("import sys, runpy; sys.argv = ['attnsel', 'probe', '--json']\n"
            "try:\n    runpy.run_module('attnsel', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "loaded = {m.split('.')[0] for m in sys.modules}\n"
            "sys.stderr.write(' '.join(sorted(loaded & {'typer', 'click', 'rich', 'pydantic', 'torch', 'pandas'})))")
    rc, stdout, stderr = _process([sys.executable, "-c", code], [], "h200_x2_nvlink.json")
    assert rc == 0 and stdout.startswith(b"{"), stderr
    assert stderr == b""
