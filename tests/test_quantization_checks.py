"""vLLM's first checks on --quantization (issue 33): a name outside the release's QuantizationMethods, a
method that reads a file a bf16 checkpoint lacks, a method whose minimum capability the GPU is below, and
a flag that contradicts the checkpoint's own quant_method are refused with vLLM's text (explain and
preflight exit 1: vLLM would raise at start-up; `vllm serve` gives argparse no `choices` for it, so it is
not bad input). The names, capabilities and texts are each release's data (attention/versions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile import CATALOG, invoke  # noqa: E402

from attnsel.attention.versions import select_profile  # noqa: E402
from attnsel.attention.versions.registry import available_profiles, resolved_data  # noqa: E402

RELEASES = [name for name in available_profiles() if resolved_data(name).get("quantization")]
NEWEST = max(RELEASES, key=lambda n: tuple(resolved_data(n)["vllm_release"]))


def _explain(*args: str, version: str = NEWEST):
    result, _ = invoke(["explain", "--model", "llama-3.1-8b", "--vllm-version", version, *args])
    return result


def test_every_release_with_data_has_the_names_and_texts():
    assert "vllm_0_33" in RELEASES and "vllm_0_34" in RELEASES
    for name in RELEASES:
        rules = select_profile(name).profile.quantization
        assert "fp8" in rules.methods and set(rules.min_capability) <= set(rules.methods)
        assert {"unknown", "mismatch", "capability", "no_config_file"} <= set(rules.messages)


@pytest.mark.parametrize("version", ["vllm_0_33", "vllm_0_34"])
@pytest.mark.parametrize("name", ["bogus", "FP8", ""])
def test_an_unknown_method_is_vllms_value_error(version, name):
    result = _explain("--gpu", "H100", "--quantization", name, version=version)
    rules = select_profile(version).profile.quantization
    assert result.exit_code == 1, result.stderr
    assert f"Unknown quantization method: {name}. Must be one of {list(rules.methods)}." in result.stderr


def test_a_method_of_one_release_only():
    # 0.34 added w4afp8 and dropped fp_quant (model_executor/layers/quantization/__init__.py:15)
    new, old = select_profile("vllm_0_34").profile.quantization, select_profile("vllm_0_33").profile.quantization
    for name in set(new.methods) ^ set(old.methods):
        for version, rules in (("vllm_0_34", new), ("vllm_0_33", old)):
            result = _explain("--gpu", "H100", "--quantization", name, version=version)
            unknown = "Unknown quantization method" in (result.stderr or "")
            assert unknown == (name not in rules.methods), (version, name, result.stderr)


@pytest.mark.parametrize("method", ["awq", "gptq", "modelopt"])
def test_a_file_reading_method_on_a_bf16_checkpoint(method):
    result = _explain("--gpu", "H100", "--quantization", method)
    assert result.exit_code == 1
    assert f"Cannot find the config file for {method}" in result.stderr


def test_a_folder_with_the_methods_file_passes_that_check(tmp_path):
    config = json.loads((CATALOG / "llama-3.1-8b.json").read_text())
    config.pop("_attnsel_source", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "quant_config.json").write_text("{}")
    result, _ = invoke(["explain", "--model", str(tmp_path), "--gpu", "H100", "--quantization", "awq"])
    assert "Cannot find the config file" not in (result.stderr or "")


def test_the_capability_check_follows_the_data():
    rules = select_profile(NEWEST).profile.quantization
    minimum = rules.min_capability["fp8"]
    low = _explain("--gpu", "V100", "--quantization", "fp8")  # 7.0
    assert minimum > 70 and low.exit_code == 1
    assert (f"The quantization method fp8 is not supported for the current GPU. Minimum capability: {minimum}. "
            "Current capability: 70.") in low.stderr
    assert _explain("--gpu", "H100", "--quantization", "fp8").exit_code == 0


def test_a_flag_against_the_checkpoints_method():
    result, _ = invoke(["explain", "--model", "gpt-oss-20b", "--gpu", "H100", "-tp", "1", "--quantization", "fp8"])
    assert result.exit_code == 1
    assert ("Quantization method specified in the model config (mxfp4) does not match the quantization method "
            "specified in the `quantization` argument (fp8).") in result.stderr
    same, _ = invoke(["explain", "--model", "gpt-oss-20b", "--gpu", "H100", "--quantization", "mxfp4", "--json"])
    assert "does not match" not in same.stdout


def test_preflight_and_the_serve_line_refuse_the_same():
    for args in (["--quantization", "bogus"], ["--", "vllm", "serve", "llama-3.1-8b", "-q", "bogus"]):
        model = [] if "--" in args else ["--model", "llama-3.1-8b"]
        result, _ = invoke(["preflight", *model, "--gpu", "H100", *args])
        assert result.exit_code == 1, result.stdout
        assert "Unknown quantization method: bogus" in result.stdout


@pytest.mark.parametrize("version", ["vllm_0_33", "vllm_0_34"])
def test_a_deprecated_method_is_refused_unless_allowed_as_vllm_says(version):
    """config/model.py (0.34.0:1492-1505): a method in DEPRECATED_QUANTIZATION_METHODS raises unless
    --allow-deprecated-quantization; vLLM passes ValueError two arguments, so its text is the tuple."""
    rules = select_profile(version).profile.quantization
    method = sorted(rules.deprecated)[0]
    refused = _explain("--gpu", "H100", "--quantization", method, version=version)
    assert refused.exit_code == 1
    assert str(ValueError(rules.messages["deprecated"], method)) in refused.stderr
    assert "To bypass, set `--allow-deprecated-quantization`." in refused.stderr
    allowed = _explain("--gpu", "H100", "--quantization", method, "--allow-deprecated-quantization", version=version)
    assert allowed.exit_code == 0, allowed.stderr
    pasted, _ = invoke(["preflight", "--gpu", "H100", "--vllm-version", version, "--", "vllm", "serve", "llama-3.1-8b",
                        "-q", method, "--allow-deprecated-quantization"])
    assert pasted.exit_code == 0, pasted.stderr


@pytest.mark.parametrize("section, text", [
    ({"quant_method": "gptq", "bits": 3, "group_size": 128, "desc_act": False, "sym": True},
     "Unsupported quantization config: bits=3, sym=True"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False},
     "Unsupported quantization config: bits=4, sym=False"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False},
     "Cannot find any of ['sym'] in the model's quantization config."),
    ({"quant_method": "awq", "w_bit": 8, "q_group_size": 128, "zero_point": True},
     "Unsupported num_bits = 8. Supported: 4. For 8-bit AWQ, use Marlin backend by setting backend='awq:marlin' "
     "or backend='marlin'."),
])
def test_a_gptq_or_awq_checkpoint_of_bits_vllm_cannot_load_is_refused_in_its_words(tmp_path, section, text):
    """auto_gptq.py / auto_awq.py (0.33.0 and 0.34.0): TYPE_MAP holds GPTQ (4, sym) and (8, sym), AWQ 4."""
    config = json.loads((CATALOG / "qwen3-8b.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "quantization_config": section}))
    for version in ("vllm_0_33", "vllm_0_34"):
        result, _ = invoke(["preflight", "--model", str(tmp_path), "--gpu", "H100", "--vllm-version", version])
        assert result.exit_code == 1 and text in result.stdout, (version, result.stdout[-600:])
    fine = {**section, "bits": 4, "w_bit": 4, "sym": True}
    (tmp_path / "config.json").write_text(json.dumps({**config, "quantization_config": fine}))
    result, _ = invoke(["preflight", "--model", str(tmp_path), "--gpu", "H100"])
    assert result.exit_code == 0, result.stdout[-600:]
