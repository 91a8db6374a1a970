"""fp8 KV caches and MLA decode on a CUDA GPU: every provider that can run them here, against the
fp32 reference (issue "tune covers fp8 KV cache and MLA models"). With vLLM installed this is
vLLM's own classes (FA3's fp8 path with descales, FlashInfer's fp8 KV, vLLM's Triton kernels,
FlashMLA with its fp8 path, FA3 MLA); without it, FlashInfer, attnsel's Triton kernel and
FlashInfer's MLA wrapper. Providers that are absent or cannot run a case skip with their reason.
Also: each MLA decode call replays from a CUDA graph (tune times decode rows that way) with the
same answer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from attnsel.attention.kernels import (  # noqa: E402
    adapters_for,  # noqa: E402
    kv_quant,
    mla,
    paged,
)

DENSE = [(b, a) for b in ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN") for a in adapters_for(b)]
MLA = [(b, a) for b in ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA")
       for a in adapters_for(b)]
# each MLA backend's kernel pages in vLLM (docs/vllm-rules.md §3b), and one --block-size split into them
MLA_BLOCK_SIZES = {"FLASH_ATTN_MLA": (16, 64), "FLASHMLA": (64, 128), "FLASHINFER_MLA": (32, 128),
                   "TRITON_MLA": (16, 64), "CUTLASS_MLA": (128,)}
BLACKWELL_ONLY = ("FLASHINFER_MLA", "CUTLASS_MLA")  # as vLLM runs them (TRT-LLM / CUTLASS MLA kernels)


def _usable(adapter, w, block_size):
    reason = adapter.availability() or adapter.unsupported_reason(w, block_size, "cuda")
    if reason:
        pytest.skip(f"{adapter.name}: {reason}")


def _checked(prepared, b, tolerance):
    ref = paged.reference_attention(b)
    if prepared.poison_output is not None:
        prepared.poison_output()
    prepared.run()
    torch.cuda.synchronize()
    err = paged.relative_error(prepared.output(), ref)
    assert err < tolerance, f"{prepared.provider}: relative error {err:.3g}"
    return ref


@pytest.mark.gpu
@pytest.mark.parametrize("kv", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("kind", ["decode", "mixed"])
@pytest.mark.parametrize("backend,adapter", DENSE, ids=lambda x: getattr(x, "name", x))
def test_dense_providers_read_an_fp8_cache_correctly(backend, adapter, kind, kv):
    w = paged.Workload(kind, 6, 900, 1 if kind == "decode" else 64, 32, 8, 128, "bfloat16", kv)
    _usable(adapter, w, 16)
    b = paged.make_paged_batch(w, 16, device="cuda", seed=31)
    _checked(adapter.prepare(b), b, kv_quant.FP8_TOLERANCE)


@pytest.mark.gpu
@pytest.mark.parametrize("kv", ["auto", "fp8"])
@pytest.mark.parametrize("heads", [16, 128])  # DeepSeek-V3 at TP 8 and at TP 1
@pytest.mark.parametrize("backend,adapter", MLA, ids=lambda x: getattr(x, "name", x))
def test_mla_decode_providers_match_the_absorbed_reference_and_replay_from_a_cuda_graph(backend, adapter, heads, kv):
    if backend in BLACKWELL_ONLY and adapter.name == "vllm" and torch.cuda.get_device_capability()[0] != 10:
        pytest.skip(f"vLLM runs {backend} on CC 10.x only")
    for block_size in MLA_BLOCK_SIZES[backend]:
        w = paged.Workload("decode", 9, 1500, 1, heads, 1, 576, "bfloat16", kv, kv_lora_rank=512, qk_nope_head_dim=128)
        _usable(adapter, w, block_size)
        b = mla.make_mla_batch(w, block_size, device="cuda", seed=32)
        prepared = adapter.prepare(b)
        ref = _checked(prepared, b, kv_quant.FP8_TOLERANCE if kv != "auto" else 1e-2)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            prepared.run()  # warm-up on the side stream, as CUDA-graph capture wants
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            captured = prepared.run()
        graph.replay()
        torch.cuda.synchronize()
        assert paged.relative_error(captured, ref) < (kv_quant.FP8_TOLERANCE if kv != "auto" else 1e-2)
