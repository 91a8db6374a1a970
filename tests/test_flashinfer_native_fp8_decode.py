"""FLASHINFER with an fp8 cache on a Hopper where vLLM 0.33 decodes with FlashInfer's native wrapper
(no flashinfer-cubin, no network): tune on an H200 found every row 0.79 off the reference, while
FlashInfer's own decode on the same H200 was right (tests/fixtures/tune/h200_fp8_flashinfer_native.json).
vLLM hands the wrapper a 16-bit query with q_scale = layer._q_scale_float, which FlashInfer folds
into the softmax scale (docs/tune.md "FlashInfer's native decode with an fp8 cache").

The CPU check's FlashInfer recorder must compute what the kernel computes from every argument it is
given, so that the CPU check fails where the GPU did; and tune's row must say it is vLLM's output
that is wrong at these scales."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnsel.attention.kernels import FP8_TOLERANCE, paged
from attnsel.attention.kernels.vllm.fp8_faults import native_decode_q_scale_fault
from attnsel.bench.tools.cpu_recorders import paged_wrapper_output

FIXTURES = Path(__file__).parent / "fixtures"
GPU = json.loads((FIXTURES / "tune" / "h200_fp8_flashinfer_native.json").read_text(encoding="utf-8"))
# the CPU check's recordings that drove FLASHINFER both with and without FlashInfer's cubins
CPU_CHECKS = [p for p in sorted((FIXTURES / "vllm_cpu").glob("vllm_*.json"))
              if any("flashinfer_cubin" in r for r in json.loads(p.read_text(encoding="utf-8"))["rows"])]


def _tune_batch(block_size: int):
    w = GPU["workload"]
    workload = paged.Workload(w["kind"], w["batch"], w["context"], w["query_len"], w["num_q_heads"],
                              w["num_kv_heads"], w["head_size"], w["dtype"], w["kv_cache_dtype"])
    return paged.make_paged_batch(workload, block_size, device="cpu", seed=w["seed"])


def _plan(b) -> dict:
    """What vLLM's builder plans the decode wrapper with for the batch: the page table as indptr /
    indices / last_page_len, and the softmax scale."""
    seq_lens, _ = b.host_lists()
    tables = b.block_table.tolist()
    pages = [-(-n // b.block_size) for n in seq_lens]
    indptr = [0]
    for count in pages:
        indptr.append(indptr[-1] + count)
    return {"indptr": torch.tensor(indptr), "indices": torch.tensor([p for t, c in zip(tables, pages) for p in t[:c]]),
            "last_page_len": torch.tensor([n - (c - 1) * b.block_size for n, c in zip(seq_lens, pages)]),
            "sm_scale": b.scale}


def _recorder_error(b, **run_scales) -> float:
    out = paged_wrapper_output(_plan(b), b.query, (b.key_cache, b.value_cache), "NHD", run_scales)
    return paged.relative_error(out.to(b.query.dtype), paged.reference_attention(b))


@pytest.mark.parametrize("row", GPU["tune_rows"], ids=lambda r: f"bs{r['block_size']}")
def test_the_recorder_misses_the_reference_as_vllms_native_fp8_decode_did_on_the_h200(row):
    assert row["provider_details"]["decode_path"] == "FIDecode" and row["status"] == "wrong"
    b = _tune_batch(row["block_size"])
    # FlashInferImpl.forward's run(): q_scale, k_scale, v_scale = the layer's floats (tune's scales)
    err = _recorder_error(b, q_scale=b.q_scale, k_scale=b.k_scale, v_scale=b.v_scale)
    assert err > FP8_TOLERANCE
    assert err == pytest.approx(row["rel_error"], abs=0.05)  # the H200: 0.785-0.792; the data differ by device


def test_the_recorder_matches_the_reference_as_flashinfer_did_without_a_q_scale():
    b = _tune_batch(16)
    err = _recorder_error(b, k_scale=b.k_scale, v_scale=b.v_scale)
    assert all(case["relative_error"] < 0.01 for case in GPU["flashinfer_direct"]["cases"])
    assert err < 0.01


def _metadata(q_dtype, native: bool = True):
    """The two fields of vLLM's FlashInferMetadata the fault is read from: the decode part (FIDecode
    holds the planned wrapper; XQA's FlashInferTrtllmAPIDecode does not) and the decode query dtype."""
    decode = SimpleNamespace(wrapper=object()) if native else SimpleNamespace(kernel="xqa")
    return SimpleNamespace(decode=decode, q_data_type_decode=q_dtype)


def _layer(q_scale: float):
    return SimpleNamespace(_q_scale_float=q_scale)


def test_tune_names_vllms_fault_for_a_16_bit_native_decode_with_a_non_unit_q_scale():
    fault = native_decode_q_scale_fault("FLASHINFER", _layer(0.01937), _metadata(torch.bfloat16), "fp8")
    assert fault and "vLLM's output is wrong" in fault and "0.01937" in fault and "q_scale 1.0" in fault


@pytest.mark.parametrize("backend, q_scale, metadata, kv", [
    ("FLASHINFER", 1.0, _metadata(torch.bfloat16), "fp8"),  # vLLM's default scales: right
    ("FLASHINFER", 0.01937, _metadata(torch.float8_e4m3fn), "fp8"),  # a quantized query: q_scale dequantizes it
    ("FLASHINFER", 0.01937, _metadata(torch.bfloat16, native=False), "fp8"),  # XQA: bmm1 leaves q_scale out
    ("FLASHINFER", 0.01937, _metadata(torch.bfloat16), "auto"),
    ("FLASH_ATTN", 0.01937, _metadata(torch.bfloat16), "fp8"),
])
def test_no_fault_is_named_where_vllms_output_is_right(backend, q_scale, metadata, kv):
    assert native_decode_q_scale_fault(backend, _layer(q_scale), metadata, kv) is None


def test_every_release_from_0_26_was_checked_without_the_cubins():
    assert {p.stem for p in CPU_CHECKS} >= {f"vllm_0_{minor}" for minor in range(26, 34)}


@pytest.mark.parametrize("path", CPU_CHECKS, ids=lambda p: p.stem)
def test_the_cpu_check_fails_vllms_native_fp8_decode_and_passes_xqa(path):
    rows = [r for r in json.loads(path.read_text(encoding="utf-8"))["rows"] if r["backend"] == "FLASHINFER"]
    native_fp8 = [r for r in rows if r["flashinfer_cubin"] is False and r["kv_cache_dtype"] == "fp8"]
    assert native_fp8 and all(r["decode_path"] == "FIDecode" for r in native_fp8)
    assert all(r["ok"] is None and r["vllm_fault"] and r["rel_error"] > FP8_TOLERANCE for r in native_fp8)
    others = [r for r in rows if r not in native_fp8]
    assert {r["flashinfer_cubin"] for r in others} == {False, True} and all(r["ok"] is True for r in others)


def test_a_row_that_fails_the_check_says_it_is_vllms_output(monkeypatch):
    from attnsel.bench.sweep.results import ResultRow
    from attnsel.bench.worker.items import ItemRunner

    row = GPU["tune_rows"][0]
    fault = native_decode_q_scale_fault("FLASHINFER", _layer(0.01937), _metadata(torch.bfloat16), "fp8")
    toolkit = SimpleNamespace(relative_error=lambda prepared, batch: row["rel_error"])
    runner = ItemRunner(toolkit, "FLASHINFER", {"kv_cache_dtype": "fp8", "dtype": "bfloat16"}, {})
    written = ResultRow.new()
    prepared = SimpleNamespace(details={"vllm_fault": fault})
    assert runner._check(prepared, None, SimpleNamespace(label=lambda: row["workload_label"]), 16, written) is False
    out = written.to_dict()  # the row as the worker sends it
    assert out["status"] == "wrong" and out["error"].startswith("relative error 0.788 exceeds tolerance 0.15")
    assert out["error"].endswith(fault)
