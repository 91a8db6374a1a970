"""One `--dtype` spelling, one answer: explain (shape flags and --model), tune, preflight and verify
read the flag with the same parser, so a spelling is either the same dtype everywhere or the same
one-line exit-2 error everywhere (attention/rules/dtype.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnsel.attention.rules import ACCEPTED_DTYPES, parse_dtype
from attnsel.bench.verify import plan as VP
from attnsel.cli.app import app
from attnsel.errors import UserInputError

# spelling -> the dtype every command runs in on an H100 (None: refused with exit 2)
SPELLINGS = {
    "bf16": "bfloat16",
    "BF16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": None,  # Python's name, not a CLI value: vLLM's --dtype refuses it too
    "fp16": "float16",
    "f16": None,
    "half": "float16",
    "float16": "float16",
    "torch.float16": None,
    "float": "float32",
    "fp32": "float32",
    "float32": "float32",
    "torch.float32": None,
    "auto": "bfloat16",  # no model: the H100's preferred dtype; llama-3.1-8b's config says bfloat16
    "bogus": None,
    "": None,
}
H100 = ["--gpu", "H100", "--json"]
COMMANDS = {
    "explain --head-size": (["explain", "--head-size", "128", *H100], lambda doc: doc["inputs"]["dtype"]),
    "explain --model": (["explain", "--model", "llama-3.1-8b", *H100], lambda doc: doc["inputs"]["dtype"]),
    "tune --dry-run": (["tune", "--dry-run", "--head-size", "128", *H100], lambda doc: doc["shape"]["dtype"]),
    "preflight": (["preflight", "--model", "llama-3.1-8b", *H100], lambda doc: doc["explain"]["inputs"]["dtype"]),
}


def _answer(args: list[str], read_dtype) -> tuple[str, str]:
    """("ok", dtype) or ("exit N", the stderr line)."""
    result = CliRunner().invoke(app, args)
    if result.exit_code in (0, 1) and result.stdout.strip().startswith("{"):  # preflight: 1 = a check failed
        return "ok", read_dtype(json.loads(result.stdout))
    lines = [line for line in (result.stderr or "").splitlines() if line.strip()]
    assert len(lines) == 1, (args, result.exit_code, result.stderr, result.stdout[-500:])
    return f"exit {result.exit_code}", lines[0].removeprefix("error: ")


def _verify_answer(spelling: str) -> tuple[str, str]:
    """verify's check of the tune.json dtype it hands every engine, made before any engine starts."""
    plan = {"shape": {"head_size": 128, "num_q_heads": 32, "num_kv_heads": 8, "dtype": spelling}}
    try:
        return "ok", VP.shape_from_document(plan, (9, 0)).dtype
    except UserInputError as exc:
        return "exit 2", str(exc)


@pytest.mark.parametrize("spelling, canonical", SPELLINGS.items(), ids=[repr(s) for s in SPELLINGS])
def test_every_command_gives_a_spelling_the_same_answer(spelling, canonical):
    answers = {name: _answer([*args, "--dtype", spelling], read) for name, (args, read) in COMMANDS.items()}
    answers["verify"] = _verify_answer(spelling)
    if canonical is not None:
        assert answers == {name: ("ok", canonical) for name in answers}
        return
    assert {status for status, _ in answers.values()} == {"exit 2"}, answers
    messages = {message for _, message in answers.values()}
    assert len(messages) == 1, answers
    (message,) = messages
    if spelling:  # an unknown spelling is told what is accepted
        assert message.startswith(f"Unknown dtype: {spelling!r}.")
        assert message.endswith("Valid: auto, half, float16, float, float32, bfloat16, bf16, fp16, fp32")
    else:
        assert message == "--dtype is empty: give a value or leave the flag out"


def test_the_accepted_spellings_are_vllms_choices_and_attnsels_shorthands():
    vllm_choices = {"auto", "half", "float16", "bfloat16", "float", "float32"}
    assert set(ACCEPTED_DTYPES) == vllm_choices | {"bf16", "fp16", "fp32"}


def test_an_unknown_dtype_suggests_what_it_may_have_meant():
    with pytest.raises(UserInputError, match=r"Unknown dtype: 'bfloat'\. Did you mean 'bfloat16'"):
        parse_dtype("bfloat")


def test_readme_tune_command_works_as_typed():
    result = CliRunner().invoke(app, ["tune", "--dry-run", "--head-size", "128", "--dtype", "bf16", *H100])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["shape"]["dtype"] == "bfloat16"


@pytest.mark.parametrize("spelling, vllm_spelling", [("bf16", "bfloat16"), ("half", "float16"), ("FP32", "float32")])
def test_preflight_shows_the_vllm_command_line_in_vllms_spelling(spelling, vllm_spelling):
    # vLLM's CLI refuses bf16 / fp16 / fp32: the flags preflight prints must start vLLM as they are
    result = CliRunner().invoke(app, ["preflight", "--model", "llama-3.1-8b", "--dtype", spelling, *H100])
    flags = json.loads(result.stdout)["deployment"]["vllm_flags"]
    assert flags[flags.index("--dtype") + 1] == vllm_spelling


@pytest.mark.parametrize("capability, dtype", [("9.0", "bfloat16"), ("7.5", "float16"), ("5.2", "float32")])
def test_auto_without_a_model_is_the_gpus_first_supported_dtype(capability, dtype):
    # CudaPlatform.supported_dtypes (docs/vllm-rules.md §5g): bf16 from CC 8.0, fp16 from 6.0, else fp32 only
    for command, read in ((["explain", "--head-size", "128"], lambda doc: doc["inputs"]["dtype"]),
                          (["tune", "--dry-run", "--head-size", "128"], lambda doc: doc["shape"]["dtype"])):
        result = CliRunner().invoke(app, [*command, "--dtype", "auto", "--capability", capability, "--json"])
        assert result.exit_code == 0, result.stderr
        assert read(json.loads(result.stdout)) == dtype, command
