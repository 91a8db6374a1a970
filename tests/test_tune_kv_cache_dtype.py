"""`attnsel tune --kv-cache-dtype` asks the release it plans for (issue 21 item 6): a value that
release does not know is bad input (exit 2) listing the release's own values, as `explain` refuses
it; a value the release accepts that tune has no kernel path for (nvfp4, fp8_inc, ...) or that the
GPU cannot hold is "not timed: <why>" (exit 1, as a grid with nothing to time); the fp8 caches tune
builds plan as before. No GPU: --dry-run with --gpu."""

import json

import pytest
from typer.testing import CliRunner

from attnsel.attention.kernels import TIMED_KV_CACHE_DTYPES
from attnsel.attention.versions import load_profile, release_profiles, select_profile
from attnsel.cli.app import app

LAYER = ["--head-size", "128", "--dtype", "bf16", "--dry-run"]


def tune(*args):
    return CliRunner().invoke(app, ["tune", *LAYER, *args])


def explain(*args):
    return CliRunner().invoke(app, ["explain", "--head-size", "128", "--dtype", "bf16", *args])


def one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def _release_versions():
    return [".".join(map(str, load_profile(name).release[:2])) for name in release_profiles()]


@pytest.mark.parametrize("version", _release_versions())
def test_a_cache_dtype_the_release_does_not_know_is_bad_input_listing_that_releases_own(version):
    profile = select_profile(version).profile
    newest = select_profile(_release_versions()[-1]).profile
    unknown = [d for d in newest.cache_dtypes if d not in profile.cache_dtypes] + ["fp9"]
    result = tune("--gpu", "B200", "--vllm-version", version, "--kv-cache-dtype", unknown[0])
    assert result.exit_code == 2, result.output
    line = one_line_error(result)
    assert f"unknown --kv-cache-dtype {unknown[0]!r}" in line and profile.name in line
    assert line.endswith(", ".join(profile.cache_dtypes))
    # explain refuses the same value for the same release (vLLM's get_attn_backend assert)
    assert explain("--gpu", "B200", "--vllm-version", version, "--kv-cache-dtype", unknown[0]).exit_code == 2


def test_nvfp4_that_vllm_0_33_accepts_is_not_timed_rather_than_unknown():
    assert explain("--gpu", "B200", "--vllm-version", "0.33", "--kv-cache-dtype", "nvfp4").exit_code == 0
    result = tune("--gpu", "B200", "--vllm-version", "0.33", "--kv-cache-dtype", "nvfp4")
    assert result.exit_code == 1, result.output
    line = one_line_error(result)
    assert "not timed:" in line and "nvfp4" in line and "unknown" not in line
    assert all(d in line for d in TIMED_KV_CACHE_DTYPES)  # says what tune can build instead


@pytest.mark.parametrize("version", _release_versions())
def test_every_accepted_cache_dtype_either_plans_or_is_not_timed_never_unknown(version):
    profile = select_profile(version).profile
    for dtype in profile.cache_dtypes:
        result = tune("--gpu", "H100", "--vllm-version", version, "--kv-cache-dtype", dtype, "--json")
        if dtype in TIMED_KV_CACHE_DTYPES:
            assert result.exit_code in (0, 1) and "not timed" not in result.output, (dtype, result.output)
        else:
            assert result.exit_code == 1 and "not timed:" in one_line_error(result), (dtype, result.output)


def test_a_bfloat16_cache_on_a_gpu_without_bf16_is_not_timed():
    t4 = ["tune", "--head-size", "128", "--dtype", "fp16", "--dry-run", "--gpu", "T4", "--vllm-version", "0.33"]
    result = CliRunner().invoke(app, [*t4, "--kv-cache-dtype", "bfloat16"])
    assert result.exit_code == 1, result.output
    assert "not timed:" in one_line_error(result) and "7.5" in result.stderr
    assert CliRunner().invoke(app, [*t4, "--kv-cache-dtype", "float16"]).exit_code == 0


@pytest.mark.parametrize("version", ["0.17", "0.33"])
def test_an_fp8_cache_is_still_timed_on_the_backends_vllm_accepts_it_for(version):
    result = tune("--gpu", "H100", "--vllm-version", version, "--kv-cache-dtype", "fp8", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["shape"]["kv_cache_dtype"] == "fp8"
    assert doc["timed_rows"] > 0 and any(c["status"] == "planned" for c in doc["configs"])
