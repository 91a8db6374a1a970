"""`explain --live` / `--compare-live` through attnsel's real adapter (attention/explain/live.py), against a
FAKE vLLM package tree put on sys.path (tests/fixtures/fake_vllm, canned answers; never real vLLM).

The canned answers are what docs/vllm-rules.md §9 says vLLM 0.33 answers (or deliberately not, to test
the disagreement report); the API shapes are those of cuda.py in each era (§5b seed, §9 0.33).
"""

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.attention.explain.document import (
    LiveAnswerAsked,
    LiveReport,
    LiveVerdictFields,
    MismatchFields,
)
from attnsel.cli.app import app

FAKE = Path(__file__).parent / "fixtures" / "fake_vllm"
RUNNER = CliRunner()

# §9 non-MLA "other" list on CC 9: FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, TURBOQUANT;
# TURBOQUANT is valid only with a turboquant_* kv cache.
H100_033 = {
    "valid": [["FLASH_ATTN", 0], ["FLASHINFER", 1], ["TRITON_ATTN", 2], ["FLEX_ATTENTION", 3]],
    "invalid": {"TURBOQUANT": [4, ["kv_cache_dtype not supported"]]},
}


class _FlashAttn:
    @staticmethod
    def get_preferred_block_size(default):
        return default  # MultipleOf(16) accepts 16 (§2 get_preferred_block_size)

    @staticmethod
    def validate_configuration(**kwargs):
        return []


def _drop_vllm_modules():
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture
def fake_vllm(monkeypatch):
    def install(era):
        _drop_vllm_modules()
        monkeypatch.syspath_prepend(str(FAKE / era))
        importlib.invalidate_caches()
        cuda = importlib.import_module("vllm.platforms.cuda")
        registry = importlib.import_module("vllm.v1.attention.backends.registry")
        registry.CLASSES.clear()
        registry.CLASSES["FLASH_ATTN"] = _FlashAttn
        return cuda, registry

    yield install
    _drop_vllm_modules()


def run(*args):
    return RUNNER.invoke(app, ["explain", *args])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="a real vLLM is installed here")
@pytest.mark.parametrize("flag", ["--live", "--compare-live"])
def test_live_without_vllm_says_so_and_exits_2(flag):
    # issue contract: "Without vLLM installed, --live says so and exits 2"
    result = run("--head-size", "128", "--gpu", "H100", flag)
    assert result.exit_code == 2
    assert "needs vLLM installed" in result.stderr
    assert result.stdout == ""


def test_live_033_shows_vllms_own_answer(fake_vllm):
    cuda, _registry = fake_vllm("v033")
    cuda.CANNED[9] = H100_033
    result = run("--head-size", "128", "--dtype", "bf16", "--gpu", "H100", "--num-heads", "32", "--live", "--json")
    assert result.exit_code == 0, result.output
    live = json.loads(result.stdout)["live"]
    assert set(live) == set(LiveAnswerAsked.__required_keys__)  # the one definition of the answer's keys
    assert all(set(b) == set(LiveVerdictFields.__required_keys__) for b in live["backends"])
    assert (live["vllm_version"], live["api"]) == ("0.33.0", "candidates")
    assert [b["name"] for b in live["backends"]] == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"]
    assert live["backends"][4] == {"name": "TURBOQUANT", "priority": 4, "valid": False,
                                   "reasons": ["kv_cache_dtype not supported"]}
    assert (live["selected"], live["block_size"]) == ("FLASH_ATTN", 16)
    # the adapter asked vLLM with the target capability, every 0.33 field and the per-GPU heads
    capability, config, num_heads = cuda.CALLS[-1]
    assert tuple(capability) == (9, 0) and num_heads == 32
    assert (config.head_size, config.kv_cache_dtype, config.block_size) == (128, "auto", None)
    assert config.has_sliding_window is False and config.use_dcp is False


def test_live_human_output_names_the_installed_vllm(fake_vllm):
    cuda, _registry = fake_vllm("v033")
    cuda.CANNED[9] = H100_033
    result = run("--head-size", "128", "--dtype", "bf16", "--gpu", "H100", "--live")
    assert result.exit_code == 0, result.output
    assert "vLLM 0.33.0 installed here" in result.stdout
    assert "vLLM selects: FLASH_ATTN" in result.stdout


def test_compare_live_agrees_with_the_033_profile(fake_vllm):
    cuda, _registry = fake_vllm("v033")
    cuda.CANNED[9] = H100_033
    result = run("--head-size", "128", "--dtype", "bf16", "--gpu", "H100", "--compare-live", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["profile"] == "vllm_0_33" and "0.33.0 is installed here" in doc["profile_reason"]
    assert doc["agree"] is True and doc["mismatches"] == []


def test_compare_live_reports_each_disagreement_and_exits_1(fake_vllm):
    cuda, _registry = fake_vllm("v033")
    disagreeing = json.loads(json.dumps(H100_033))
    disagreeing["valid"] = [["FLASH_ATTN", 0], ["TRITON_ATTN", 2], ["FLEX_ATTENTION", 3]]
    disagreeing["invalid"]["FLASHINFER"] = [1, ["head_size not supported"]]
    cuda.CANNED[9] = disagreeing
    result = run("--head-size", "128", "--dtype", "bf16", "--gpu", "H100", "--compare-live", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert set(doc) == set(LiveReport.__required_keys__ | LiveReport.__optional_keys__)  # --compare-live: every key
    assert all(set(m) == set(MismatchFields.__required_keys__) for m in doc["mismatches"])
    assert doc["agree"] is False
    assert doc["mismatches"] == [
        {"what": "backend", "backend": "FLASHINFER", "ours": [], "live": ["head_size not supported"]}
    ]
    assert "disagree in 1 place" in result.stderr


def test_live_explicit_backend_import_failure_033_wording(fake_vllm):
    # §9: an import failure reads "{ExcType}: {message}" in 0.33
    cuda, registry = fake_vllm("v033")
    cuda.CANNED[9] = H100_033
    registry.CLASSES["FLASHINFER"] = ModuleNotFoundError("No module named 'flashinfer'")
    result = run("--head-size", "128", "--gpu", "H100", "--attention-backend", "FLASHINFER", "--live", "--json")
    assert result.exit_code == 1
    live = json.loads(result.stdout)["live"]
    assert live["explicit_backend"]["reasons"] == ["ModuleNotFoundError: No module named 'flashinfer'"]
    assert live["error"] == (
        "Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration. "
        "Reason: [\"ModuleNotFoundError: No module named 'flashinfer'\"]"
    )


def test_live_seed_api_rebuilds_priorities_and_says_importerror(fake_vllm):
    # seed get_valid_backends: invalid entries carry no priority, in priority order (§5b);
    # an import failure is the literal "ImportError"
    cuda, registry = fake_vllm("seed")
    cuda.CANNED[7] = {
        "valid": [["TRITON_ATTN", 2]],
        "invalid": {
            "FLASH_ATTN": ["compute capability not supported"],
            "FLASHINFER": ["ImportError"],
            "FLEX_ATTENTION": ["dtype not supported"],
        },
    }
    registry.CLASSES["FLASHINFER"] = ImportError("no flashinfer")
    result = run("--head-size", "128", "--dtype", "fp16", "--gpu", "T4", "--vllm-version", "0.17",
                 "--attention-backend", "FLASHINFER", "--live", "--json")
    live = json.loads(result.stdout)["live"]
    assert live["api"] == "pairs" and live["vllm_version"] == "0.17.0"
    assert [(b["name"], b["priority"]) for b in live["backends"]] == [
        ("FLASH_ATTN", 0), ("FLASHINFER", 1), ("TRITON_ATTN", 2), ("FLEX_ATTENTION", 3)
    ]
    assert live["explicit_backend"]["reasons"] == ["ImportError"]
    # the seed AttentionSelectorConfig has no 0.33 fields, so none is passed
    assert "use_dcp" not in live["selector_fields"]
