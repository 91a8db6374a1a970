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


def _reference(q, k, v, indptr, indices, last, block_size, scale):
    import torch

    outs = []
    for b in range(len(indptr) - 1):
        pages = indices[indptr[b]:indptr[b + 1]]
        keys = k[pages].reshape(-1, *k.shape[2:])
        vals = v[pages].reshape(-1, *v.shape[2:])
        n = (len(pages) - 1) * block_size + int(last[b])
        keys, vals = keys[:n].float(), vals[:n].float()
        group = q.shape[1] // keys.shape[1]
        keys = keys.repeat_interleave(group, dim=1)
        vals = vals.repeat_interleave(group, dim=1)
        logits = torch.einsum("hd,nhd->hn", q[b].float(), keys) * scale
        outs.append(torch.einsum("hn,nhd->hd", logits.softmax(-1), vals))
    return torch.stack(outs)


def run_cases() -> list[dict]:
    import torch
    import flashinfer

    torch.manual_seed(0)
    dev, blocks, block_size, kv_heads, q_heads, dim, batch, seq = "cuda", 96, 16, 8, 32, 128, 4, 300
    k = torch.randn(blocks, block_size, kv_heads, dim, device=dev)
    v = torch.randn(blocks, block_size, kv_heads, dim, device=dev)
    q = torch.randn(batch, q_heads, dim, device=dev, dtype=torch.bfloat16)
    per_seq = -(-seq // block_size)
    indices = torch.randperm(blocks, device=dev)[: batch * per_seq].int()
    indptr = torch.arange(0, batch * per_seq + 1, per_seq, device=dev, dtype=torch.int32)
    last = torch.full((batch,), seq - (per_seq - 1) * block_size, device=dev, dtype=torch.int32)
    scale = dim ** -0.5
    k_scale, v_scale = float(k.abs().max() / 448), float(v.abs().max() / 448)
    fp8 = torch.float8_e4m3fn
    results = []
    for kv_dtype in (torch.bfloat16, fp8):
        if kv_dtype is fp8:
            kq, vq = (k / k_scale).to(fp8), (v / v_scale).to(fp8)
            k_deq, v_deq, ks, vs = kq.float() * k_scale, vq.float() * v_scale, k_scale, v_scale
        else:
            kq, vq = k.to(kv_dtype), v.to(kv_dtype)
            k_deq, v_deq, ks, vs = kq.float(), vq.float(), None, None
        packed = torch.cat([kq.view(torch.uint8) if kv_dtype is fp8 else kq,
                            vq.view(torch.uint8) if kv_dtype is fp8 else vq], dim=-1)
        if kv_dtype is fp8:
            packed = packed.view(fp8)
        halves = packed.split(dim, dim=-1)
        ref = _reference(q, k_deq, v_deq, indptr.tolist(), indices, last.tolist(), block_size, scale)
        for layout, cache in (("strided halves", halves), ("contiguous", tuple(h.contiguous() for h in halves))):
            for tensor_cores in (False, True):
                workspace = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=dev)
                wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores)
                wrapper.plan(indptr, indices, last, q_heads, kv_heads, dim, block_size,
                             sm_scale=scale, q_data_type=torch.bfloat16, kv_data_type=kv_dtype)
                # q_scale: as vLLM 0.25-0.33's FlashInferImpl.forward passes it with a 16-bit decode query
                # (tune's calc_kv_scales value); FlashInfer folds it into sm_scale (docs/tune.md)
                for q_scale in (None, TUNE_Q_SCALE) if kv_dtype is fp8 and layout == "strided halves" else (None,):
                    out = wrapper.run(q, cache, q_scale=q_scale, k_scale=ks, v_scale=vs)
                    err = float((out.float() - ref).norm() / ref.norm())
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
