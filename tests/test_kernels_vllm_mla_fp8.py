"""fp8 KV caches and MLA models through vLLM's own classes (attention/kernels/vllm/backend.py,
vllm_mla.py), at our boundary: the fake vLLM 0.24 tree (tests/fixtures/fake_vllm/kernels, answering
what the real classes answered: `python -m attnsel.bench.tools.vllm_cpu_check --record`). The tests
check what attnsel hands vLLM's layers, builders and impls (arguments, KV-cache storage dtype and
shape, layer scales, the query as vLLM hands it), that the answer computed from that is right, and
the provider a tune row records with and without vLLM. The same adapters against the REAL vLLM
0.24.0 on CPU: `python -m attnsel.bench.tools.vllm_cpu_check` (every dense and MLA backend, 16-bit
and fp8)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from attnsel.attention.kernels import kv_quant, mla, paged, registry  # noqa: E402

FAKE = Path(__file__).parent / "fixtures" / "fake_vllm" / "kernels"


@pytest.fixture
def fake_vllm(monkeypatch):
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(FAKE))
    import vllm._calls as calls

    calls.CALLS.clear()
    yield calls
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        sys.modules.pop(name, None)


def _calls(calls, what):
    return [d for w, d in calls.CALLS if w == what]


def _mla_batch(block_size=64, kv="auto", heads=16, batch=3, context=200):
    w = paged.Workload("decode", batch, context, 1, heads, 1, 576, "bfloat16", kv, kv_lora_rank=512)
    return mla.make_mla_batch(w, block_size, device="cpu", seed=5)


def _dense_batch(kv="fp8", block_size=16, kind="decode", batch=3, context=200, query_len=1):
    w = paged.Workload(kind, batch, context, query_len, 8, 2, 64, "bfloat16", kv)
    return paged.make_paged_batch(w, block_size, device="cpu", seed=4)


# --- MLA ----------------------------------------------------------------------------------------


def test_with_vllm_installed_every_mla_backend_runs_through_vllms_mla_impl(fake_vllm):
    for backend in ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA"):
        first = registry.adapters_for(backend, device="cpu")[0]
        assert (first.name, first.availability()) == ("vllm", None)


def test_without_vllm_flashinfer_mla_falls_to_flashinfers_wrapper_and_the_others_say_why():
    if any(p for p in sys.path if Path(p, "vllm").is_dir()):
        pytest.skip("a vLLM is importable here")
    assert [a.name for a in registry.adapters_for("FLASHINFER_MLA", device="cpu")] == ["vllm", "flashinfer-mla-wrapper"]
    assert registry.adapters_for("FLASHMLA", device="cpu")[0].availability() == "vllm is not installed"


@pytest.mark.parametrize("backend, block_size, kernel_block_size", [
    ("FLASHMLA", 64, 64), ("FLASHMLA", 256, 64),  # FlashMLA pages are 64 tokens: 256 is split into 4
    ("TRITON_MLA", 16, 16), ("FLASH_ATTN_MLA", 128, 128), ("FLASHINFER_MLA", 128, 64),
])
def test_the_mla_adapter_builds_vllms_mla_layer_and_calls_forward_mqa_as_forward_impl_does(
        fake_vllm, backend, block_size, kernel_block_size):
    from attnsel.attention.kernels.vllm import VllmMlaAdapter

    b = _mla_batch(block_size)
    prepared = VllmMlaAdapter(backend, device="cpu").prepare(b)
    out = prepared.run()
    assert out.shape == (3, 16, 512)  # heads x kv_lora_rank: what W_UV up-projects afterwards
    assert paged.relative_error(out, paged.reference_attention(b)) < 1e-2
    layer = _calls(fake_vllm, "MLAAttention")[-1]
    assert (layer["num_heads"], layer["kv_lora_rank"], layer["qk_rope_head_dim"], layer["qk_nope_head_dim"]) == (16, 512, 64, 128)
    assert layer["scale"] == pytest.approx(192 ** -0.5)  # qk_head_dim ** -0.5, as DeepSeek's model code passes it
    assert layer["kv_b_proj"] is None and layer["backend"] == backend and layer["default_dtype"] == torch.bfloat16
    impl = _calls(fake_vllm, "MLAImpl")[-1]
    assert (impl["head_size"], impl["num_kv_heads"], impl["kv_cache_dtype"]) == (576, 1, "auto")
    assert _calls(fake_vllm, "Builder")[-1]["block_size"] == kernel_block_size
    call = _calls(fake_vllm, "forward_mqa")[-1]
    assert call["cache_shape"] == (b.num_blocks * block_size // kernel_block_size, kernel_block_size, 576)
    # (ql_nope, q_pe) as forward_impl hands them: ql_nope the transposed (heads, tokens, 512) bmm output,
    # q_pe a slice of the (tokens, heads, qk_nope + rope) projected query
    assert call["q"] == "tuple" and call["q_strides"] == [(512, 3 * 512, 1), (16 * 192, 192, 1)]
    model = _calls(fake_vllm, "ModelConfig")[-1]["config"]
    assert model["model_type"] == "deepseek_v3" and model["kv_lora_rank"] == 512 and model["num_attention_heads"] == 16
    assert prepared.provider.startswith(f"vllm 0.24.0 {backend}: ") and "forward_mqa" in prepared.provider
    assert any("W_UK_T absorption" in n for n in prepared.notes)  # what was bypassed, said per row


def test_an_fp8_latent_cache_reaches_flashmla_as_vllm_stores_it_with_a_quantized_query(fake_vllm):
    from attnsel.attention.kernels.vllm import VllmMlaAdapter

    b = _mla_batch(64, kv="fp8")
    assert b.latent_cache.dtype == torch.float8_e4m3fn and b.k_scale > 0
    prepared = VllmMlaAdapter("FLASHMLA", device="cpu").prepare(b)
    err = paged.relative_error(prepared.run(), paged.reference_attention(b))
    assert 1e-3 < err < kv_quant.FP8_TOLERANCE  # the fp8 query costs a few per cent, no more
    builder = _calls(fake_vllm, "Builder")[-1]
    assert builder["spec_dtype"] == torch.uint8  # vLLM allocates fp8 caches as uint8 ...
    call = _calls(fake_vllm, "forward_mqa")[-1]
    assert call["cache_dtype"] == torch.float8_e4m3fn  # ... and forward_impl views them as fp8
    assert call["q"] == "tensor" and call["q_dtype"] == torch.float8_e4m3fn
    assert _calls(fake_vllm, "decode_concat_quant")[-1]["scale"] == pytest.approx(b.q_scale)
    assert (call["k_scale"], call["q_scale"]) == (pytest.approx(b.k_scale), pytest.approx(b.q_scale))
    assert any("quantized" in n and "before the timed call" in n for n in prepared.notes)


def test_triton_mla_keeps_a_16_bit_query_with_an_fp8_cache_as_vllm_does(fake_vllm):
    import vllm.v1.attention.backends.recorded as recorded

    from attnsel.attention.kernels.vllm import VllmMlaAdapter

    assert recorded.facts_of("TRITON_MLA")["fp8"]["supports_quant_query_input"] is False  # recorded from 0.24
    b = _mla_batch(16, kv="fp8")
    prepared = VllmMlaAdapter("TRITON_MLA", device="cpu").prepare(b)
    assert paged.relative_error(prepared.run(), paged.reference_attention(b)) < 1e-2
    assert _calls(fake_vllm, "forward_mqa")[-1]["q"] == "tuple" and not _calls(fake_vllm, "decode_concat_quant")


def test_vllm_refuses_fp8_for_flash_attn_mla_in_its_own_words(fake_vllm):
    from attnsel.attention.kernels.vllm import VllmMlaAdapter

    w = paged.Workload("decode", 3, 200, 1, 16, 1, 576, "bfloat16", "fp8", kv_lora_rank=512)
    assert VllmMlaAdapter("FLASH_ATTN_MLA", device="cpu").unsupported_reason(w, 16, "cpu") == "kv_cache_dtype not supported"
    dense = paged.Workload("decode", 3, 200, 1, 8, 2, 64, "bfloat16")
    assert "needs an MLA (latent) workload" in VllmMlaAdapter("FLASHMLA", device="cpu").unsupported_reason(dense, 64, "cpu")


# --- fp8 through the dense backends --------------------------------------------------------------


@pytest.mark.parametrize("backend, quantized_query", [("FLASH_ATTN", True), ("TRITON_ATTN", True),
                                                      ("FLASHINFER", False)])
def test_an_fp8_cache_reaches_vllms_impl_as_vllm_allocates_it_with_its_scales(fake_vllm, backend, quantized_query):
    from attnsel.attention.kernels.vllm import VllmBackendAdapter

    b = _dense_batch("fp8")
    prepared = VllmBackendAdapter(backend, device="cpu").prepare(b)
    prepared.poison_output()
    err = paged.relative_error(prepared.run(), paged.reference_attention(b))
    assert err < kv_quant.FP8_TOLERANCE
    call = _calls(fake_vllm, "forward")[-1]
    assert call["kv_cache_dtype"] == torch.uint8  # the layer's KV-cache spec dtype for fp8, bit-copied
    assert (call["k_scale"], call["v_scale"]) == (pytest.approx(b.k_scale), pytest.approx(b.v_scale))
    # Attention.forward quantizes the query first only where the impl takes an fp8 query
    assert (call["query_dtype"] == torch.float8_e4m3fn) is quantized_query
    assert prepared.details["query_dtype"] == str(call["query_dtype"])
    assert (err > 1e-2) is quantized_query  # a 16-bit query over the dequantized cache is exact to bf16


def test_an_unquantized_row_leaves_vllms_default_scales_alone(fake_vllm):
    from attnsel.attention.kernels.vllm import VllmBackendAdapter

    prepared = VllmBackendAdapter("TRITON_ATTN", device="cpu").prepare(_dense_batch("auto"))
    call = _calls(fake_vllm, "forward")[-1]
    assert (call["k_scale"], call["v_scale"], call["q_scale"]) == (1.0, 1.0, 1.0)
    assert call["query_dtype"] == torch.bfloat16 and prepared.details["kv_cache_storage"] == "torch.bfloat16"


def _runner(backend, shape):
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "tune"))
    try:
        from cpu_toolkit import CpuKernelToolkit
    finally:
        sys.path.pop(0)
    from attnsel.bench.worker.items import ItemRunner

    return ItemRunner(CpuKernelToolkit(), backend, shape, {"launch": "vllm"})


def _item(block_size=64, batch=3, context=200):
    from attnsel.bench.plan import WorkloadSpec

    return {"key": "k", "block_size": block_size, "kernel_block_size": block_size, "check": True, "launch": "eager",
            "launch_reason": "recorded rule", "workload": WorkloadSpec("decode", batch, context).to_dict()}


MLA_SHAPE = {"head_size": 576, "num_q_heads": 16, "num_kv_heads": 1, "dtype": "bfloat16", "kv_cache_dtype": "auto",
             "use_mla": True, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128}


def test_a_tune_row_for_an_mla_model_records_vllms_provider_and_launch(fake_vllm):
    row = _runner("FLASHMLA", MLA_SHAPE).run(_item())
    assert row["status"] == "ok", row.get("error")
    assert row["adapter"] == "vllm" and row["provider"].startswith("vllm 0.24.0 FLASHMLA: FLASHMLAMLAImpl.forward_mqa")
    assert (row["launch"], row["launch_source"]) == ("graph", "installed vLLM")  # uniform decode, FULL graph
    assert row["checked"] and row["rel_error"] < 1e-2 and row["tolerance"] == 1e-2
    assert row["provider_details"]["kv_cache_shape"][1:] == [64, 576]


def test_a_tune_row_with_an_fp8_cache_is_checked_with_the_fp8_tolerance(fake_vllm):
    row = _runner("FLASHMLA", {**MLA_SHAPE, "kv_cache_dtype": "fp8"}).run(_item())
    assert row["status"] == "ok", row.get("error")
    assert row["kv_cache_dtype"] == "fp8" and row["tolerance"] == kv_quant.FP8_TOLERANCE
    assert 1e-3 < row["rel_error"] < kv_quant.FP8_TOLERANCE
    assert any("dequantized cache" in n for n in row["notes"])
