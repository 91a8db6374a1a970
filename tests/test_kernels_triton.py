"""attnsel's own Triton paged-attention kernels, run on CPU under TRITON_INTERPRET=1.

Triton fixes interpreter mode when it is first imported, so the cases run in one subprocess that
sets TRITON_INTERPRET=1 before importing anything; each test then checks one case's result.
Expectations: the fp32 reference of the issue "attnsel tune" (query token i of a request with KV
length L and Q new tokens sits at L-Q+i and sees keys <= that position), bf16/fp16 pass below
1e-2, fp32 far below; vLLM TRITON_ATTN needs block sizes that are multiples of 16 (docs/vllm-rules.md §3a).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

# id: (kind, batch, context_len, query_len, q_heads, kv_heads, head, dtype, block, decode cfg, prefill cfg)
CASES = {
    "decode-bf16-h4/2-d32-b16-1split": ("decode", 3, 45, 1, 4, 2, 32, "bfloat16", 16, (16, 1), None),
    "decode-bf16-h4/2-d32-b16-3splits": ("decode", 3, 45, 1, 4, 2, 32, "bfloat16", 16, (32, 3), None),
    "decode-fp16-h4/2-d32-b16": ("decode", 3, 45, 1, 4, 2, 32, "float16", 16, (16, 2), None),
    "decode-fp32-h4/2-d32-b16": ("decode", 3, 45, 1, 4, 2, 32, "float32", 16, (16, 2), None),
    "decode-bf16-h8/2-d64-b32-tile-smaller-than-page": ("decode", 3, 70, 1, 8, 2, 64, "bfloat16", 32, (16, 2), None),
    "decode-fp16-h6/2-d64-b48-tiles-straddle-pages": ("decode", 3, 70, 1, 6, 2, 64, "float16", 48, (32, 2), None),
    "decode-fp16-mha-h2/2-d32-b16-more-splits-than-tiles": ("decode", 2, 20, 1, 2, 2, 32, "float16", 16, (16, 4), None),
    "prefill-bf16-chunk-over-cached-context": ("prefill", 3, 50, 20, 4, 2, 32, "bfloat16", 16, None, (0, 16)),
    "prefill-fp16-chunk-over-cached-context": ("prefill", 3, 50, 20, 4, 2, 32, "float16", 16, None, (4, 32)),
    "prefill-fp32-chunk-over-cached-context": ("prefill", 3, 50, 20, 4, 2, 32, "float32", 16, None, (0, 16)),
    "prefill-bf16-from-scratch-h8/2-d64-b32": ("prefill", 2, 33, 33, 8, 2, 64, "bfloat16", 32, None, (0, 32)),
    "mixed-bf16-decodes-then-prefill": ("mixed", 5, 40, 9, 4, 2, 32, "bfloat16", 16, (16, 2), (0, 16)),
    "mixed-fp16-h4/1-d64-b32": ("mixed", 4, 40, 7, 4, 1, 64, "float16", 32, (32, 1), (2, 16)),
    # fp8 KV caches (kv_quant.py): fp8 values widened to the query type on load, k_scale folded into
    # the softmax scale, v_scale into the output; 16-bit query and P, so 16-bit accuracy
    "decode-fp16-fp8-kv-3splits": ("decode", 3, 45, 1, 4, 2, 32, "float16", 16, (32, 3), None, "fp8"),
    "decode-bf16-fp8_e5m2-kv": ("decode", 3, 70, 1, 8, 2, 64, "bfloat16", 32, (16, 2), None, "fp8_e5m2"),
    "mixed-fp16-fp8-kv": ("mixed", 5, 40, 9, 4, 2, 32, "float16", 16, (16, 2), (0, 16), "fp8"),
}

WORKER = textwrap.dedent(
    """
    import json, math, os, sys
    assert os.environ.get("TRITON_INTERPRET") == "1"
    from attnsel.attention.kernels.paged import Workload, make_paged_batch, reference_attention, relative_error
    from attnsel.attention.kernels import triton_paged as tp

    cases = json.loads(sys.argv[1])
    results = {}
    for cid, case in cases.items():
        kind, batch, ctx, qlen, hq, hkv, d, dtype, block, dcfg, pcfg = case[:11]
        w = Workload(kind, batch, ctx, qlen, hq, hkv, d, dtype, case[11] if len(case) > 11 else "auto")
        b = make_paged_batch(w, block, device="cpu", seed=7)
        dec = tp.DecodeConfig(block_n=dcfg[0], num_splits=dcfg[1]) if dcfg else None
        pre = tp.PrefillConfig(block_q=pcfg[0], block_n=pcfg[1]) if pcfg else None
        out = tp.paged_attention(b, dec, pre)
        results[cid] = {"err": relative_error(out, reference_attention(b)),
                        "finite": bool(out.float().isfinite().all())}

    # The adapter: prepare() compiles, then poisons the output; run() must overwrite all of it.
    w = Workload("mixed", 4, 40, 6, 4, 2, 32, "bfloat16")
    b = make_paged_batch(w, 16, device="cpu", seed=3)
    adapter = tp.AttnselTritonAdapter()
    pk = adapter.prepare(b)
    results["adapter"] = {
        "nan_after_prepare": bool(pk.output().float().isnan().all()),
        "err_after_run": relative_error(pk.run(), reference_attention(b)),
        "provider": pk.provider,
        "kernel_block_size": pk.kernel_block_size,
        "cpu_reason": adapter.unsupported_reason(w, 16, "cpu"),
        "block8_reason": adapter.unsupported_reason(w, 8, "cuda"),
    }
    # a kernel that read the fp8 cache without its k_scale (or v_scale) must fail the check
    import dataclasses
    b = make_paged_batch(Workload("decode", 3, 45, 1, 4, 2, 32, "float16", "fp8"), 16, device="cpu", seed=7)
    ref = reference_attention(b)
    results["fp8-scales-dropped"] = {n: relative_error(tp.paged_attention(dataclasses.replace(b, **{n: 1.0})), ref)
                                     for n in ("k_scale", "v_scale")}
    print("RESULTS=" + json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def interpreted_results() -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(CASES)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULTS=")), None)
    assert line is not None, f"worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(line[len("RESULTS="):])


def test_a_kernel_that_drops_an_fp8_scale_fails_the_fp8_check(interpreted_results):
    from attnsel.attention.kernels import FP8_TOLERANCE

    dropped = interpreted_results["fp8-scales-dropped"]
    assert dropped["k_scale"] > 10 * FP8_TOLERANCE and dropped["v_scale"] > 10 * FP8_TOLERANCE


@pytest.mark.parametrize("case_id", list(CASES))
def test_triton_kernel_matches_fp32_reference(interpreted_results, case_id):
    dtype = CASES[case_id][7]
    result = interpreted_results[case_id]
    assert result["finite"], "the kernel left NaN/inf in its output"
    limit = 1e-2 if dtype in ("bfloat16", "float16") else 1e-4
    assert result["err"] < limit


def test_adapter_poisons_output_after_compiling_and_run_overwrites_it(interpreted_results):
    r = interpreted_results["adapter"]
    assert r["nan_after_prepare"], "prepare() must hand over a NaN-poisoned output buffer"
    assert r["err_after_run"] < 1e-2


def test_adapter_records_provider_and_triton_version(interpreted_results):
    import triton

    r = interpreted_results["adapter"]
    assert r["provider"].startswith("attnsel triton (triton ")
    assert triton.__version__ in r["provider"]
    assert "interpreter" in r["provider"]
    assert r["kernel_block_size"] == 16


def test_adapter_rejects_block_sizes_vllm_triton_rejects(interpreted_results):
    # docs/vllm-rules.md §3a, TRITON_ATTN: `Block size must be a multiple of 16.`
    assert interpreted_results["adapter"]["block8_reason"] == "Block size must be a multiple of 16."
    assert interpreted_results["adapter"]["cpu_reason"] is None  # interpreter mode runs on CPU


def test_interpreter_requested_after_import_is_a_clear_error():
    # In this process triton (if imported) runs compiled; asking for the interpreter now must not
    # produce garbage or a Triton traceback deep inside a kernel.
    code = textwrap.dedent(
        """
        import os, triton
        os.environ["TRITON_INTERPRET"] = "1"
        from attnsel.attention.kernels import _triton_kernels as k
        try:
            k.jitted()
        except RuntimeError as e:
            print("ERR", e)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "ERR TRITON_INTERPRET=1 must be set before triton is first imported" in proc.stdout
