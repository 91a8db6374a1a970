"""vLLM's own spellings of `vllm serve` values, read as vLLM reads them (attention/rules/serve_args.py):
the human-readable integers of vllm/utils/argparse_utils.py (0.33.0 and 0.34.0 alike), `--max-model-len
auto` and vLLM's auto-fit, `--attention-backend auto` and the attention config's JSON and dotted forms."""

from __future__ import annotations

import doctest
import json

import pytest
from typer.testing import CliRunner

from attnsel.attention.rules import serve_args
from attnsel.attention.rules.serve_args import (
    AUTO_MAX_MODEL_LEN,
    attention_flags,
    human_readable_int,
    human_readable_int_or_auto,
    split_dotted_attention_config,
)
from attnsel.cli.app import app
from attnsel.errors import CheckFailed, UserInputError

RUNNER = CliRunner()
ENV = {"ATTNSEL_NVML_SCENARIO": None, "CUDA_VISIBLE_DEVICES": None, "NO_COLOR": "1"}

# argparse_utils.py human_readable_int's docstring examples, then what its regex and int() make of others
TAKEN = [("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("32k", 32000), ("128K", 131072), ("2m", 2_000_000),
         ("2M", 2 * 2**20), ("1g", 10**9), ("1T", 2**40), (" 4096 ", 4096), ("1_000", 1000), ("+5", 5), ("0.5k", 500)]
REFUSED = ["1.5K", "32kk", "1e3", "", "k", "1 k", "0x10", "12.5", "1" * 400 + "k", "9" * 5000, "-", "1kb"]


def test_the_grammar_examples_in_the_docstrings():
    assert doctest.testmod(serve_args).failed == 0


@pytest.mark.parametrize("text,value", TAKEN)
def test_vllm_human_readable_ints_are_taken(text, value):
    assert human_readable_int(text, "--max-num-batched-tokens") == value


@pytest.mark.parametrize("text", REFUSED)
def test_what_vllm_refuses_is_bad_input(text):
    with pytest.raises(UserInputError, match="--max-model-len"):
        human_readable_int(text, "--max-model-len")


def test_decimals_with_a_binary_suffix_get_vllms_reason():
    with pytest.raises(UserInputError, match="decimals are not allowed with binary suffixes like K"):
        human_readable_int("1.5K", "--max-model-len")


@pytest.mark.parametrize("text", ["auto", "AUTO", " Auto ", "-1"])
def test_auto_is_vllms_minus_one(text):
    assert human_readable_int_or_auto(text, "--max-model-len") == AUTO_MAX_MODEL_LEN


def explain_json(*args: str) -> tuple[int, dict]:
    result = RUNNER.invoke(app, ["explain", "--json", *args], env=ENV)  # before a `--`
    return result.exit_code, json.loads(result.stdout)


def test_max_model_len_auto_keeps_the_configs_length_where_it_fits():
    code, doc = explain_json("--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "auto")
    _, default = explain_json("--model", "llama-3.1-8b", "--gpu", "H100")
    assert code == 0 and doc["memory"]["max_model_len"] == default["memory"]["max_model_len"]


def test_max_model_len_auto_shrinks_to_the_estimate_vllm_would_quote():
    # vLLM 0.34 kv_cache_planning.py _auto_fit_max_model_len: the longest that fits, where the config's does not
    code, refused = explain_json("--model", "llama-3.1-8b", "--gpu", "L4")
    assert code == 1 and refused["memory"]["verdict"] == "max_model_len_too_long"
    code, fitted = explain_json("--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "auto")
    assert code == 0 and fitted["memory"]["verdict"] == "fits"
    # the estimate of the first check; 0.34's extensible cache fits again after warm-up (shorter)
    assert fitted["memory"]["max_model_len"] <= refused["memory"]["estimated_max_model_len"]
    assert any(note.startswith("--max-model-len auto: vLLM reduces") for note in fitted["memory"]["notes"])
    longer = str(fitted["memory"]["max_model_len"] + 64)  # the longest that fits: a few blocks more do not
    _, beyond = explain_json("--model", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", longer)
    assert beyond["memory"]["verdict"] == "max_model_len_too_long"


def test_max_model_len_auto_cannot_make_room_for_weights():
    code, doc = explain_json("--model", "deepseek-v3", "--gpu", "H100", "--max-model-len", "auto")
    assert code == 1 and doc["memory"]["verdict"] == "weights_do_not_fit"


def test_dotted_attention_config_is_merged_as_vllms_parser_merges_it():
    kept, merged = split_dotted_attention_config(
        ["--gpu", "H100", "--attention-config.backend", "FLASHINFER", "-ac.flash_attn_version=3",
         "--attention_config.x.y", "8k", "--", "--attention-config.backend", "NOT_OURS"])
    assert kept == ["--gpu", "H100", "--", "--attention-config.backend", "NOT_OURS"]
    assert merged == {"backend": "FLASHINFER", "flash_attn_version": 3, "x": {"y": 8000}}


def test_attention_config_json_expands_human_readable_numbers_and_lists_unmodelled_keys():
    flags = attention_flags(None, '{"backend": "auto", "flash_attn_version": 2, "some_size": 8k}', None)
    assert (flags.backend, flags.flash_attn_version, flags.not_checked) == (None, 2, ("some_size",))
    assert "not checked: --attention-config some_size" in flags.notes[0]


def test_both_backend_spellings_at_once_is_vllms_error_even_with_auto():
    # arg_utils.py create_engine_config: `attention_backend is not None` (auto included) and a config backend
    with pytest.raises(CheckFailed, match="mutually exclusive"):
        attention_flags("auto", None, {"backend": "FLASHINFER"})
    assert attention_flags("auto", None, {"backend": "auto"}).backend is None


@pytest.mark.parametrize("args", [("-ac", '{"backend": "FLASHINFER"}'), ("--attention-config.backend", "FLASHINFER"),
                                  ("--attention-backend", "FLASHINFER")])
def test_every_spelling_of_the_backend_gives_one_answer(args):
    code, doc = explain_json("--model", "llama-3.1-8b", "--gpu", "H100", *args)
    assert code == 0 and doc["selected"] == "FLASHINFER" and doc["context"]["attention_backend"] == "FLASHINFER"


def test_preflight_says_what_it_does_not_check():
    result = RUNNER.invoke(app, ["preflight", "--model", "llama-3.1-8b", "--gpu", "H100", "-tp", "2", "--num-gpus", "2",
                                 "-dcp", "2", "-ac", '{"use_cudnn_prefill": true}', "--json"], env=ENV)
    doc = json.loads(result.stdout)
    flags = next(c for c in doc["checks"] if c["name"] == "flags")
    assert flags["status"] == "warn" and "--decode-context-parallel-size 2" in flags["message"]
    assert "use_cudnn_prefill" in flags["message"] and result.exit_code == doc["exit_code"] == 0
    assert "--decode-context-parallel-size" in doc["deployment"]["vllm_flags"]


# --- a pasted `vllm serve` line after `--` -----------------------------------------------------------
def preflight_json(*args: str) -> tuple[int, dict, str]:
    result = RUNNER.invoke(app, ["preflight", "--gpu", "H100", "--json", *args], env=ENV)  # before a `--`
    return result.exit_code, (json.loads(result.stdout) if result.stdout.strip() else {}), result.stderr


def test_a_pasted_serve_line_is_the_same_deployment_as_attnsels_own_flags():
    code, pasted, _ = preflight_json("--", "vllm", "serve", "llama-3.1-8b", "-tp", "2", "--max-model-len", "32k",
                                     "-q", "fp8", "--kv-cache-dtype=fp8")
    own_code, own, _ = preflight_json("--model", "llama-3.1-8b", "-tp", "2", "--max-model-len", "32k",
                                      "--quantization", "fp8", "--kv-cache-dtype", "fp8")
    assert (code, pasted["deployment"], pasted["memory"]) == (own_code, own["deployment"], own["memory"])
    assert pasted["memory"]["max_model_len"] == 32000  # -q inside the line is vLLM's --quantization


def test_serve_flags_attnsel_does_not_model_are_listed_never_refused():
    code, doc, _ = preflight_json("--strict", "--", "vllm", "serve", "llama-3.1-8b", "--port", "8000",
                                  "--enable-chunked-prefill", "--served-model-name=x")
    flags = next(c for c in doc["checks"] if c["name"] == "flags")
    assert code == 0 and flags["status"] == "pass"
    for flag in ("--port 8000", "--enable-chunked-prefill", "--served-model-name=x"):
        assert flag in flags["message"]


def test_explain_reads_the_serve_line_and_notes_what_it_does_not_check():
    code, doc = explain_json("--gpu", "H100", "--", "vllm", "serve", "deepseek-v3", "-tp", "8", "-pp", "2",
                             "--max-model-len", "auto", "--seed", "4")
    assert code == 0 and doc["memory"]["verdict"] == "fits"  # -pp reaches explain's memory plan
    assert any("--seed 4" in note for note in doc["notes"])


@pytest.mark.parametrize("args,fragment", [
    (("-tp", "1", "--", "vllm", "serve", "llama-3.1-8b", "-tp", "2"), "contradict each other"),
    (("--", "vllm", "serve", "llama-3.1-8b", "qwen3-8b"), "names two models"),
    (("--", "vllm", "serve", "llama-3.1-8b", "--max-model-len"), "needs a value"),
    (("--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "1.5K"), "decimals are not allowed"),
])
def test_a_serve_line_that_cannot_be_one_deployment_is_bad_input(args, fragment):
    code, _, stderr = preflight_json(*args)
    assert code == 2 and fragment in stderr and len(stderr.strip().splitlines()) == 1


def test_the_model_may_come_from_either_side_once():
    code, doc, _ = preflight_json("--model", "llama-3.1-8b", "--", "vllm", "serve", "-tp", "1")
    assert code == 0 and doc["model"] == "llama-3.1-8b"
    code, _, stderr = preflight_json("--model", "qwen3-8b", "--", "vllm", "serve", "llama-3.1-8b")
    assert code == 2 and "contradict each other" in stderr
