"""Hybrid (attention + Mamba / Gated DeltaNet) models: `explain` answers with the KV block size vLLM
really ends with, per version (attention/hybrid; issue 11 §3). The Jamba numbers are vLLM 0.33.0's
own (issue 11: "vLLM 0.33.0 ends with block size 80"); the others follow vLLM's formulas in
interface.py `_align_hybrid_block_size` and mamba_utils.py, restated in attention/hybrid/pages.py."""

from __future__ import annotations

import json

import pytest
from recordings import recorded_glob
from typer.testing import CliRunner

from attnsel.attention.model import config as model_config
from attnsel.attention.selector import (
    SelectionRequest,
    build_selection,
    explain_selection,
)
from attnsel.attention.versions import get_profile
from attnsel.cli.app import app

H100, A100 = (9, 0), (8, 0)


def explain(model: str, version: str, capability=H100, **flags):
    profile = get_profile(version)
    facts = model_config.derive_model_facts(model_config.load_model_config(model), capability=capability,
                                            profile=profile.model_rules,
                                            mamba_ssm_cache_dtype=flags.get("mamba_ssm_cache_dtype") or "auto")
    inputs, ctx, notes = build_selection(profile, SelectionRequest(**flags), model_facts=facts,
                                         capability=capability, gpu_name="H100")
    return explain_selection(profile, inputs, ctx, notes)


def test_jamba_on_vllm_033_ends_with_block_size_80_and_pads_the_mamba_page():
    expl = explain("jamba-v0.1", "0.33")
    assert expl.block_size == 80 and expl.error is None
    assert expl.hybrid.state_page_bytes == 311296 and expl.hybrid.attention_page_bytes_per_token == 4096
    assert "Setting attention block size to 80 tokens to ensure that attention page size is >= mamba page size." \
        in expl.warnings
    assert "Padding mamba page size by 5.26% to ensure that mamba page size and attention page size are exactly " \
        "equal." in expl.warnings
    # vLLM computes a hybrid model's block size: the flags advise none (vllm#53142, vllm#38979)
    assert expl.vllm_args == ["--attention-backend", "FLASH_ATTN"]


def test_prefix_caching_is_on_by_default_for_hybrid_models_from_033_only():
    new, old = explain("jamba-v0.1", "0.33"), explain("jamba-v0.1", "0.24")
    assert (new.hybrid.prefix_caching, new.hybrid.mamba_cache_mode) == (True, "align")
    assert (old.hybrid.prefix_caching, old.hybrid.mamba_cache_mode) == (False, "none")
    # every KV-cache group pins pages: align mode keeps two Mamba states per group
    assert (new.hybrid.groups.attention_groups, new.hybrid.groups.mamba_groups) == (1, 7)
    assert new.hybrid.groups.blocks_pinned_per_request == 1 + 7 * 2
    assert old.hybrid.groups.blocks_pinned_per_request == 1 + 7


def test_a_too_small_block_size_is_raised_and_a_large_one_kept():
    assert explain("jamba-v0.1", "0.33", block_size=16).block_size == 80
    assert explain("jamba-v0.1", "0.33", block_size=128).block_size == 128


def test_024_aligns_to_the_users_block_size():
    # 0.24 `_align_hybrid_block_size`: alignment = max(smallest kernel block, block size) = 64,
    # so the 76 tokens one Mamba state needs round up to 128, not 80
    assert explain("jamba-v0.1", "0.24", block_size=64).block_size == 128


def test_fp8_kv_cache_halves_the_attention_page_so_the_block_doubles():
    expl = explain("jamba-v0.1", "0.33", kv_cache_dtype="fp8")
    assert expl.hybrid.attention_page_bytes_per_token == 2048 and expl.block_size == 160


def test_gated_deltanet_checkpoints_align_qwen3_next_to_64_on_hopper_in_033():
    aligned = explain("qwen3-next-80b-a3b", "0.33")
    assert aligned.hybrid.kind == "gdn" and aligned.hybrid.alignment == 64 and aligned.block_size == 576
    assert explain("qwen3-next-80b-a3b", "0.33", prefix_caching=False).block_size == 544
    assert explain("qwen3-next-80b-a3b", "0.33", capability=A100).block_size == 544  # FLA prefill: no grid
    assert explain("qwen3-next-80b-a3b", "0.24").block_size == 544


def test_qwen35_takes_the_ssm_dtype_from_its_text_config_from_018_on():
    new = explain("qwen3.5-9b", "0.33")
    assert new.hybrid.state_dtypes == ("bfloat16", "float32")
    assert explain("qwen3.5-9b", "seed").hybrid.state_dtypes == ("bfloat16", "bfloat16")


def test_mamba_cache_mode_all_is_gone_in_033():
    expl = explain("nemotron-h-8b", "0.33", mamba_cache_mode="all")
    assert expl.error_type == "argparse error" and "invalid choice: 'all'" in expl.error
    kept = explain("nemotron-h-8b", "0.24", prefix_caching=True, mamba_cache_mode="all")
    assert kept.hybrid.mamba_cache_mode == "all" and kept.block_size % 128 == 0  # the Mamba-2 chunk


def test_explain_json_and_text_show_the_hybrid_section():
    runner = CliRunner()
    result = runner.invoke(app, ["explain", "--model", "jamba-v0.1", "--gpu", "H100", "--vllm-version", "0.33", "--json"])
    doc = json.loads(result.stdout)
    assert doc["block_size"] == 80 and doc["hybrid"]["padding_pct"] == pytest.approx(5.263, abs=1e-3)
    assert doc["hybrid"]["kv_cache_groups"]["blocks_pinned_per_request"] == 15
    text = runner.invoke(app, ["explain", "--model", "jamba-v0.1", "--gpu", "H100", "--vllm-version", "0.24"]).stdout
    assert "Mamba-1 state page per layer: 311,296 B" in text and "Mamba page padding: 5.26%" in text


def test_hybrid_flag_without_a_config_keeps_the_attention_size_with_a_note():
    profile = get_profile("0.33")
    inputs, ctx, notes = build_selection(profile, SelectionRequest(head_size=128, hybrid=True), capability=H100)
    expl = explain_selection(profile, inputs, ctx, notes)
    assert expl.hybrid is None and expl.block_size == 16
    assert any("without the model's config" in note for note in expl.notes)


RECORDINGS = recorded_glob("hybrid", "hybrid_*.json")  # none: the file fails at collection


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_recorded_real_vllm_hybrid_answers_match(path):
    """Each recording holds vLLM's own answers (bench/tools/hybrid_live.py: the release's
    update_block_size_for_backend, model class state shapes, MambaSpec) for the bundled hybrid configs."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    version = doc["profile_version"]
    assert doc["cases"], "an empty recording proves nothing"
    for case in doc["cases"]:
        cc = tuple(int(x) for x in case["capability"].split("."))
        expl = explain(case["model"], version, capability=cc, **case["flags"])
        h = expl.hybrid
        groups = h.groups.to_dict()
        groups.pop("padding_layers")
        ours = {"block_size": expl.block_size, "state_page_bytes": h.state_page_bytes,
                "mamba_page_size_padded": h.attention_page_bytes if h.padding_pct is not None else None,
                "prefix_caching": h.prefix_caching, "mamba_cache_mode": h.mamba_cache_mode,
                "state_dtypes": list(h.state_dtypes), "kv_cache_groups": groups}
        assert ours == {key: case["vllm"][key] for key in ours}, case


def test_glm5_next_kda_state_and_indexer_grid_size_its_block_on_033():
    expl = explain("glm-5-next", "0.33")
    h = expl.hybrid
    # KDA: conv (3, 3 x 64 x 128) bf16 + recurrent 64 x 128 x 128 float32 (mamba_utils.py kda_state_*)
    assert h.kind == "kda" and h.state_dtypes == ("bfloat16", "float32") and h.state_page_bytes == 4_341_760
    assert h.attention_page_bytes_per_token == 1024  # MLA latent 512 + rope 0, bf16
    # the DSA indexer's K cache takes blocks of 16 x 32 tokens: 4,240 tokens round up to 4,608, not 4,352
    assert h.alignment == 512 and expl.block_size == 4608


def test_glm5_next_on_blackwell_defaults_to_an_fp8_kv_cache_so_its_block_doubles_on_033():
    # vllm/model_executor/models/config.py Glm5NextModelConfig: --kv-cache-dtype auto -> fp8 on CC 10.x
    # (index_topk set); the MLA page halves to 512 B a token, so 4,240 tokens round up to 8,704 (17 x 512)
    blackwell = explain("glm-5-next", "0.33", capability=(10, 0))
    assert blackwell.hybrid.attention_page_bytes_per_token == 512 and blackwell.block_size == 8704
    assert explain("glm-5-next", "0.33").block_size == 4608  # Hopper keeps the bf16 cache


def test_glm5_next_reads_linear_attn_config_as_transformers_maps_it():
    from attnsel.attention.hybrid import hybrid_layout

    config = model_config.load_model_config("glm-5-next")
    nested = {k: v for k, v in config.items() if not k.startswith("linear_")}
    nested["linear_attn_config"] = {"num_heads": 64, "head_dim": 128, "short_conv_kernel_size": 4}
    assert hybrid_layout(nested, "glm5_next_text").sizes == hybrid_layout(config, "glm5_next_text").sizes
    without_types = {k: v for k, v in config.items() if k != "layer_types"}  # default: every 4th layer attends
    layout = hybrid_layout(without_types, "glm5_next_text")
    assert (layout.attention_layers, layout.mamba_layers) == (11, 34)


def test_vllm_024_has_no_glm5_next():
    result = CliRunner().invoke(app, ["explain", "--model", "glm-5-next", "--gpu", "H100", "--vllm-version", "0.24"])
    assert result.exit_code == 2 and "Unknown model type 'glm5_next_text'" in result.output


@pytest.mark.parametrize("version", ["0.18", "0.19"])
def test_018_019_size_the_hybrid_block_at_config_time_from_the_users_block_size(version):
    # 0.18.0 / 0.19.0 models/config.py HybridAttentionMambaModelConfig: a multiple of 16 that holds one
    # Mamba state (76 tokens -> 80), a --block-size only raised when too small; 0.24 aligns to --block-size
    assert explain("jamba-v0.1", version).block_size == 80
    assert explain("jamba-v0.1", version, block_size=64).block_size == 80
    assert explain("jamba-v0.1", version, block_size=128).block_size == 128
    assert explain("jamba-v0.1", "0.24", block_size=64).block_size == 128


@pytest.mark.parametrize("version", ["0.18", "0.19"])
def test_018_019_keep_nemotron_h_ssm_state_in_float16_so_its_block_is_half_of_024s(version):
    # 0.18.0 / 0.19.0 models/config.py NemotronHForCausalLMConfig: hf_config.mamba_ssm_cache_dtype, else float16
    old, new = explain("nemotron-h-8b", version), explain("nemotron-h-8b", "0.24")
    assert old.hybrid.state_dtypes == ("bfloat16", "float16") and old.block_size == 528
    assert new.hybrid.state_dtypes == ("bfloat16", "float32") and new.block_size == 1040


@pytest.mark.parametrize("version, mode, block", [("0.27", "all", 2048), ("0.26", "all", 2048), ("0.29", "align", 80)])
def test_prefix_caching_puts_jamba_in_all_mode_until_028(version, mode, block):
    # 0.26.0 / 0.27.0 models/config.py MambaModelConfig: 'all' if supports_mamba_prefix_caching, so the
    # block aligns to Jamba's 256-token Mamba chunk x the kernel (2048); 0.28+ always takes 'align'
    expl = explain("jamba-v0.1", version, prefix_caching=True)
    assert expl.hybrid.mamba_cache_mode == mode and expl.block_size == block


def test_mamba_cache_mode_all_is_parsed_until_031_and_rejected_from_032():
    # config/cache.py MambaCacheMode: 0.31.0 Literal["all", "align", "none"], 0.32.0 ["align", "none"]
    assert explain("jamba-v0.1", "0.31", prefix_caching=True, mamba_cache_mode="all").hybrid.mamba_cache_mode == "all"
    result = CliRunner().invoke(app, ["explain", "--model", "jamba-v0.1", "--gpu", "H100", "--vllm-version", "0.32",
                                      "--enable-prefix-caching", "--mamba-cache-mode", "all"])
    assert result.exit_code == 2 and "no --mamba-cache-mode 'all'" in result.output
