"""Bad-input corpus, part 5: the exit code is the README's for the class of the problem. A
configuration vLLM refuses outright is 1 from `tune --dry-run` as from `explain`; a flag naming
nothing is bad input (2) however it is spelled; a machine that cannot answer a flag is an
environment problem (3); a scenario file nobody can read is refused by every command (2); a
reader that leaves is 141 and an ASCII-only terminal gets ASCII, never exit 70."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hostile import FIXTURES, assert_promise, invoke

NO_NVML = str(FIXTURES / "probe" / "nvml_missing.json")
# (id, command line, environment, exit code, fragment of the one stderr line)
EXIT_CODE_CASES = [
    ("tune-dry-run-bf16-on-V100", ["tune", "--dry-run", "--gpu", "V100", "--head-size", "128", "--dtype", "bf16"], {},
     1, "Bfloat16 is only supported on GPUs with compute capability of at least 8.0"),
    ("tune-dry-run-bf16-on-T4", ["tune", "--dry-run", "--gpu", "T4", "--head-size", "128", "--dtype", "bfloat16"], {},
     1, "Bfloat16 is only supported"),
    ("explain-bf16-on-V100", ["explain", "--gpu", "V100", "--head-size", "128", "--dtype", "bf16"], {}, 1, None),
    ("tune-dry-run-fp16-on-V100", ["tune", "--dry-run", "--gpu", "V100", "--head-size", "128", "--dtype", "fp16"], {},
     0, None),
    ("tune-dry-run-fp8-kv-cache", ["tune", "--dry-run", "--gpu", "H100", "--model", "llama-3.1-8b",
                                   "--kv-cache-dtype", "fp8"], {}, 0, None),  # was exit 70 (is_fp8 moved)
    ("tune-dry-run-kv-cache-0", ["tune", "--dry-run", "--gpu", "H100", "--model", "llama-3.1-8b",
                                 "--kv-cache-dtype", "0"], {}, 2, "unknown --kv-cache-dtype '0' for vLLM"),
    ("backends-only-commas", ["tune", "--dry-run", "--gpu", "H100", "--head-size", "128", "--backends", ",,,"], {},
     2, "names no backend"),
    ("backends-comma-space", ["tune", "--dry-run", "--gpu", "H100", "--head-size", "128", "--backends", " , "], {},
     2, "names no backend"),
    ("backends-empty", ["tune", "--dry-run", "--gpu", "H100", "--head-size", "128", "--backends", ""], {},
     2, "--backends is empty"),
    ("mamba-ssm-dtype-bogus-no-model-dry-run", ["tune", "--dry-run", "--gpu", "H100", "--head-size", "128",
                                                "--mamba-ssm-cache-dtype", "bogus"], {}, 2,
     "no --mamba-ssm-cache-dtype 'bogus'"),
    ("mamba-ssm-dtype-bogus-before-the-gpu", ["tune", "--head-size", "128", "--mamba-ssm-cache-dtype", "bogus"],
     {"ATTNSEL_NVML_SCENARIO": NO_NVML}, 2, "no --mamba-ssm-cache-dtype 'bogus'"),
    ("mamba-cache-mode-bogus-no-model", ["tune", "--dry-run", "--gpu", "H100", "--head-size", "128",
                                         "--mamba-cache-mode", "bogus"], {}, 2, "no --mamba-cache-mode 'bogus'"),
    ("gpus-without-nvml", ["tune", "--gpus", "0,1", "--head-size", "128"], {"ATTNSEL_NVML_SCENARIO": NO_NVML}, 3,
     "--gpus needs NVML"),
    ("scenario-garbage-explain", ["explain"], {"ATTNSEL_NVML_SCENARIO": "garbage"}, 2, "ATTNSEL_NVML_SCENARIO"),
    ("scenario-garbage-explain-model", ["explain", "--model", "qwen3-8b"], {"ATTNSEL_NVML_SCENARIO": "/nowhere.json"},
     2, "scenario file not found"),
    ("scenario-garbage-probe", ["probe"], {"ATTNSEL_NVML_SCENARIO": "garbage"}, 2, "ATTNSEL_NVML_SCENARIO"),
    ("scenario-garbage-tune-dry-run", ["tune", "--dry-run", "--head-size", "128"], {"ATTNSEL_NVML_SCENARIO": "garbage"},
     2, "ATTNSEL_NVML_SCENARIO: scenario file not found"),
]


@pytest.mark.parametrize("case_id,args,env,code,fragment", EXIT_CODE_CASES, ids=[c[0] for c in EXIT_CODE_CASES])
def test_the_exit_code_is_the_readmes(case_id, args, env, code, fragment):
    result, elapsed = invoke(args, env)
    if code == 3:  # a progress line may come first; the last line is the error
        assert result.exit_code == 3, (result.exit_code, result.stderr)
        assert result.stderr.strip().splitlines()[-1].startswith("error: ") and fragment in result.stderr
        return
    assert_promise(result, elapsed, code, fragment)


ENV = {**os.environ, "ATTNSEL_NVML_SCENARIO": str(FIXTURES / "probe" / "l40s_x2_pcie.json"), "NO_COLOR": "1"}
ATTNSEL = f"{sys.executable} -m attnsel"


def _shell(command: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env={**ENV, **env}, timeout=60)


def test_tune_dry_run_whose_reader_leaves_ends_141():
    done = _shell(f"{ATTNSEL} tune --dry-run --gpu H100 --head-size 128 | head -1 >/dev/null; "
                  "echo ${PIPESTATUS[0]}")
    assert done.stdout.strip() == "141", done.stderr[-1500:]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize("args", ["explain --gpu H100 --model qwen2.5-vl-7b", "explain --gpu all --model nemotron-h-8b",
                                  "tune --dry-run --gpu H100 --model qwen3-next-80b-a3b"])
def test_a_terminal_without_unicode_gets_ascii_glyphs(encoding, args):
    done = subprocess.run(["bash", "-c", f"{ATTNSEL} {args}"], capture_output=True, timeout=60,
                          env={**ENV, "PYTHONIOENCODING": encoding})
    assert done.returncode == 0, done.stderr[-1500:]
    stdout = done.stdout.decode(encoding)  # every byte is one the terminal's encoding holds
    assert "FLASH_ATTN" in stdout and b"Traceback" not in done.stderr


# --- messages that name the culprit ------------------------------------------------------------


def test_preflight_names_the_cuda_visible_devices_that_hides_every_gpu():
    result, elapsed = invoke(["preflight", "--model", "llama-3.1-8b"], {"CUDA_VISIBLE_DEVICES": "-1"})
    assert_promise(result, elapsed, 1, "none is visible to CUDA with CUDA_VISIBLE_DEVICES='-1'")


@pytest.mark.parametrize("flag", ["--install-completion", "--show-completion"])
def test_completion_without_a_shell_among_the_parents_says_so(monkeypatch, flag):
    shellingham = pytest.importorskip("shellingham")

    def no_shell(*args, **kwargs):
        raise shellingham.ShellDetectionFailure()

    monkeypatch.setattr(shellingham, "detect_shell", no_shell)
    monkeypatch.delenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", raising=False)
    result, elapsed = invoke([flag])
    assert_promise(result, elapsed, 3, f"{flag}: no bash, zsh, fish or PowerShell among the parent processes")
    assert "not supported" not in result.stdout
