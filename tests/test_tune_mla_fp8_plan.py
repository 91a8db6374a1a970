"""The tune plan for MLA models and fp8 KV caches, without a GPU (issue "tune covers fp8 KV cache
and MLA models"): `attnsel tune --model deepseek-v3 --dry-run --gpu H100` plans vLLM's MLA
backends over the block sizes each accepts, with vLLM's reasons for the rest; `--use-mla` builds
the same layer from flags; `--kv-cache-dtype fp8` times what vLLM accepts it for and lists vLLM's
reason for the rest. Rules: docs/vllm-rules.md §3b (MLA backends), §3a/§9 (fp8 per backend), §6 (MLA head
size and heads per GPU)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.bench.plan import build as P
from attnsel.bench.plan import mla as plan_mla
from attnsel.cli.app import app

DEEPSEEK_TP8 = ["--model", "deepseek-v3", "-tp", "8", "--gpu", "H100", "--dry-run", "--json"]


def plan_json(*args):
    result = CliRunner().invoke(app, ["tune", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def configs(doc, status="planned"):
    return {(c["backend"], c["block_size"]): c for c in doc["configs"] if c["status"] == status}


@pytest.mark.parametrize("version", ["seed", "0.33"])
def test_deepseek_v3_on_an_h100_plans_vllms_mla_backends_over_the_block_sizes_each_accepts(version):
    doc = plan_json(*DEEPSEEK_TP8, "--vllm-version", version)
    shape = doc["shape"]
    assert (shape["use_mla"], shape["num_q_heads"], shape["num_kv_heads"], shape["head_size"]) == (True, 16, 1, 576)
    assert (shape["kv_lora_rank"], shape["qk_rope_head_dim"], shape["qk_nope_head_dim"]) == (512, 64, 128)
    planned = configs(doc)
    assert {b for b, _ in planned} == {"FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"}
    # FlashMLA runs 64-token pages: --block-size 64, 128, 256 (split into 64s); 16 and 32 refused
    assert sorted(bs for b, bs in planned if b == "FLASHMLA") == [64, 128, 256]
    assert {planned[("FLASHMLA", bs)]["kernel_block_size"] for bs in (64, 128, 256)} == {64}
    skipped = configs(doc, "skipped")
    assert skipped[("FLASHMLA", 16)]["reasons"] == ["block_size not supported"]
    # FLASHINFER_MLA and CUTLASS_MLA are Blackwell kernels in vLLM (CC major 10)
    assert "compute capability not supported" in skipped[("FLASHINFER_MLA", 64)]["reasons"]
    assert "compute capability not supported" in skipped[("CUTLASS_MLA", 128)]["reasons"]
    assert doc["vllm_default"] == {"backend": "FLASH_ATTN_MLA", "block_size": 16, "error": None}
    # decode only, every row launched as vLLM does (UNIFORM_BATCH builders: full CUDA graphs)
    assert {w["kind"] for w in doc["workloads"]} == {"decode"} and len(doc["workloads"]) == 11
    assert set(doc["launch"]["FLASHMLA"].values()) == {"graph"}
    assert doc["timed_rows"] == 13 * 11
    assert any("chosen apart from --attention-backend" in n for n in doc["notes"])


def test_the_mla_layer_at_tp_1_has_all_128_heads():
    doc = plan_json("--model", "deepseek-v3", "--gpu", "H100", "--dry-run", "--json", "--workload", "decode")
    assert doc["shape"]["num_q_heads"] == 128 and doc["shape"]["tensor_parallel_size"] == 1


def test_use_mla_flags_build_the_same_layer_as_the_model_and_say_what_they_assumed():
    flags = plan_json("--use-mla", "--kv-lora-rank", "512", "--qk-rope-head-dim", "64", "--num-heads", "128", "-tp", "8",
                      "--gpu", "H100", "--dry-run", "--json", "--vllm-version", "0.17")
    model = plan_json(*DEEPSEEK_TP8, "--vllm-version", "0.17")
    keys = ("head_size", "num_q_heads", "num_kv_heads", "use_mla", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")
    assert {k: flags["shape"][k] for k in keys} == {k: model["shape"][k] for k in keys}
    assert [(c["backend"], c["block_size"], c["status"]) for c in flags["configs"]] == \
           [(c["backend"], c["block_size"], c["status"]) for c in model["configs"]]
    assert any("assumed 128 (DeepSeek-V3/R1, Kimi-K2)" in n for n in flags["notes"])


def test_flashinfer_mla_on_blackwell_follows_vllms_qk_nope_head_dim_rule():
    base = ["--use-mla", "--kv-lora-rank", "512", "--qk-rope-head-dim", "64", "--num-heads", "16", "--gpu", "B200",
            "--dry-run", "--json", "--vllm-version", "0.17", "--workload", "decode"]
    ok = plan_json(*base, "--qk-nope-head-dim", "128")
    assert ("FLASHINFER_MLA", 32) in configs(ok) and ok["vllm_default"]["backend"] == "FLASHINFER_MLA"
    odd = plan_json(*base, "--qk-nope-head-dim", "96")
    reasons = configs(odd, "skipped")[("FLASHINFER_MLA", 32)]["reasons"]
    assert reasons == ["FlashInfer MLA kernel requires qk_nope_head_dim == 128, but got 96"]


def test_an_fp8_cache_on_an_mla_model_times_what_vllm_accepts_it_for():
    doc = plan_json(*DEEPSEEK_TP8, "--vllm-version", "0.17", "--kv-cache-dtype", "fp8")
    assert {b for b, _ in configs(doc)} == {"FLASHMLA"}  # FlashMLA's fp8 path; FA MLA and (0.17) Triton MLA refuse
    skipped = configs(doc, "skipped")
    assert skipped[("FLASH_ATTN_MLA", 16)]["reasons"] == ["kv_cache_dtype not supported"]
    assert skipped[("TRITON_MLA", 16)]["reasons"] == ["kv_cache_dtype not supported"]
    assert doc["vllm_default"]["backend"] == "FLASHMLA" and doc["vllm_default"]["block_size"] == 64
    # 0.33 added fp8 to TRITON_MLA (docs/vllm-rules.md §9)
    newer = plan_json(*DEEPSEEK_TP8, "--vllm-version", "0.33", "--kv-cache-dtype", "fp8")
    assert {b for b, _ in configs(newer)} == {"FLASHMLA", "TRITON_MLA"}


def test_an_fp8_cache_on_a_dense_model_times_flash_attn_flashinfer_and_triton_on_hopper():
    doc = plan_json("--model", "llama-3.1-8b", "--gpu", "H100", "--dry-run", "--json", "--vllm-version", "0.17",
                    "--kv-cache-dtype", "fp8", "--workload", "decode")
    assert doc["shape"]["kv_cache_dtype"] == "fp8"
    assert {b for b, _ in configs(doc)} == {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"}
    assert configs(doc, "skipped")[("FLEX_ATTENTION", 16)]["reasons"] == ["kv_cache_dtype not supported"]
    assert any("fp8 cache (per-tensor scales" in n and "dequantized cache" in n for n in doc["notes"])
    # FA's fp8 path is FA3 on SM90 only: on an A100 vLLM refuses it (0.33 words, docs/vllm-rules.md §9)
    ampere = plan_json("--model", "llama-3.1-8b", "--gpu", "A100", "--dry-run", "--json", "--vllm-version", "0.33",
                       "--kv-cache-dtype", "fp8", "--workload", "decode")
    assert "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100" in \
        configs(ampere, "skipped")[("FLASH_ATTN", 16)]["reasons"]


def test_text_dry_run_names_the_mla_layout_and_why_prefill_is_not_timed():
    result = CliRunner().invoke(app, ["tune", "--model", "deepseek-v3", "--dry-run", "--gpu", "H100", "--vllm-version", "0.17"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "MLA: 128 query heads per GPU over one latent cache of 512 + 64 = 576 per token" in text
    assert "FLASHMLA" in text and "block_size not supported" in text
    assert "MLA prefill backend" in text and "--attention-config.mla_prefill_backend" in text


@pytest.mark.parametrize("args, message", [
    (["--use-mla", "--kv-lora-rank", "512", "--num-heads", "16"], "missing --qk-rope-head-dim"),
    (["--model", "deepseek-v3", "--use-mla"], "not both"),
    (["--use-mla", "--kv-lora-rank", "512", "--qk-rope-head-dim", "64", "--num-heads", "16", "--num-kv-heads", "2"],
     "one latent KV head"),
    (["--use-mla", "--kv-lora-rank", "512", "--qk-rope-head-dim", "64", "--num-heads", "16", "--head-size", "512"],
     "contradicts the MLA head size"),
    (["--model", "deepseek-v3", "--workload", "prefill"], "pass --workload decode"),
])
def test_bad_mla_input_is_one_line_with_exit_2(args, message):
    result = CliRunner().invoke(app, ["tune", *args, "--gpu", "H100", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_backends_flag_accepts_mla_names_and_mixing_shows_vllms_reasons():
    assert P.parse_backends("flashmla,triton_mla") == ["FLASHMLA", "TRITON_MLA"]
    assert P.parse_backends(None) == []  # the model's grid
    doc = plan_json(*DEEPSEEK_TP8, "--vllm-version", "0.17", "--backends", "FLASH_ATTN,FLASHMLA", "--block-sizes", "64")
    assert configs(doc, "skipped")[("FLASH_ATTN", 64)]["reasons"] == ["head_size not supported", "MLA not supported"]
    assert ("FLASHMLA", 64) in configs(doc)


def test_plan_mla_defaults_to_the_dense_grid_for_dense_models():
    assert plan_mla.default_backends(False, P.BACKENDS) == list(P.BACKENDS)
    assert plan_mla.default_backends(True, P.BACKENDS) == list(plan_mla.MLA_BACKENDS)
    assert plan_mla.workload_kinds(False, ["decode", "prefill"]) == (["decode", "prefill"], [])


# --- a whole sweep with fake kernels (tests/fixtures/tune/fake_toolkit.py): the recommendation -----


FAKE_TOOLKIT = str(Path(__file__).parent / "fixtures" / "tune" / "fake_toolkit.py") + ":FakeToolkit"
NVML_H200 = str(Path(__file__).parent / "fixtures" / "tune" / "nvml_h200.json")


def _sweep(tmp_path, monkeypatch, scenario, *args):
    monkeypatch.setenv("ATTNSEL_TUNE_TOOLKIT", FAKE_TOOLKIT)
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    monkeypatch.setenv("ATTNSEL_NVML_SCENARIO", NVML_H200)
    result = CliRunner().invoke(app, ["tune", *args, "--quick", "--output", str(tmp_path / "tune"), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_an_mla_sweep_recommends_a_backend_and_block_size_against_vllms_default_with_the_timing_mode(
        tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN_MLA": {"*": "ok:0.30"}, "FLASHMLA": {"*": "ok:0.40", "64": "ok:0.20"},
                "TRITON_MLA": {"*": "ok:0.60"}}
    doc = _sweep(tmp_path, monkeypatch, scenario, "--model", "deepseek-v3", "-tp", "8", "--vllm-version", "seed")
    assert {r["backend"] for r in doc["rows"] if r["status"] == "ok"} == {"FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"}
    assert {r["kind"] for r in doc["rows"]} == {"decode"}
    decode = doc["recommendation"]["workloads"]["decode"]
    assert decode["flags"] == "--attention-backend FLASHMLA --block-size 64"
    assert decode["vllm_default"]["backend"] == "FLASH_ATTN_MLA" and decode["vllm_default"]["block_size"] == 16
    assert decode["margin_pct"] == pytest.approx(50.0, abs=1)
    assert decode["best"]["launch"] == "graph"  # uniform decode: vLLM replays a full CUDA graph
    assert decode["advice"].endswith("; timed with CUDA-graph replay")
    skipped = {(r["backend"], r["block_size"]) for r in doc["rows"] if r["status"] == "skipped"}
    assert ("FLASHINFER_MLA", 64) in skipped and ("FLASHMLA", 16) in skipped


def test_an_fp8_sweep_keeps_its_kv_cache_dtype_on_every_row_and_in_the_advice(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.30"}, "FLASHINFER": {"*": "ok:0.25"}, "TRITON_ATTN": {"*": "ok:0.29"}}
    doc = _sweep(tmp_path, monkeypatch, scenario, "--model", "llama-3.1-8b", "--kv-cache-dtype", "fp8",
                 "--workload", "decode", "--vllm-version", "0.17", "--block-sizes", "16")
    assert {r["kv_cache_dtype"] for r in doc["rows"]} == {"fp8"}
    assert {r["backend"] for r in doc["rows"] if r["status"] == "ok"} == {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"}
    flex = next(r for r in doc["rows"] if r["backend"] == "FLEX_ATTENTION")
    assert flex["status"] == "skipped" and "kv_cache_dtype not supported" in flex["error"]
    assert doc["recommendation"]["workloads"]["decode"]["flags"] == "--attention-backend FLASHINFER --block-size 16"
