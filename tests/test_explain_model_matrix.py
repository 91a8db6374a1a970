"""`attnsel explain` with a model: the bundled default model, `--model X --gpu all` (one row per GPU
family, the model's facts derived again per GPU), and the 0.33 context flags.

Expectations from docs/vllm-rules.md (cited per test): §6 dtype resolution, §3a/§5a
(seed) and §9 (0.33) backend rules. `--vllm-version` is pinned where an answer is profile-specific.
"""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from attnsel.attention.model.config import DEFAULT_MODEL, load_model_config
from attnsel.attention.selector import SelectionRequest, build_selection
from attnsel.attention.versions import get_profile
from attnsel.cli.app import app
from attnsel.probe import families

RUNNER = CliRunner()


def explain(*args):
    return RUNNER.invoke(app, ["explain", *args])


def explain_json(*args):
    result = explain(*args, "--json")
    return result, json.loads(result.stdout)


# --- the bundled default model (README's first command) -----------------------------------------


def test_gpu_alone_explains_the_bundled_default_model_and_says_so():
    result = explain("--gpu", "H100")
    assert result.exit_code == 0, result.output
    first_line = result.stdout.splitlines()[0]
    assert f"Model: {DEFAULT_MODEL} (bundled default; pass --model or --head-size)" in first_line


def test_default_model_json_names_the_model_and_its_source():
    config = load_model_config(DEFAULT_MODEL)
    result, doc = explain_json("--gpu", "H100", "--vllm-version", "0.17")
    assert result.exit_code == 0
    assert doc["model"]["name"] == DEFAULT_MODEL
    assert doc["model"]["source"] == "bundled default"
    # §6: head size = hidden_size // num_attention_heads when head_dim is absent; heads per GPU = total // TP
    expected_head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert doc["inputs"]["head_size"] == expected_head
    assert doc["context"]["num_heads"] == config["num_attention_heads"]
    # §6 --dtype auto keeps a bf16 config on CC 9.0; §5a seed order on 9.0 starts with FLASH_ATTN
    assert doc["inputs"]["dtype"] == "bfloat16"
    assert doc["selected"] == "FLASH_ATTN"


def test_explicit_model_header_shows_its_catalog_name():
    result = explain("--model", "gemma-2-9b", "--gpu", "H100")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("Model: gemma-2-9b (catalog)")
    _, doc = explain_json("--model", "gemma-2-9b", "--gpu", "H100")
    assert (doc["model"]["name"], doc["model"]["source"], doc["model"]["model_type"]) == ("gemma-2-9b", "catalog", "gemma2")


def test_head_size_alone_reads_no_model():
    result, doc = explain_json("--head-size", "128", "--gpu", "H100")
    assert result.exit_code == 0
    assert "model" not in doc


def test_default_model_path_imports_no_torch():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from attnsel.cli.app import app\n"
        "r = CliRunner().invoke(app, ['explain', '--gpu', 'H100'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'bundled default' in r.stdout\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- --model X --gpu all --------------------------------------------------------------------------


def _rows(doc):
    return {row["gpu"]: row for row in doc["rows"]}


def test_model_matrix_has_one_row_per_gpu_family():
    result, doc = explain_json("--model", "llama-3.1-8b", "--gpu", "all")
    assert result.exit_code == 0
    assert [row["family"] for row in doc["rows"]] == [family for family, _spec in families()]
    assert doc["model"] == {"name": "llama-3.1-8b", "source": "catalog", "model_type": "llama"}
    assert doc["profile"]


def test_model_matrix_resolves_bf16_per_gpu_seed():
    # §6: bf16 config, --dtype auto: CC < 8.0 supports fp16/fp32 only -> fp16 with vLLM's warning
    result, doc = explain_json("--model", "llama-3.1-8b", "--gpu", "all", "--vllm-version", "0.17")
    assert result.exit_code == 0
    rows = _rows(doc)
    v100 = rows["V100"]
    assert v100["dtype"] == "float16"
    assert any(
        "Your device 'Tesla V100" in line and "doesn't support torch.bfloat16. Falling back to torch.float16 for compatibility." in line
        for line in v100["model_warnings"]
    )
    # §3a: FLASH_ATTN needs CC >= 8.0, FLASHINFER 7.5 <= CC <= 12.1; TRITON_ATTN runs anywhere
    assert v100["selected"] == "TRITON_ATTN"
    assert rows["T4"]["selected"] == "FLASHINFER"
    # §5a seed: FLASH_ATTN first below CC 10, FLASHINFER first on 10.x
    assert (rows["H100"]["dtype"], rows["H100"]["selected"]) == ("bfloat16", "FLASH_ATTN")
    assert rows["B200"]["selected"] == "FLASHINFER"
    assert rows["H100"]["model_warnings"] == []
    # no attention error anywhere; where the GPU is too small for 131072 tokens, the memory plan's refusal
    assert all(row["error"] is None or row["error_phase"] == "memory" for row in doc["rows"])


@pytest.mark.parametrize("args", [("--model", "llama-3.1-8b"), ("--model", "deepseek-v3", "-tp", "8"),
                                  ("--model", "gemma-2-9b", "--max-model-len", "auto")])
def test_each_matrix_row_is_what_explain_answers_for_that_gpu(args):
    # a row's exit_code and error are those of `explain --gpu ROW`, memory plan included
    _, doc = explain_json(*args, "--gpu", "all")
    for row in doc["rows"]:
        result = explain(*args, "--gpu", row["gpu"], "--json")
        if row["error_phase"] == "model_config":  # vLLM refuses the model config there (no float16, ...)
            assert result.exit_code == row["exit_code"] == 1
            continue
        own = json.loads(result.stdout)
        assert (row["exit_code"], row["error"], row["selected"]) == (result.exit_code, own["error"], own["selected"])


def test_model_matrix_033_flashinfer_needs_ampere():
    # §9: FLASHINFER CC 8.0-12.1 in 0.33, so T4 (7.5) falls through to TRITON_ATTN
    _result, doc = explain_json("--model", "llama-3.1-8b", "--gpu", "all", "--vllm-version", "0.33")
    rows = _rows(doc)
    assert rows["T4"]["selected"] == "TRITON_ATTN"
    assert rows["V100"]["selected"] == "TRITON_ATTN" and rows["V100"]["dtype"] == "float16"


def test_model_matrix_gemma2_falls_back_to_float32_on_old_gpus():
    # §6: gemma2 is in _FLOAT16_NOT_SUPPORTED_MODELS, so below CC 8.0 only float32 is left
    _result, doc = explain_json("--model", "gemma-2-9b", "--gpu", "all")
    rows = _rows(doc)
    assert rows["V100"]["dtype"] == "float32"
    assert any("Falling back to torch.float32" in line for line in rows["V100"]["model_warnings"])
    assert rows["A100"]["dtype"] == "bfloat16"


def test_model_matrix_row_carries_vllms_model_error():
    # §6: an explicit float16 for a listed model type raises on every GPU
    result, doc = explain_json("--model", "gemma-2-9b", "--gpu", "all", "--dtype", "half")
    assert result.exit_code == 0  # the matrix reports, it does not fail
    for row in doc["rows"]:
        assert row["error"].startswith("The model type 'gemma2' does not support float16. Reason:")
        assert row["selected"] is None


def test_model_matrix_text_marks_the_fallback_rows():
    result = explain("--model", "llama-3.1-8b", "--gpu", "all", "--vllm-version", "0.17")
    assert result.exit_code == 0, result.output
    assert "Model: llama-3.1-8b (catalog)" in result.stdout
    assert "* V100: vLLM: Your device 'Tesla V100" in result.stdout.replace("\n", " ")


def test_gpu_all_without_head_size_uses_the_default_model():
    result, doc = explain_json("--gpu", "all")
    assert result.exit_code == 0
    assert doc["model"]["name"] == DEFAULT_MODEL and doc["model"]["source"] == "bundled default"


# --- 0.33 context flags -----------------------------------------------------------------------------


def test_rswa_is_a_033_selector_input():
    # §9: use_rswa is in AttentionSelectorConfig; backends without it give "R-SWA not supported"
    _result, doc = explain_json("--head-size", "128", "--gpu", "H100", "--rswa", "--vllm-version", "0.33")
    assert doc["inputs"]["use_rswa"] is True
    reasons = {b["name"]: b["reasons"] for b in doc["backends"]}
    assert any("R-SWA not supported" in r for r in reasons.values())


def test_adaptive_verification_reason_is_vllms():
    _result, doc = explain_json("--head-size", "128", "--gpu", "H100", "--adaptive-verification", "--vllm-version", "0.33")
    assert doc["inputs"]["use_adaptive_verification"] is True
    message = "device-cpu query lens mismatch not supported, this is needed for adaptive verification"  # §9
    assert any(message in b["reasons"] for b in doc["backends"])


def test_033_inputs_are_ignored_with_a_note_by_the_seed_profile():
    result, doc = explain_json("--head-size", "128", "--gpu", "H100", "--rswa", "--num-kv-heads", "8",
                               "--vllm-version", "0.17")
    assert result.exit_code == 0
    assert doc["inputs"]["use_rswa"] is False
    assert any("use_rswa" in note and "ignored" in note for note in doc["notes"])
    assert any("--num-kv-heads" in note and "ignored" in note for note in doc["notes"])
    assert doc["context"]["num_kv_heads"] is None


def test_index_topk_value_reaches_the_033_sparse_rules():
    # §9: on CC 10.x, bf16 sparse MLA with <= 16 heads tries FLASH_ATTN_MLA_SPARSE_FA4 first, which
    # requires index_topk % 128 == 0 and (kv_lora_rank, qk_rope_head_dim) == (512, 64)
    base = ("--head-size", "576", "--use-mla", "--use-sparse", "--qk-nope-head-dim", "128", "--gpu", "B200",
            "--num-heads", "16", "--vllm-version", "0.33", "--kv-lora-rank", "512", "--qk-rope-head-dim", "64")
    _, doc = explain_json(*base, "--index-topk", "100")
    assert doc["context"]["index_topk"] == 100 and doc["context"]["has_index_topk"] is True
    assert doc["context"]["kv_lora_rank"] == 512
    reasons = [r for b in doc["backends"] for r in b["reasons"]]
    assert "FA4 sparse MLA requires index_topk % 128 == 0, got 100" in reasons
    assert doc["selected"] != "FLASH_ATTN_MLA_SPARSE_FA4"
    _, doc = explain_json(*base, "--index-topk", "2048")
    assert doc["selected"] == "FLASH_ATTN_MLA_SPARSE_FA4"


def test_bare_index_topk_flag_still_works_before_another_option():
    _, doc = explain_json("--head-size", "576", "--use-mla", "--index-topk", "--gpu", "B200", "--vllm-version", "0.17")
    assert doc["context"]["has_index_topk"] is True and doc["context"]["index_topk"] is None
    _, doc = explain_json("--head-size", "576", "--use-mla", "--use-sparse", "--no-index-topk", "--gpu", "B200",
                          "--vllm-version", "0.17")
    assert doc["context"]["has_index_topk"] is False


@pytest.mark.parametrize("flag", ["--num-kv-heads", "--kv-lora-rank", "--index-topk", "--rswa", "--adaptive-verification"])
def test_new_flags_are_documented_in_help(flag):
    result = RUNNER.invoke(app, ["explain", "--help"], env={"COLUMNS": "300"})
    assert flag in result.stdout


# --- the shared builder (attention/selector/request.py) --------------------------------------------------


def test_preflight_and_explain_build_the_same_selection():
    from attnsel.attention.model import derive_model_facts
    from attnsel.attention.preflight.deployment import Deployment, explain_deployment

    profile = get_profile("0.33")
    facts = derive_model_facts(load_model_config("gemma-2-9b"), capability=(9, 0), dtype="auto",
                               tensor_parallel_size=1, gpu_name="H100 SXM5 80GB", profile=profile.model_rules)
    via_preflight = explain_deployment(profile, facts, Deployment(tensor_parallel_size=1), (9, 0), "H100 SXM5 80GB")
    inputs, ctx, notes = build_selection(profile, SelectionRequest(), model_facts=facts, capability=(9, 0),
                                         gpu_name="H100 SXM5 80GB")
    assert via_preflight.inputs == inputs and via_preflight.context == ctx and notes == []
    # gemma2 has sliding_window in its config: a 0.33 selector input (§9)
    assert inputs.has_sliding_window is True


def test_model_kv_heads_reach_the_selection_context_per_gpu():
    # vLLM's get_num_kv_heads: max(1, total // TP); llama-3.1-8b has 8 KV heads (config.json)
    import json as _json

    from typer.testing import CliRunner as _Runner

    from attnsel.cli.app import app as _app

    for tp, expected in ((1, 8), (2, 4), (16, 1)):
        result = _Runner().invoke(_app, ["explain", "--model", "llama-3.1-8b", "--gpu", "B200",
                                         "--tensor-parallel-size", str(tp), "--json", "--vllm-version", "0.33"])
        assert result.exit_code == 0, result.output
        assert _json.loads(result.stdout)["context"]["num_kv_heads"] == expected
