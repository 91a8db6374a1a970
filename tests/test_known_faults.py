"""Known vLLM faults are release data (`known_faults` in attention/versions/vllm_0_X.json, inherited
through `base`), and `attnsel explain` / `attnsel tune --dry-run` warn where the user's configuration
meets one of the release they answer for. The releases affected are read from the data, never listed
here: FlashInfer's native fp8 decode with q_scale != 1 (attention/kernels/vllm/fp8_faults.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnsel.attention.versions import (
    FaultConfig,
    QScale,
    faults_met,
    get_profile,
    release_profiles,
)
from attnsel.cli.app import app

FAULT = "flashinfer-native-fp8-decode-q-scale"
RELEASES = release_profiles()
AFFECTED = [n for n in RELEASES if any(f.id == FAULT for f in get_profile(n).known_faults)]
# FLASHINFER on an H100 without FlashInfer's cubins (XQA unavailable), an fp8 cache, calibrated q scales
MEETS = ["--capability", "9.0", "--kv-cache-dtype", "fp8", "--attention-backend", "FLASHINFER",
         "--no-flashinfer-cubin", "--calibrated-q-scale"]


def _explain(*args: str) -> dict:
    result = CliRunner().invoke(app, ["explain", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _ids(doc: dict) -> list[str]:
    return [f["id"] for f in doc["known_faults"]]


def test_the_data_has_affected_and_unaffected_releases():
    assert AFFECTED and set(RELEASES) - set(AFFECTED)


@pytest.mark.parametrize("release", RELEASES)
def test_explain_warns_exactly_for_the_releases_whose_data_has_the_fault(release):
    doc = _explain(*MEETS, "--vllm-version", get_profile(release).vllm_version)
    assert doc["selected"] == "FLASHINFER" and doc["error"] is None
    assert (FAULT in _ids(doc)) == (release in AFFECTED)
    if release in AFFECTED:
        fault = next(f for f in doc["known_faults"] if f["id"] == FAULT)
        assert fault["certainty"] == "met" and fault["vllm_change"] and fault["workaround"] and fault["evidence"]
        assert any("no FlashInfer cubins" in why for why in fault["why"])


@pytest.mark.parametrize("release", AFFECTED[-1:])
def test_no_warning_where_a_condition_does_not_hold(release):
    version = ["--vllm-version", get_profile(release).vllm_version]
    unit = [a for a in MEETS if a != "--calibrated-q-scale"] + ["--no-calibrated-q-scale"]
    assert _ids(_explain(*unit, *version)) == []  # q_scale 1.0: vLLM's default
    with_cubins = [a for a in MEETS if a != "--no-flashinfer-cubin"]
    assert _ids(_explain(*with_cubins, *version)) == []  # XQA decodes on SM90
    auto_kv = [a for a in MEETS if a != "fp8" and a != "--kv-cache-dtype"]
    assert _ids(_explain(*auto_kv, *version)) == []  # a 16-bit cache
    blackwell = ["--capability", "10.0", *MEETS[2:]]
    assert _ids(_explain(*blackwell, *version)) == []  # SM10x quantizes the decode query to fp8


@pytest.mark.parametrize("release", AFFECTED[-1:])
def test_a_checkpoint_with_kv_scales_makes_the_fault_possible(release, tmp_path):
    from attnsel.attention.model import config as model_config

    config = dict(model_config.load_model_config("llama-3.1-8b"))
    config["quantization_config"] = {"quant_method": "compressed-tensors",
                                     "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    args = ["--model", str(path), "--capability", "9.0", "--attention-backend", "FLASHINFER", "--no-flashinfer-cubin",
            "--vllm-version", get_profile(release).vllm_version]
    fault = next(f for f in _explain(*args)["known_faults"] if f["id"] == FAULT)
    assert fault["certainty"] == "possible" and any("checkpoint" in why for why in fault["why"])


def test_every_gpu_row_of_the_matrix_says_which_fault_it_meets():
    release = get_profile(AFFECTED[-1])
    doc = _explain("--gpu", "all", "--kv-cache-dtype", "fp8", "--attention-backend", "FLASHINFER",
                   "--calibrated-q-scale", "--vllm-version", release.vllm_version)
    for row in doc["rows"]:
        expected = faults_met(release.known_faults, FaultConfig(
            backend=row["selected"], kv_cache_dtype="fp8", capability=tuple(map(int, row["capability"].split("."))),
            q_scale=QScale.CALIBRATED)) if row["error"] is None or row["error_phase"] == "memory" else ()
        # a memory refusal comes after vLLM selected its backend: that backend's faults still apply
        assert [f["id"] for f in row["known_faults"]] == [m.fault.id for m in expected]
    assert any(row["known_faults"] for row in doc["rows"]) and not all(row["known_faults"] for row in doc["rows"])


@pytest.mark.parametrize("release", [AFFECTED[-1], next(n for n in reversed(RELEASES) if n not in AFFECTED)])
def test_tune_dry_run_warns_for_an_affected_release_only(release):
    version = get_profile(release).vllm_version
    result = CliRunner().invoke(app, ["tune", "--dry-run", "--json", "--gpu", "A100", "--model", "llama-3.1-8b",
                                      "--kv-cache-dtype", "fp8", "--quick", "--vllm-version", version])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    flashinfer_timed = any(c["backend"] == "FLASHINFER" and c["status"] == "planned" for c in plan["configs"])
    assert flashinfer_timed
    assert ([f["id"] for f in plan["known_faults"]] == [FAULT]) == (release in AFFECTED)


def test_each_release_that_says_it_checked_the_fault_names_where():
    for name in AFFECTED:
        fault = next(f for f in get_profile(name).known_faults if f.id == FAULT)
        assert fault.fixed_in is None and fault.checked
        for release, where in fault.checked.items():
            assert get_profile(release).known_faults, release  # the checked release has it too
            assert "flashinfer.py:" in where


def test_tune_results_carry_the_warning_of_the_plan():
    import dataclasses
    import functools

    from attnsel.bench.plan import build as P
    from attnsel.bench.plan import make_shape, vllm_default_choice, vllm_verdict
    from attnsel.bench.sweep import SweepOptions
    from attnsel.bench.tune import recommend as REC
    from attnsel.bench.tune.document import build_document
    from attnsel.bench.tune.request import plan_faults

    release = get_profile(AFFECTED[-1])
    shape = make_shape(128, 32, 8, "bf16", kv_cache_dtype="fp8")
    plan = P.build_plan(shape, (8, 0), backends=["FLASHINFER", "TRITON_ATTN"], kinds=["decode"], grid="quick",
                        verdict=functools.partial(vllm_verdict, vllm_version=release.vllm_version),
                        default_choice=functools.partial(vllm_default_choice, vllm_version=release.vllm_version))
    plan = dataclasses.replace(plan, known_faults=plan_faults(release, plan))
    doc = build_document(plan, SweepOptions(), [], REC.DEFAULT_WEIGHTS, device={"name": "NVIDIA A100"}, gpu_env={},
                         clocks={}, worker_info={})
    assert [f["id"] for f in doc.to_dict()["plan"]["known_faults"]] == [FAULT]
    assert any(w.startswith(f"known vLLM fault {FAULT}") for w in doc.warnings or [])
