"""Developer check: does FlashInfer's paged decode read an fp8 KV cache right when K and V are the two
halves of one last axis (the layout vLLM 0.26+ allocates and splits, flashinfer.py
`kv_cache_permute.split(head_size, dim=-1)`), as it does for a 16-bit cache?

    python -m attnsel.bench.tools.flashinfer_fp8_strided [--json]

Runs FlashInfer's BatchDecodeWithPagedKVCacheWrapper (the decode path vLLM's FLASHINFER backend takes on
SM90 for a single-token decode, FIDecode) on one cache, four ways: 16-bit and fp8 (e4m3, per-tensor
scales passed as k_scale/v_scale, as vLLM passes layer._k_scale_float), each as the strided halves and as
contiguous copies of the same values, with and without tensor cores; the fp8 strided case once more
with the q_scale vLLM 0.25-0.33 pass along with a 16-bit query (expected to miss: FlashInfer scales the
logits by it). Each is compared with an fp32 reference over the dequantized values. Prints one line per case: relative error, and whether it passes
tune's fp8 tolerance. Needs a CUDA GPU and flashinfer.
"""

from __future__ import annotations

import argparse
import json
import sys

TUNE_Q_SCALE = 0.01937  # layer._q_scale of tune's llama-3.1-8b decode b=1 ctx=1024 row (H200, 2026-11-27)


def flashinfer_indices(b) -> tuple:
    """FlashInfer's CSR page list (indptr, indices, last page length) of a paged batch's block table."""
    import itertools

    import torch

    seq_lens, _ = b.host_lists()
    pages = [-(-n // b.block_size) for n in seq_lens]
    indices = torch.cat([b.block_table[r, :p] for r, p in enumerate(pages)]).int()
    indptr = torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32, device=indices.device)
    last = torch.tensor([n - (p - 1) * b.block_size for n, p in zip(seq_lens, pages)], dtype=torch.int32,
                        device=indices.device)
    return indptr, indices, last


def packed_halves(b) -> tuple:
    """The batch's K and V caches as vLLM 0.26+ allocates them, one last axis of 2 x head_size, split."""
    import torch

    fp8 = b.key_cache.dtype == torch.float8_e4m3fn
    parts = [c.view(torch.uint8) if fp8 else c for c in (b.key_cache, b.value_cache)]
    packed = torch.cat(parts, dim=-1)
    return (packed.view(torch.float8_e4m3fn) if fp8 else packed).split(b.head_size, dim=-1)


def run_cases() -> list[dict]:
    import dataclasses

    import flashinfer
    import torch

    from attnsel.attention.kernels import paged

    decode = paged.Workload("decode", 4, 300, 1, 32, 8, 128, "bfloat16")
    results = []
    for kv in ("auto", "fp8"):
        # tune's own batch: random K/V, a shuffled block table, fp8 with tune's per-tensor scales
        b = paged.make_paged_batch(dataclasses.replace(decode, kv_cache_dtype=kv), 16, device="cuda", ragged=False)
        ref = paged.reference_attention(b)
        indptr, indices, last = flashinfer_indices(b)
        kv_dtype = b.key_cache.dtype
        ks, vs = (b.k_scale, b.v_scale) if kv == "fp8" else (None, None)
        halves = packed_halves(b)
        for layout, cache in (("strided halves", halves), ("contiguous", tuple(h.contiguous() for h in halves))):
            for tensor_cores in (False, True):
                workspace = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
                wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores)
                wrapper.plan(indptr, indices, last, b.num_q_heads, b.num_kv_heads, b.head_size, b.block_size,
                             sm_scale=b.scale, q_data_type=torch.bfloat16, kv_data_type=kv_dtype)
                # q_scale: as vLLM 0.25-0.33's FlashInferImpl.forward passes it with a 16-bit decode query
                # (tune's calc_kv_scales value); FlashInfer folds it into sm_scale (docs/tune.md)
                for q_scale in (None, TUNE_Q_SCALE) if kv == "fp8" and layout == "strided halves" else (None,):
                    out = wrapper.run(b.query, cache, q_scale=q_scale, k_scale=ks, v_scale=vs)
                    err = paged.relative_error(out.float(), ref)
                    results.append({"kv": str(kv_dtype).split(".")[-1], "layout": layout, "tensor_cores": tensor_cores,
                                    "q_scale": q_scale, "relative_error": round(err, 4), "passes_0.15": err <= 0.15})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import flashinfer
    import torch

    results = run_cases()
    meta = {"flashinfer": flashinfer.__version__, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    if args.json:
        print(json.dumps({"meta": meta, "cases": results}, indent=1))
    else:
        print(meta)
        for r in results:
            print(f"{r['kv']:14s} {r['layout']:15s} tensor_cores={r['tensor_cores']!s:5s} q_scale={r['q_scale']} "
                  f"rel.err {r['relative_error']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
