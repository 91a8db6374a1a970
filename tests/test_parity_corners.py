"""Selector corners the random parity grid held out, replayed without vLLM (issue 21 item 6C).

tests/fixtures/parity_corners/corners_0XX.json hold the answers the real vLLM 0.29.0-0.31.0 / 0.33.0 wheels
gave on CPU for the cases in corner_cases.json:
    python -m attnsel.bench.tools.release_env run 0.33.0 -- -m attnsel.bench.tools.parity_live \\
        --vllm-version 0.33 --case tests/fixtures/parity_corners/corner_cases.json \\
        --record tests/fixtures/parity_corners/corners_033.json
The corners: CC 10.0, head size 256, a dense layer with mm-prefix (with sparse; with an encoder-decoder
layer and an fp8_e4m3 or auto cache), each with and without a model config. vLLM reads
`model_config.is_mm_prefix_lm` before letting FA4's head-256 kernel fall back to FA2
(fa_utils.py `_fa4_hd256_fallback_reason`); a bare shape (no --model: `model_dims_known=False`) has
none, so FA4 resolves and FLASH_ATTN's mm-prefix reason goes. The KV block is sized after the model
is built, so the FA4 head-256 page (128) applies to a bare shape too; and FlashInfer's
device-cpu query-lens check answers True without a model config (flashinfer.py)."""

import json

import pytest
from recordings import recorded_glob
from typer.testing import CliRunner

from attnsel.attention.rules import SelectionContext, SelectorInputs
from attnsel.attention.selector import explain
from attnsel.attention.versions import get_profile
from attnsel.cli.app import app

RECORDS = {path.stem: json.loads(path.read_text()) for path in recorded_glob("parity_corners", "corners_*.json")}


def _params():
    return [pytest.param(name, case, id=f"{name}-{i}") for name, doc in sorted(RECORDS.items())
            for i, case in enumerate(doc["cases"])]


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_each_corner_recording_is_clean_and_whole(name):
    doc = RECORDS[name]
    assert doc["mismatching_cases"] == 0 and doc["cases_compared"] == len(doc["cases"]) > 0
    assert doc["vllm_version"].split("+")[0] in get_profile(doc["profile"]).data["answers_for"]


@pytest.mark.parametrize("name,case", _params())
def test_profile_gives_vllms_answer_in_the_corner(name, case):
    profile = get_profile(RECORDS[name]["profile"])
    ctx_kw = dict(case["context"], capability=tuple(case["context"]["capability"]))
    inputs, ctx = SelectorInputs(**case["inputs"]), SelectionContext(**ctx_kw)
    ours = explain(profile, inputs, ctx)
    vllm = case["vllm"]
    assert [[b.name, b.priority, list(b.reasons)] for b in ours.backends] == vllm["backends"]
    assert ours.selected == vllm["selected"]
    if vllm["selected"] is not None:
        assert ours.block_size == vllm["block_size"]


@pytest.mark.parametrize("version", ["0.31", "0.33"])
def test_a_bare_mm_prefix_shape_on_blackwell_gets_flash_attn_as_vllm_without_a_model_config(version):
    args = ["explain", "--json", "--vllm-version", version, "--capability", "10.0", "--head-size", "256",
            "--dtype", "bf16", "--use-mm-prefix", "--attn-type", "encoder_decoder"]
    doc = json.loads(CliRunner().invoke(app, args).stdout)
    flash_attn = next(b for b in doc["backends"] if b["name"] == "FLASH_ATTN")
    assert flash_attn["valid"] and doc["selected"] == "FLASH_ATTN"
    # and says that a real mm-prefix model's config would make vLLM refuse it
    assert any(note.startswith("no --model") and "FLASH_ATTN would be refused" in note for note in doc["notes"])
    sparse = json.loads(CliRunner().invoke(app, [*args[:-2], "--use-sparse"]).stdout)
    assert next(b for b in sparse["backends"] if b["name"] == "FLASH_ATTN")["reasons"] == ["sparse not supported"]
