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
