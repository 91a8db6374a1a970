"""`attnsel explain` with explicit inputs: exit codes 0/1/2, the JSON document, vLLM's exact messages.

Expectations from docs/vllm-rules.md (cited per test) and the issue's exit-code contract.
"""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

RUNNER = CliRunner()


def run(*args):
    # This file describes the seed-era profile. Since the vLLM 0.33 issue the default profile is
    # the installed vLLM's (else the newest), so these tests name the seed profile (vLLM main of Feb 2026) by name.
    if "--vllm-version" not in args:
        args = (*args, "--vllm-version", "seed")
    return RUNNER.invoke(app, ["explain", *args])


def run_json(*args):
    result = run(*args, "--json")
    return result, json.loads(result.stdout)


def test_h100_llama_json_document():
    result, doc = run_json("--head-size", "128", "--dtype", "bf16", "--gpu", "H100")
    assert result.exit_code == 0
    assert doc["profile"] == "seed_0_17"
    assert doc["gpu"] == {"name": "H100 SXM5 80GB", "capability": "9.0"}
    assert doc["inputs"]["head_size"] == 128 and doc["inputs"]["dtype"] == "bfloat16"
    assert [b["name"] for b in doc["backends"]] == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
    assert doc["backends"][0] == {"name": "FLASH_ATTN", "priority": 0, "valid": True, "reasons": []}
    assert (doc["selected"], doc["block_size"], doc["kernel_block_size"]) == ("FLASH_ATTN", 16, 16)
    assert doc["error"] is None
    assert doc["vllm_args"] == []  # vLLM's own choice: no flags to paste
    assert doc["warnings"] == [  # docs/vllm-rules.md §5d seed log line
        "Using FLASH_ATTN attention backend out of potential backends: "
        "('FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION')"
    ]


def test_json_stdout_is_only_json_even_on_failure():
    result = run("--head-size", "128", "--gpu", "H100", "--attention-backend", "FLASHMLA", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["selected"] is None and doc["exit_code"] == 1
    # docs/vllm-rules.md §5c explicit-backend message
    expected = (
        "Selected backend AttentionBackendEnum.FLASHMLA is not valid for this configuration. "
        "Reason: ['head_size not supported', 'block_size not supported', 'non-MLA not supported']"
    )
    assert doc["error"] == expected
    assert expected in result.stderr


def test_human_output_names_the_profile_and_the_choice():
    result = run("--head-size", "128", "--dtype", "bf16", "--gpu", "H100")
    assert result.exit_code == 0
    assert "rule profile seed_0_17" in result.stdout
    assert "vLLM selects: FLASH_ATTN" in result.stdout
    assert "vLLM flags: none needed" in result.stdout  # vLLM's own choice: nothing to paste


def test_blackwell_deepseek_gets_flashinfer_mla_and_block_32():
    result, doc = run_json("--head-size", "576", "--use-mla", "--num-heads", "128", "--qk-nope-head-dim", "128",
                           "--gpu", "B200")
    assert result.exit_code == 0
    assert (doc["selected"], doc["block_size"], doc["kv_cache_layout"]) == ("FLASHINFER_MLA", 32, "HND")
    assert "Setting kv cache block size to 32 for FLASHINFER_MLA backend." in doc["warnings"]  # §5f step 7


def test_vllm_refusal_exits_1_with_the_message_on_stderr():
    # docs/vllm-rules.md §5f: --block-size 8 with --attention-backend FLASHINFER
    result = run("--head-size", "128", "--gpu", "H100", "--attention-backend", "FLASHINFER", "--block-size", "8")
    assert result.exit_code == 1
    assert (
        "User-specified --block-size 8 is incompatible with the specified --attention-backend FLASHINFER "
        "(supported kernel block sizes: [16, 32, 64])."
    ) in result.stderr


def test_bf16_on_turing_is_vllms_dtype_error():
    result = run("--head-size", "128", "--dtype", "bfloat16", "--gpu", "T4")
    assert result.exit_code == 1
    assert "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU" in result.stderr


def test_block_size_outside_vllms_choices_exits_1():
    # docs/vllm-rules.md §4: BlockSize is also the set of --block-size choices
    result, doc = run_json("--head-size", "128", "--gpu", "H100", "--block-size", "48")
    assert result.exit_code == 1
    assert doc["error"] == "argument --block-size: invalid choice: 48 (choose from 1, 8, 16, 32, 64, 128, 256)"
    assert all("block_size not supported" in b["reasons"] for b in doc["backends"])


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--head-size", "128", "--gpu", "H100", "--attention-backend", "flash_atn"],
         "Unknown attention backend: 'FLASH_ATN'. Did you mean FLASH_ATTN,"),
        (["--head-size", "128", "--gpu", "H100", "--kv-cache-dtype", "fp4"],
         "Invalid kv_cache_dtype: fp4. Valid values are: ('auto', 'bfloat16', 'fp8',"),
        (["--head-size", "128", "--gpu", "H100", "--dtype", "int8"], "Unknown dtype: 'int8'"),
        (["--head-size", "128", "--gpu", "NOPE100"], "unknown GPU name"),
        (["--head-size", "128", "--capability", "nine"], "bad --capability"),
        (["--head-size", "128", "--gpu", "H100", "--attn-type", "cross"], "unknown --attn-type"),
        # (`--gpu H100` alone no longer fails: it explains the bundled default model, see below)
        (["--head-size", "128", "--gpu", "H100", "--index-topk", "0"], "--index-topk must be >= 1"),
        (["--head-size", "128", "--gpu", "H100", "--index-topk=abc"], "bad --index-topk 'abc'"),
        (["--head-size", "128", "--gpu", "H100", "--num-kv-heads", "0"], "--num-kv-heads must be >= 1"),
        (["--head-size", "128", "--gpu", "H100", "--index-topk", "2048", "--no-index-topk"], "contradict"),
        (["--head-size", "128", "--gpu", "H100", "--vllm-version", "banana"], "no rule profile for vLLM 'banana'"),
        (["--head-size", "128", "--gpu", "H100", "--flash-attn-version", "5"], "flash_attn_version must be one of"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, fragment):
    result = run(*args)
    assert result.exit_code == 2
    assert fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_unknown_backend_suggests_the_closest_name():
    result = run("--head-size", "128", "--gpu", "H100", "--attention-backend", "flashinfr")
    assert result.exit_code == 2 and "Did you mean FLASHINFER" in result.stderr


def test_no_gpu_answers_for_the_gpu_families_and_says_how_to_pick_one(monkeypatch):
    import attnsel.probe.collect as collect

    class _Empty:
        gpus = ()

    monkeypatch.setattr(collect, "collect_probe", lambda **kw: _Empty())
    for args in (("--head-size", "128"), ("--model", "llama-3.1-8b")):
        result = run(*args)
        assert result.exit_code == 0, result.stderr
        first = result.stdout.splitlines()[0]
        assert first.startswith("No GPU detected on this machine") and "--gpu" in first and "--capability" in first
        assert "Hopper 9.0" in result.stdout and "Blackwell 10.0" in result.stdout
    result, doc = run_json("--model", "llama-3.1-8b")
    assert result.exit_code == 0 and doc["notes"][0].startswith("No GPU detected")
    assert {row["gpu"] for row in doc["rows"]} >= {"H100", "A100", "B200"}


def test_capability_flag_and_vllm_version():
    result, doc = run_json("--head-size", "128", "--capability", "12.0", "--vllm-version", "0.17.0")
    assert result.exit_code == 0
    assert doc["gpu"] == {"name": None, "capability": "12.0"}
    assert doc["selected"] == "FLASH_ATTN"  # §5a: SM12x uses the "other" list
    assert doc["profile"] == "vllm_0_17" and doc["profile_note"] is None  # the 0.17.0 release


def test_close_version_says_which_profile_answered():
    result, doc = run_json("--head-size", "128", "--gpu", "H100", "--vllm-version", "0.16.0")
    assert result.exit_code == 0 and "vllm_0_17" in doc["profile_note"]


def test_check_imports_reports_missing_packages(monkeypatch):
    import attnsel.attention.rules.imports as rules

    monkeypatch.setattr(rules, "module_available", lambda name: not name.startswith("flashinfer"))
    _result, doc = run_json("--head-size", "128", "--gpu", "B200", "--check-imports")
    assert doc["backends"][0] == {"name": "FLASHINFER", "priority": 0, "valid": False, "reasons": ["ImportError"]}
    assert doc["selected"] == "FLASH_ATTN"  # §5b then §5c
    assert "flashinfer" in doc["context"]["missing_modules"]


def test_gpu_all_matrix_json():
    result = run("--head-size", "128", "--gpu", "all", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    by_gpu = {row["gpu"]: row for row in doc["rows"]}
    assert by_gpu["H100"]["selected"] == "FLASH_ATTN" and by_gpu["B200"]["selected"] == "FLASHINFER"
    assert by_gpu["V100"]["selected"] == "TRITON_ATTN" and by_gpu["V100"]["dtype"] == "float16"  # §6 auto
    assert by_gpu["H100"]["dtype"] == "bfloat16"


def test_gpu_all_human_table():
    result = run("--head-size", "576", "--use-mla", "--gpu", "all")
    assert result.exit_code == 0
    assert "Hopper 9.0" in result.stdout and "FLASH_ATTN_MLA" in result.stdout


def test_explain_imports_no_torch():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from attnsel.cli.app import app\n"
        "r = CliRunner().invoke(app, ['explain', '--head-size', '128', '--gpu', 'H100', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_model_hook_feeds_the_selector():
    # gpt-oss has sinks: on A100 FA2 and FlashInfer cannot take them (docs/vllm-rules.md §3a) -> TRITON_ATTN
    model_config = pytest.importorskip("attnsel.attention.model.config")
    if "gpt-oss-20b" not in model_config.list_catalog():
        pytest.skip("catalog has no gpt-oss-20b")
    result, doc = run_json("--model", "gpt-oss-20b", "--gpu", "A100")
    assert result.exit_code == 0
    assert doc["inputs"]["has_sink"] is True
    assert doc["selected"] == "TRITON_ATTN"
    assert doc["model"]["model_type"] == "gpt_oss"


@pytest.mark.parametrize("version", ["seed", "0.17", "0.24", "0.33"])
def test_bare_mla_shapes_apply_no_check_on_dimensions_nobody_gave(version):
    # vLLM reads qk_nope_head_dim from hf_text_config only when it has a model config
    # (mla/flashinfer_mla.py supports_combination): bare shapes must not invent "got 1". (--block-size 64:
    # 0.17.0 forces an MLA kernel's block size only with a model config, cuda.py:186, so a bare shape
    # keeps 16, which FLASHINFER_MLA's 32/64-token kernel cannot split)
    result, doc = run_json("--head-size", "576", "--use-mla", "--capability", "10.0", "--block-size", "64",
                           "--vllm-version", version)
    assert result.exit_code == 0
    flashinfer_mla = next(b for b in doc["backends"] if b["name"] == "FLASHINFER_MLA")
    assert flashinfer_mla["valid"] and not any("qk_nope_head_dim" in r for r in flashinfer_mla["reasons"])
    note = next(n for n in doc["notes"] if n.startswith("MLA model dimensions unknown"))
    assert "FLASHINFER_MLA" in note and "--qk-nope-head-dim" in note and "--model" in note


def test_a_stated_mla_dimension_is_checked_as_vllm_checks_a_model_config():
    # once the user states the model's MLA fields, the ones not given read as absent (vLLM's default 1)
    _result, doc = run_json("--head-size", "576", "--use-mla", "--capability", "10.0", "--vllm-version", "0.24",
                           "--qk-nope-head-dim", "96")
    flashinfer_mla = next(b for b in doc["backends"] if b["name"] == "FLASHINFER_MLA")
    assert flashinfer_mla["reasons"] == ["FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got 96"]
    assert not any(n.startswith("MLA model dimensions unknown") for n in doc["notes"])


def test_a_real_deepseek_config_passes_the_dimension_checks_on_blackwell():
    # -tp 8: DeepSeek-V3's weights fit eight B200s, not one (explain's exit code follows the memory plan too)
    result, doc = run_json("--model", "deepseek-v3", "--gpu", "B200", "--vllm-version", "0.24", "-tp", "8")
    assert result.exit_code == 0 and doc["selected"] == "FLASHINFER_MLA"
    assert not any(n.startswith("MLA model dimensions unknown") for n in doc["notes"])


def test_a_model_configs_kv_lora_rank_reaches_the_rules_that_read_it():
    # 0.33 mla/flashinfer_mla_sparse_sm90.py reads hf_text_config.kv_lora_rank: DeepSeek-V3.2 has 512
    result, doc = run_json("--model", "deepseek-v3.2", "--gpu", "H100", "--vllm-version", "0.33")
    sm90 = next(b for b in doc["backends"] if b["name"] == "FLASHINFER_MLA_SPARSE_SM90")
    assert sm90["valid"], sm90["reasons"]
    # one H100 cannot hold DeepSeek-V3.2's weights: vLLM would not start, and explain says so (exit 1)
    assert doc["memory"]["verdict"] == "weights_do_not_fit" and result.exit_code == doc["exit_code"] == 1
