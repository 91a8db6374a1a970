"""What vLLM 0.34.0 changed in the selection, the block size and the data `explain` quotes, each against
0.33.0 through `attnsel explain --vllm-version X --json` (the answers vLLM 0.34.0 gave in
tests/fixtures/parity/parity_034.json and tests/fixtures/hybrid/hybrid_034.json). Each test cites where
vLLM does it (file:line @ 0.34.0, read in the release's wheel)."""

import json

from typer.testing import CliRunner

from attnsel.attention.versions import get_profile
from attnsel.cli.app import app

RUNNER = CliRunner()


def explain(version, *args):
    result = RUNNER.invoke(app, ["explain", "--vllm-version", version, *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def verdicts(doc):
    return {b["name"]: b["reasons"] for b in doc["backends"]}


def test_the_default_block_size_is_64_and_every_backend_is_asked_with_it():
    # config/cache.py:185 CacheConfig.DEFAULT_BLOCK_SIZE 16 -> 64, handed to the backend's
    # get_preferred_block_size (platforms/interface.py:783; v1/attention/backend.py:158: the default when
    # the backend takes it, else its smallest kernel block)
    llama = ("--model", "llama-3.1-8b", "--gpu", "H100")
    assert (explain("0.33", *llama)["block_size"], explain("0.34", *llama)["block_size"]) == (16, 64)
    # FlashInfer MLA on a B200 takes 32 or 64-token pages: 0.33 asked with 16 and got 32
    deepseek = ("--model", "deepseek-v3", "--gpu", "B200")
    assert explain("0.34", *deepseek)["selected"] == "FLASHINFER_MLA"
    assert (explain("0.33", *deepseek)["block_size"], explain("0.34", *deepseek)["block_size"]) == (32, 64)
    # CUTLASS MLA's only kernel block is 128 (mla/cutlass_mla.py): still 128
    cutlass = explain("0.34", *deepseek, "--attention-backend", "CUTLASS_MLA")
    assert cutlass["block_size"] == 128
    # a --block-size the user gives is kept
    assert explain("0.34", *llama, "--block-size", "16")["block_size"] == 16


def test_flash_attention_refuses_fp8_at_head_512_on_hopper_without_64_token_blocks():
    # flash_attn.py:474-483 FlashAttentionBackend.supports_combination: SM90, quantized KV, head 512 -
    # the FA4 kernel's 64-token TMA tile - needs a block size divisible by 64 and no block sparsity
    args = ("--head-size", "512", "--gpu", "H100", "--kv-cache-dtype", "fp8")
    assert verdicts(explain("0.34", *args, "--block-size", "16"))["FLASH_ATTN"] == [
        "SM90 d512 FP8 KV requires a block size divisible by 64"]
    assert "SM90 d512" not in " ".join(verdicts(explain("0.33", *args, "--block-size", "16"))["FLASH_ATTN"])
    assert verdicts(explain("0.34", *args, "--block-size", "128"))["FLASH_ATTN"] == []
    # only SM90 (an H200 is one), only a quantized cache
    assert "SM90 d512" not in " ".join(verdicts(explain("0.34", "--head-size", "512", "--gpu", "H100",
                                                        "--block-size", "16"))["FLASH_ATTN"])


def test_flash_attention_refuses_block_sparsity_at_head_512_with_fp8_on_hopper():
    # flash_attn.py:482-483: checked after the block size, so a 64-token block reaches it
    doc = explain("0.34", "--head-size", "512", "--gpu", "H100", "--kv-cache-dtype", "fp8", "--block-size", "64",
                  "--use-sparse", "--attention-backend", "FLASH_ATTN")
    assert "SM90 d512 FP8 KV does not support block sparsity" in verdicts(doc)["FLASH_ATTN"]


def test_flash_attentions_fp8_reason_is_reworded():
    # flash_attn.py:505 @ 0.34.0 (0.33: "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90,
    # or FA4 on SM100")
    args = ("--head-size", "128", "--gpu", "A100", "--kv-cache-dtype", "fp8")
    assert verdicts(explain("0.34", *args))["FLASH_ATTN"][-1] == (
        "FP8 KV requires FA3 (SM90), equal-d512 FA4 (SM90), or FA4 (SM100).")
    assert verdicts(explain("0.33", *args))["FLASH_ATTN"][-1].startswith("FP8 KV cache requires FA3 on SM90")


def test_attention_types_print_as_their_value():
    # v1/attention/backend.py:34 AttentionType is a StrEnum, so the f-string at :334 prints "encoder_only"
    # (0.33's (str, Enum) printed the member, AttentionType.ENCODER_ONLY)
    args = ("--head-size", "128", "--gpu", "H100", "--attn-type", "encoder_only")
    assert "attention type encoder_only not supported" in verdicts(explain("0.34", *args))["FLASHINFER"]
    assert "attention type AttentionType.ENCODER_ONLY not supported" in verdicts(explain("0.33", *args))["FLASHINFER"]


def test_flashinfer_ts_and_kimi_k3_are_named_but_not_modelled():
    # v1/attention/backends/registry.py:72,148: two new members, in no priority list of platforms/cuda.py
    for name in ("FLASHINFER_TS", "KIMI_K3_KV_BALANCED_MLA"):
        old = RUNNER.invoke(app, ["explain", "--vllm-version", "0.33", "--head-size", "128", "--gpu", "H100",
                                  "--attention-backend", name])
        new = RUNNER.invoke(app, ["explain", "--vllm-version", "0.34", "--head-size", "128", "--gpu", "H100",
                                  "--attention-backend", name])
        assert old.exit_code == new.exit_code == 2
        assert f"vLLM 0.34.0 added {name}" in old.output and "not modelled" in new.output
    assert not {"FLASHINFER_TS", "KIMI_K3_KV_BALANCED_MLA"} & set(get_profile("0.34").backend_names)


def test_triton_mla_takes_sliding_window_layers():
    # mla/triton_mla.py:156 TritonMLABackend.supports_sliding_window (decode of windowed DSpark drafts)
    args = ("--model", "deepseek-v3", "--gpu", "H100", "--sliding-window")
    assert verdicts(explain("0.34", *args))["TRITON_MLA"] == []
    assert "sliding window not supported" in verdicts(explain("0.33", *args))["TRITON_MLA"]


def test_jamba_aligns_its_blocks_from_the_64_token_default():
    # platforms/interface.py _align_hybrid_block_size: alignment = max(smallest kernel block, block size),
    # now 64 (config/cache.py:185), so Jamba v0.1's blocks round up to 128 (fp8: 192) instead of 80 (160)
    jamba = ("--model", "jamba-v0.1", "--gpu", "H100")
    assert (explain("0.33", *jamba)["block_size"], explain("0.34", *jamba)["block_size"]) == (80, 128)
    fp8 = (*jamba, "--kv-cache-dtype", "fp8")
    assert (explain("0.33", *fp8)["block_size"], explain("0.34", *fp8)["block_size"]) == (160, 192)
