"""What each vLLM minor release changed in the selection, release against the release before, through
`attnsel explain --vllm-version X --json` (the same answers vLLM gave in tests/fixtures/parity/).
Each test cites where the release does it."""

import json

from typer.testing import CliRunner

from attnsel.cli.app import app

RUNNER = CliRunner()


def explain(version, *args):
    result = RUNNER.invoke(app, ["explain", "--vllm-version", version, *args, "--json"])
    return json.loads(result.stdout)


def verdicts(doc):
    return {b["name"]: b["reasons"] for b in doc["backends"]}


def test_025_flashinfer_takes_nvfp4_kv_only_on_blackwell_with_trtllm():
    # 0.25 flashinfer.py FlashInferBackend.supports_kv_cache_dtype: nvfp4 needs the SM100 family and
    # TRT-LLM prefill + decode (0.24 listed nvfp4 in supported_kv_cache_dtypes everywhere)
    args = ("--gpu", "H100", "--head-size", "128", "--kv-cache-dtype", "nvfp4")
    assert verdicts(explain("0.24", *args))["FLASHINFER"] == []
    assert verdicts(explain("0.25", *args))["FLASHINFER"] == ["kv_cache_dtype not supported"]
    blackwell = ("--gpu", "B200", "--head-size", "128", "--kv-cache-dtype", "nvfp4")
    assert verdicts(explain("0.25", *blackwell))["FLASHINFER"] == []
    assert verdicts(explain("0.25", *blackwell, "--no-flashinfer-cubin"))["FLASHINFER"] == ["kv_cache_dtype not supported"]


def test_025_flash_attn_mla_sparse_is_picked_for_sparse_mla_on_hopper():
    # 0.25 cuda.py _get_backend_priorities: FLASH_ATTN_MLA_SPARSE ahead of FLASHMLA_SPARSE below 10.x
    args = ("--gpu", "H100", "--model", "deepseek-v3.2")
    before, after = explain("0.24", *args), explain("0.25", *args)
    assert "FLASH_ATTN_MLA_SPARSE" not in verdicts(before) and before["selected"] == "FLASHMLA_SPARSE"
    assert after["selected"] == "FLASH_ATTN_MLA_SPARSE" and after["block_size"] == 64


def test_023_flashinfer_still_runs_on_turing():
    # 0.23 flashinfer.py supports_compute_capability: 7.5-12.1; 0.24 raises the floor to 8.0
    # (flashinfer-ai/flashinfer#3620), so a T4 falls back to Triton
    args = ("--gpu", "T4", "--head-size", "128", "--dtype", "fp16")
    old, new = explain("0.23", *args), explain("0.24", *args)
    assert old["selected"] == "FLASHINFER" and verdicts(old)["FLASHINFER"] == []
    assert new["selected"] == "TRITON_ATTN" and verdicts(new)["FLASHINFER"] == ["compute capability not supported"]


def test_023_flashinfer_kernel_pages_stop_at_64():
    # 0.23 FlashInferBackend.get_supported_kernel_block_sizes: [16, 32, 64] always; 0.24 adds
    # 128..1024 for GQA on 10.x when TRT-LLM attention can run
    args = ("--gpu", "B200", "--head-size", "128", "--num-heads", "32", "--num-kv-heads", "8", "--block-size", "256")
    old, new = explain("0.23", *args), explain("0.24", *args)
    assert (old["kernel_block_size"], old["kernel_block_sizes"]) == (64, [16, 32, 64])
    assert new["kernel_block_size"] == 256


def test_023_mla_on_sm12x_takes_the_list_of_other_gpus():
    # 0.23 cuda.py _get_backend_priorities has no major == 12 MLA branch (0.24: TRITON_MLA, SM120 sparse)
    args = ("--gpu", "RTX5090", "--model", "deepseek-v3")
    old, new = explain("0.23", *args), explain("0.24", *args)
    assert list(verdicts(old)) == ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE"]
    assert list(verdicts(new)) == ["TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"]
    assert old["selected"] == new["selected"] == "TRITON_MLA"


def test_022_kv_connector_is_not_yet_a_selector_input():
    # 0.22 selector.py AttentionSelectorConfig has no use_kv_connector (0.23 adds it and the
    # "KV connector not supported" check): the flag is ignored with a note, and vLLM's message
    # prints the config without it
    args = ("--gpu", "H100", "--head-size", "128", "--kv-cache-dtype", "fp8_ds_mla", "--kv-connector")
    old, new = explain("0.22", *args), explain("0.23", *args)
    assert any("use_kv_connector" in note and "ignored" in note for note in old["notes"])
    assert "use_kv_connector" not in old["error"] and "use_batch_invariant=False). Reasons:" in old["error"]
    assert "use_kv_connector=True" in new["error"] and not new["notes"]


def test_021_flash_attn_takes_every_quantized_kv_dtype_with_fa3():
    # 0.21 flash_attn.py supports_kv_cache_dtype: is_quantized_kv_cache(kv) -> flash_attn_supports_fp8()
    # (FA3 on 9.x), so fp8_e5m2 runs on an H100; 0.22 accepts only fp8 / fp8_e4m3
    args = ("--gpu", "H100", "--head-size", "128", "--kv-cache-dtype", "fp8_e5m2")
    old, new = explain("0.21", *args), explain("0.22", *args)
    assert old["selected"] == "FLASH_ATTN" and verdicts(old)["FLASH_ATTN"] == []
    assert verdicts(new)["FLASH_ATTN"] == ["kv_cache_dtype not supported"]
    assert verdicts(explain("0.21", "--gpu", "A100", "--head-size", "128", "--kv-cache-dtype", "fp8_e5m2"))[
        "FLASH_ATTN"] == ["kv_cache_dtype not supported"]  # FA2 on 8.0: no fp8


def test_021_triton_mla_decode_runs_eagerly():
    # 0.21: TRITON_MLA uses MLACommonMetadataBuilder (AttentionCGSupport.NEVER); 0.22's
    # TritonMLAMetadataBuilder is UNIFORM_BATCH, so its uniform decode batches replay a full graph
    from attnsel.attention import versions
    from attnsel.attention.selector import cudagraph

    old, new = versions.get_profile("0.21").cudagraph, versions.get_profile("0.22").cudagraph
    assert cudagraph.decode_launch(old, "0.21", "TRITON_MLA", (9, 0), "decode", 64)[0] == "eager"
    assert cudagraph.decode_launch(new, "0.22", "TRITON_MLA", (9, 0), "decode", 64)[0] == "graph"


def test_020_fa3_keeps_large_heads_on_hopper():
    # 0.20 fa_utils.py get_flash_attn_version: only Diff-KV with sinks upgrades FA3 -> FA4 on SM90;
    # 0.21 also upgrades head_size > 256 ("FA3 does not support head_size=N on SM90")
    args = ("--gpu", "H100", "--head-size", "512")
    assert explain("0.20", *args)["flash_attn_version"] == 3
    assert explain("0.21", *args)["flash_attn_version"] == 4


def test_020_no_tokenspeed_mla_and_no_nvfp4_kv():
    # 0.20 cuda.py: no TOKENSPEED_MLA in the Blackwell MLA list; flashinfer.py: no nvfp4 KV cache
    mla = ("--gpu", "B200", "--model", "deepseek-v3", "--kv-cache-dtype", "fp8")
    assert "TOKENSPEED_MLA" not in verdicts(explain("0.20", *mla))
    assert verdicts(explain("0.21", *mla))["TOKENSPEED_MLA"] == []
    nvfp4 = ("--gpu", "B200", "--head-size", "128", "--kv-cache-dtype", "nvfp4")
    assert explain("0.20", *nvfp4)["selected"] is None
    assert explain("0.21", *nvfp4)["selected"] == "FLASHINFER"


def test_019_flash_attn_sinks_need_fa3_and_heads_stop_at_256():
    # 0.19 fa_utils.flash_attn_supports_sinks: FA3 only (0.20: FA3 or FA4); flash_attn.py
    # supports_head_size: % 8 and <= 256 (0.20: up to 512 where FA4 is available)
    sinks = ("--gpu", "B200", "--head-size", "128", "--has-sink", "--attention-backend", "FLASH_ATTN")
    assert explain("0.19", *sinks)["explicit_backend"]["reasons"] == ["attention sinks not supported"]
    assert explain("0.20", *sinks)["explicit_backend"]["valid"] is True
    big = ("--gpu", "H100", "--head-size", "512")
    old, new = explain("0.19", *big), explain("0.20", *big)
    assert verdicts(old)["FLASH_ATTN"] == ["head_size not supported"] and old["selected"] == "TRITON_ATTN"
    assert new["selected"] == "FLASH_ATTN"


def test_019_no_turboquant_and_flex_decode_runs_eagerly():
    # 0.19 cuda.py: no TURBOQUANT in the priority lists; FlexAttentionMetadataBuilder has no
    # _cudagraph_support yet (NEVER; 0.20 says ALWAYS)
    from attnsel.attention import versions
    from attnsel.attention.selector import cudagraph

    assert "TURBOQUANT" not in verdicts(explain("0.19", "--gpu", "H100", "--head-size", "128"))
    assert "TURBOQUANT" in verdicts(explain("0.20", "--gpu", "H100", "--head-size", "128"))
    old, new = versions.get_profile("0.19").cudagraph, versions.get_profile("0.20").cudagraph
    assert cudagraph.decode_launch(old, "0.19", "FLEX_ATTENTION", (9, 0), "decode", 64)[0] == "eager"
    assert cudagraph.decode_launch(new, "0.20", "FLEX_ATTENTION", (9, 0), "decode", 64)[0] == "graph"


def test_018_flashinfer_mla_needs_qk_nope_64_or_128():
    # 0.18 mla/flashinfer_mla.py: qk_nope_head_dim in [64, 128]; flashinfer_mla_sparse.py: == 128
    # (0.19 adds 192 to both)
    args = ("--gpu", "B200", "--use-mla", "--head-size", "576", "--qk-nope-head-dim", "192")
    old, new = explain("0.18", *args), explain("0.19", *args)
    assert verdicts(old)["FLASHINFER_MLA"] == ["FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128], but got 192"]
    assert old["selected"] == "CUTLASS_MLA" and new["selected"] == "FLASHINFER_MLA"


def test_018_blackwell_sparse_mla_ignores_the_kv_dtype():
    # 0.18 cuda.py _get_backend_priorities: sparse backends by head count only; 0.19 prefers
    # FlashInfer's sparse MLA for an fp8* KV cache (vllm-project/vllm#35807)
    args = ("--gpu", "B200", "--model", "deepseek-v3.2", "--kv-cache-dtype", "fp8")
    assert explain("0.18", *args)["selected"] == "FLASHMLA_SPARSE"
    assert explain("0.19", *args)["selected"] == "FLASHINFER_MLA_SPARSE"
