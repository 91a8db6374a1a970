"""A pasted `vllm serve` line is read with the flags of the release it is checked for (issue 33, item 3):
each release's `serve_flags` (read from its wheel by bench/tools/serve_flags.py), the forms vLLM's parser
derives from them, and argparse's abbreviations. A flag that release's `vllm serve` would refuse is bad
input with vLLM's own words; a flag it knows and attnsel does not model is listed, never refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.attention.rules.serve_line import unrecognized_flags, vllm_flag_name
from attnsel.attention.versions import get_profile, release_profiles
from attnsel.cli.app import app

PARSERS = sorted((Path(__file__).parent / "fixtures" / "serve_flags").glob("vllm_*_parser.json"))


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"ATTNSEL_NVML_SCENARIO": "h100"})


@pytest.mark.parametrize("path", PARSERS, ids=[p.stem for p in PARSERS])
def test_every_option_of_the_releases_own_parser_is_accepted_and_every_declared_one_is_real(path):
    """Recorded from vLLM's own `vllm serve` parser (bench/tools/serve_flags.py --record-parser)."""
    recorded = json.loads(path.read_text())
    options = tuple(recorded["options"])
    declared = get_profile(recorded["vllm_version"]).serve_flags
    assert unrecognized_flags(options, declared) == ()
    assert declared <= set(options)


def test_every_release_has_its_flag_list_and_the_newer_ones_know_more():
    sizes = {name: len(get_profile(name).serve_flags) for name in release_profiles()}
    assert all(size > 200 for size in sizes.values()), sizes
    assert sizes[release_profiles()[-1]] > sizes[release_profiles()[0]]


@pytest.mark.parametrize("arg, name", [
    ("--max_model_len=4096", "--max-model-len"),
    ("--compilation_config.cudagraph_mode=FULL", "--compilation-config.cudagraph_mode"),
    ("-O3", "--optimization-level"),
    ("-tp", "-tp"),
])
def test_flags_are_named_as_vllms_parser_rewrites_them(arg, name):
    assert vllm_flag_name(arg) == name


def test_derived_forms_and_abbreviations_are_known_and_typos_are_not():
    declared = get_profile("0.34.0").serve_flags
    given = ("--no-enable-prefix-caching", "--disable-prefix-caching", "--attention-config.backend",
             "--max-model", "--enable-extensible-kv-cache", "--max-model-lenn", "--enable-prefix-cachin", "-xyz")
    assert unrecognized_flags(given, declared) == ("--max-model-lenn", "-xyz")


def test_a_flag_the_release_does_not_have_is_refused_in_vllms_words():
    args = ("explain", "--gpu", "H100", "--vllm-version", "0.33", "--", "vllm", "serve", "llama-3.1-8b",
            "--enable-extensible-kv-cache", "--port", "8000")
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: vLLM 0.33.0's `vllm serve` would refuse the pasted line: unrecognized "
                                     "arguments: --enable-extensible-kv-cache (`vllm serve --help` there lists its flags)")
    args_034 = [a if a != "0.33" else "0.34" for a in args]
    assert invoke(*args_034).exit_code == 0


def test_an_abbreviation_is_read_as_the_flag_it_abbreviates():
    """argparse takes `--tensor-parallel 2` as --tensor-parallel-size 2: the deployment is planned at TP 2."""
    full = invoke("preflight", "--gpu", "H100", "--num-gpus", "2", "--json", "--", "vllm", "serve", "llama-3.1-8b",
                  "--tensor-parallel-size", "2", "--max-model-len", "8192")
    short = invoke("preflight", "--gpu", "H100", "--num-gpus", "2", "--json", "--", "vllm", "serve", "llama-3.1-8b",
                   "--tensor-parallel", "2", "--max-model", "8192")
    assert full.exit_code == short.exit_code == 0, short.stderr
    assert json.loads(full.stdout)["checks"] == json.loads(short.stdout)["checks"]
