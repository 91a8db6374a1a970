"""Issue 24, part B: the first hour of a new user on a fresh clone without a GPU. Each class of
defect the issue names is a table here, the input shown in each row: flags printed only where
they change vLLM's choice, --check-imports without vLLM, nothing lost at narrow widths, notes that
are not errors and errors said once, suggestions that hit, completion of values, smaller promises."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.attention.versions import get_profile, release_profiles
from attnsel.cli.app import app

FIXTURES = Path(__file__).parent / "fixtures"
PROBE = FIXTURES / "probe"
H100_X8 = str(PROBE / "h100_sxm_x8_nvlink.json")
NO_NVML = str(PROBE / "nvml_missing.json")


def run(*args: str, **env: str):
    return CliRunner().invoke(app, list(args), env={"CUDA_VISIBLE_DEVICES": None, **env})


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- 2. explain prints flags only where they change what vLLM would do ---------------------------
# explain answers for the newest release here (no vLLM installed): the block size vLLM takes by
# itself is that release's default (16 up to 0.33, 64 from 0.34: config/cache.py DEFAULT_BLOCK_SIZE)
DEFAULT_BLOCK = str(get_profile(release_profiles()[-1]).params["default_block_size"])
OTHER_BLOCK = "64" if DEFAULT_BLOCK == "16" else "16"
FLAGS = [  # (explain arguments after --gpu H100, the flags line)
    ((), "vLLM flags: none needed"),
    (("--attention-backend", "FLASH_ATTN"), "vLLM flags: none needed"),
    (("--attention-backend", "flash_attn", "--block-size", DEFAULT_BLOCK), "vLLM flags: none needed"),
    (("--block-size", DEFAULT_BLOCK), "vLLM flags: none needed"),
    (("--attention-backend", "FLASHINFER"), "vLLM flags: --attention-backend FLASHINFER"),
    (("--block-size", OTHER_BLOCK), f"vLLM flags: --block-size {OTHER_BLOCK}"),
    (("--attention-backend", "FLASH_ATTN", "--block-size", "32"), "vLLM flags: --block-size 32"),
    (("--attention-backend", "TRITON_ATTN", "--block-size", OTHER_BLOCK),
     f"vLLM flags: --attention-backend TRITON_ATTN --block-size {OTHER_BLOCK}"),
    (("--model", "qwen3-8b"), "vLLM flags: none needed"),
    (("--model", "nemotron-h-8b", "--block-size", "64"), "vLLM flags: none needed"),  # vLLM sizes a hybrid's block
    (("--model", "deepseek-v3"), "vLLM flags: none needed"),
]


@pytest.mark.parametrize("args,line", FLAGS, ids=[" ".join(a) or "(defaults)" for a, _ in FLAGS])
def test_explain_prints_flags_only_where_they_change_vllms_choice(args, line):
    result = run("explain", "--gpu", "H100", *args)
    doc = json.loads(run("explain", "--gpu", "H100", *args, "--json").stdout)
    # the flags are about the attention choice; the exit code also follows the memory plan (DeepSeek-V3's
    # weights do not fit one H100: exit 1, the flags line still says what the choice needs)
    refused = (doc.get("memory") or {}).get("verdict", "fits") != "fits"
    assert result.exit_code == doc["exit_code"] == (1 if refused else 0), result.output
    flags = [text for text in result.stdout.splitlines() if text.startswith("vLLM flags:")]
    assert flags and flags[0].startswith(line)
    assert " ".join(doc["vllm_args"]) == line.removeprefix("vLLM flags: ").replace("none needed", "")


# --- 3. --check-imports without vLLM ------------------------------------------------------------
@pytest.mark.parametrize("args", [("--gpu", "H100"), ("--gpu", "B200", "--model", "deepseek-v3"),
                                  ("--gpu", "H100", "--vllm-version", "all"), ("--gpu", "all")])
def test_check_imports_without_vllm_says_so_in_one_line_exit_3(args, monkeypatch):
    import attnsel.attention.rules.imports as imports

    monkeypatch.setattr(imports, "module_available", lambda name: False)
    result = run("explain", *args, "--check-imports")
    assert result.exit_code == 3 and result.stdout == ""
    assert "vLLM is not installed" in error_line(result) and "ModuleNotFoundError" not in result.stderr


# --- 4. narrow terminals: wrap or stack, never drop ----------------------------------------------
NARROW = [  # (command, scenario, text every width must show whole)
    (("explain", "--model", "gemma-2-9b", "--gpu", "all"), None, ["Blackwell", "10.0", "10.3", "RTXPRO6000", "FLASHINFER"]),
    (("explain", "--gpu", "H100"), None, ["FLEX_ATTENTION", "TURBOQUANT", "kv_cache_dtype not supported"]),
    (("probe",), H100_X8, ["GPU-", "580.95.05", "NVIDIA H100 80GB HBM3", "9.0", "NV18"]),
    (("preflight", "--model", "llama-3.1-8b", "-tp", "8"), H100_X8, ["vLLM's custom all-reduce can run", "FLASH_ATTN"]),
    (("tune", "-m", "llama-3.1-8b", "--dry-run", "--gpu", "H100", "--quick"), None, ["FLASHINFER", "decode b=256 ctx=1024"]),
]


@pytest.mark.parametrize("width", ["60", "40"])
@pytest.mark.parametrize("args,scenario,whole", NARROW, ids=[" ".join(a[:2]) for a, _, _ in NARROW])
def test_a_narrow_terminal_loses_no_cell(args, scenario, whole, width):
    env = {"COLUMNS": width, **({"ATTNSEL_NVML_SCENARIO": scenario} if scenario else {})}
    result = run(*args, **env)
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for text in whole:  # a wrapped or folded cell is whole once its lines (and table borders) are joined
        assert re.sub(r"[\s│┃]", "", text) in re.sub(r"[\s│┃]", "", result.stdout), text
    if args[0] == "probe":  # every GPU's UUID, whole on one line
        assert len(re.findall(r"GPU-[0-9a-f-]{36}", result.stdout)) == 8


# --- 5. a note is not an error; an error is said once; -q and -v anywhere -------------------------
def test_probe_without_nvml_is_a_note_and_exit_0():
    result = run("probe", ATTNSEL_NVML_SCENARIO=NO_NVML)
    assert result.exit_code == 0
    assert "note: NVML unavailable" in result.stdout and "error:" not in result.output


@pytest.mark.parametrize("args", [("-q", "probe"), ("probe", "-q"), ("probe", "--quiet")])
def test_quiet_drops_the_note_lines_before_or_after_the_command(args):
    result = run(*args, ATTNSEL_NVML_SCENARIO=NO_NVML)
    assert result.exit_code == 0 and "note:" not in result.output and "No GPU visible" in result.stdout


@pytest.mark.parametrize("quiet", [("-q",), ()])
def test_quiet_drops_tunes_plan_notes(quiet):
    result = run("tune", "-m", "nemotron-h-8b", "--gpu", "H100", "--dry-run", "--quick", *quiet)
    assert result.exit_code == 0 and "timed rows" in result.stdout
    assert ("note: " in result.stdout) == (not quiet)


@pytest.mark.parametrize("args", [("--require-capability", "9"), ("--require-gpus", "2"), ("--require-nvlink",)])
def test_a_failed_requirement_is_said_once(args):
    result = run("probe", *args, ATTNSEL_NVML_SCENARIO=NO_NVML)
    assert result.exit_code == 1
    assert "requirement failed: " + args[0] in error_line(result) and args[0] not in result.stdout


def test_verbose_after_the_command_is_the_root_option():
    assert run("explain", "--gpu", "H100", "-v").exit_code == 0
    assert run("report", "-q", "--help").exit_code == 0  # report's own -q stays its own


# --- 6. suggestions that hit ---------------------------------------------------------------------
GPU_NAMES = [  # (--gpu, what the one error line says)
    ("MI300X", "not an NVIDIA GPU: it is an AMD GPU"),
    ("AMD Instinct MI250", "not an NVIDIA GPU: it is an AMD GPU"),
    ("mi325x", "not an NVIDIA GPU: it is an AMD GPU"),
    ("Radeon RX 7900", "not an NVIDIA GPU: it is an AMD GPU"),
    ("Gaudi3", "not an NVIDIA GPU: it is an Intel Gaudi"),
    ("Intel Max 1550", "not an NVIDIA GPU: it is an Intel GPU"),
    ("TPU v5e", "not an NVIDIA GPU: it is a Google TPU"),
    ("v5p", "not an NVIDIA GPU: it is a Google TPU"),
    ("Trainium2", "not an NVIDIA GPU: it is an AWS Neuron"),
    ("M3 Max", "not an NVIDIA GPU: it is a CPU or an Apple chip"),
    ("H1000", "unknown GPU name 'H1000'. Did you mean H100"),
    ("a100 nonsense", "Did you mean A100"),
]


@pytest.mark.parametrize("command", ["explain", "tune", "preflight"])
@pytest.mark.parametrize("gpu,said", GPU_NAMES, ids=[g for g, _ in GPU_NAMES])
def test_a_gpu_name_gets_the_message_that_helps(command, gpu, said):
    args = {"explain": ("explain", "--gpu", gpu), "tune": ("tune", "--dry-run", "--gpu", gpu),
            "preflight": ("preflight", "--model", "llama-3.1-8b", "--gpu", gpu, "--num-gpus", "1")}[command]
    result = run(*args)
    assert result.exit_code == 2
    line = error_line(result)
    assert said in line
    assert ("--capability" in line) == (command != "preflight")  # offered only where the flag exists


BACKENDS = [  # (--attention-backend [--vllm-version], what the line says, what it must not say)
    (("FLASH_ATTENTION",), "Did you mean FLASH_ATTN?", "FLEX_ATTENTION?"),
    (("flashinfr",), "Did you mean FLASHINFER", "ROCM"),
    (("TRITON_ATN",), "Did you mean TRITON_ATTN", "CPU_ATTN"),
    (("xformers",), "vLLM removed XFORMERS before 0.17.0", "Did you mean"),
    (("tree_attn",), "vLLM 0.21.0 removed TREE_ATTN (0.20.0 had it)", "ROCM"),
    (("turboquant", "--vllm-version", "0.18"), "vLLM 0.20.0 added TURBOQUANT", "ROCM"),
]


@pytest.mark.parametrize("args,said,not_said", BACKENDS, ids=[a[0] for a, _, _ in BACKENDS])
def test_an_unknown_backend_gets_this_platforms_names_and_history(args, said, not_said):
    result = run("explain", "--gpu", "H100", "--attention-backend", *args)
    assert result.exit_code == 2
    line = error_line(result)
    assert said in line and not_said not in line and "CUDA backends of vLLM" in line


TUNE_BACKENDS = [  # (tune --backends, what the line says)
    ("FLASH_ATTENTION", "FLASH_ATTENTION (did you mean FLASH_ATTN?)"),
    ("flashinfr,TRITON_ATTN", "FLASHINFR (did you mean FLASHINFER"),
    ("xformers", "unknown backend(s) XFORMERS; tune supports FLASH_ATTN"),
]


@pytest.mark.parametrize("backends,said", TUNE_BACKENDS, ids=[b for b, _ in TUNE_BACKENDS])
def test_tune_backends_suggest_the_close_spelling(backends, said):
    result = run("tune", "-m", "llama-3.1-8b", "--gpu", "H100", "--dry-run", "--backends", backends)
    assert result.exit_code == 2 and said in error_line(result)


COMPLETIONS = [  # (the words typed, the word being completed, names offered, names not offered)
    (["explain", "--gpu"], "H1", {"H100", "H100-PCIE"}, {"A100"}),
    (["explain", "--gpu"], "a", {"all"}, set()),
    (["preflight", "--gpu"], "B2", {"B200"}, {"all"}),
    (["explain", "-m"], "qwen3", {"qwen3-8b", "qwen3-0.6b", "qwen3-next-80b-a3b"}, {"llama-3.1-8b"}),
    (["tune", "--model"], "tests/fixtures/ver", {"tests/fixtures/verify/"}, set()),
    (["explain", "--attention-backend"], "TURBO", {"TURBOQUANT"}, set()),
    (["explain", "--vllm-version", "0.18", "--attention-backend"], "TURBO", set(), {"TURBOQUANT"}),
    (["preflight", "--vllm-version"], "0.2", {"0.24.0", "0.20.0"}, {"0.33.0"}),
    (["explain", "--vllm-version"], "al", {"all"}, set()),
]


@pytest.mark.parametrize("words,incomplete,offered,absent", COMPLETIONS,
                         ids=[" ".join(w) + " " + i for w, i, _, _ in COMPLETIONS])
def test_shell_completion_offers_values(words, incomplete, offered, absent, monkeypatch):
    import typer.main
    from typer._completion_classes import BashComplete

    monkeypatch.chdir(Path(__file__).parents[1])
    complete = BashComplete(typer.main.get_command(app), {}, "attnsel", "_ATTNSEL_COMPLETE")
    values = {item.value for item in complete.get_completions(words, incomplete)}
    assert offered <= values and not absent & values


# --- 7. smaller promises -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["x.pdf", "x.txt", "report.docx"])
def test_report_refuses_an_output_name_whose_format_it_does_not_write(name, tmp_path):
    result = run("report", str(FIXTURES / "verify" / "h100_llama8b"), "-o", str(tmp_path / name))
    assert result.exit_code == 2 and "--format" in error_line(result)
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("args", [("explain", "-m", "qwen3-8b", "--gpu", "H100"),
                                  ("preflight", "-m", "qwen3-8b", "--gpu", "H100", "--num-gpus", "1"),
                                  ("tune", "-m", "qwen3-8b", "--gpu", "H100", "--dry-run", "--quick")])
def test_dash_m_is_model_on_every_command_that_reads_one(args):
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "qwen3" in result.stdout


@pytest.mark.parametrize("command", ["probe", "explain", "tune", "verify", "report", "preflight"])
def test_help_shows_no_python_type_names(command):
    text = run(command, "--help").stdout
    assert not re.search(r"<(bool|str|int|float|path|list\[\w+\])>", text), text


def test_verify_without_vllm_creates_no_output_folder(tmp_path, monkeypatch):
    import attnsel.attention.versions.choice as choice

    monkeypatch.setattr(choice, "installed_vllm_version", lambda: None)
    target = tmp_path / "v" / "run"
    result = run("verify", str(FIXTURES / "verify" / "h100_llama8b"), "--output", str(target))
    assert result.exit_code == 3 and "vLLM is not installed" in error_line(result)
    assert not (tmp_path / "v").exists()


PIPELINE = [  # (scenario, -tp, -pp, exit code, text of the run)
    (H100_X8, "2", "2", 0, ["TP=2 x PP=2 uses GPUs 0-3", "each of the 2 stages: TP=2", "PP=2: 32 layers split [16,16]"]),
    (H100_X8, "1", "8", 0, ["TP=1 x PP=8 uses GPUs 0-7", "PP=8: 32 layers split [4,4,4,4,4,4,4,4]"]),
    (str(PROBE / "l40s_x2_pcie.json"), "2", "2", 1, ["TP=2 x PP=2 needs 4"]),
    (str(PROBE / "a100_x4_gpu2_lost.json"), "2", "2", 1, ["needs 4", "stage 1 (the worst of 2)"]),
    (H100_X8, "1", "64", 1, ["leaves a stage without a layer"]),
]


@pytest.mark.parametrize("scenario,tp,pp,code,texts", PIPELINE, ids=[f"{Path(s).stem} tp{t} pp{p}" for s, t, p, _, _ in PIPELINE])
def test_preflight_checks_pipeline_parallelism_on_one_machine(scenario, tp, pp, code, texts):
    result = run("preflight", "-m", "llama-3.1-8b", "-tp", tp, "-pp", pp, ATTNSEL_NVML_SCENARIO=scenario)
    assert result.exit_code == code, result.output
    for text in texts:  # long messages wrap at the terminal's width
        assert text in " ".join(result.stdout.split())
    doc = json.loads(run("preflight", "-m", "llama-3.1-8b", "-tp", tp, "-pp", pp, "--json",
                         ATTNSEL_NVML_SCENARIO=scenario).stdout)
    assert doc["deployment"]["vllm_flags"][2:4] == ["--pipeline-parallel-size", pp]


SAVED_EXPLAIN = [  # (what the saved answer forced, the flags line `report` prints for it)
    ({}, "| vLLM flags | none needed (vLLM's own choice) |"),
    ({"inputs": {"block_size": 64}, "vllm_args": ["--block-size", "64"]}, "| vLLM flags | `--block-size 64` |"),
]


@pytest.mark.parametrize("forced,line", SAVED_EXPLAIN, ids=["nothing forced", "--block-size 64"])
def test_report_reads_a_saved_explain_answer_with_todays_flag_rule(forced, line, tmp_path):
    doc = json.loads((FIXTURES / "report" / "explain_llama8b_h200.json").read_text())
    assert doc["vllm_args"] == ["--attention-backend", "FLASH_ATTN", "--block-size", "16"]  # pinned when saved
    doc.update({k: dict(doc[k], **v) if isinstance(v, dict) else v for k, v in forced.items()})
    saved = tmp_path / "explain.json"
    saved.write_text(json.dumps(doc))
    result = run("report", str(saved))
    assert result.exit_code == 0, result.output
    assert line in result.stdout
