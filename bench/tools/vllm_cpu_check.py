"""Developer check: drive the INSTALLED vLLM's real backend classes through attnsel's adapter on a
machine without a GPU, before spending GPU time on them.

    PYTHONPATH=<folder holding an `attnsel` link to this repo> \\
        /path/to/venv-with-vllm/bin/python -m attnsel.bench.tools.vllm_cpu_check [--backend B ...]

What is real: vLLM's VllmConfig, Attention layer, AttentionImpl, metadata builder, CUDA-graph
resolution and dispatcher, KV-cache shape/stride order, and (TRITON_ATTN) vLLM's own Triton kernel
run by the Triton interpreter on CPU tensors, compared with attnsel's fp32 reference.
What is not: the platform is a CUDA platform stand-in reporting an H100 (attention/live.py, as the
parity harness does); extensions that need a driver are empty modules and `torch.ops._C` answers
False to capability probes; FLASH_ATTN's `flash_attn_varlen_func` / `get_scheduler_metadata` and
FlashInfer's wrappers are replaced by recorders that compute the reference from the arguments vLLM
passes them (so a wrong block table, length or scale in what we hand vLLM fails the check).
Exit 0 when every backend checked matches the reference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")
# vllm.triton_utils disables Triton unless exactly one Triton driver is active; an empty
# CUDA_VISIBLE_DEVICES is its "distributed start-up" exception, which lets the interpreter run.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

SHAPES = (  # (kind, batch, context, query_len): small enough for the Triton interpreter
    ("decode", 3, 200, 1),
    ("decode", 1, 700, 1),  # batch 1: vLLM's Triton builder takes its 3-D split path
    ("mixed", 4, 96, 40),
)


class _FakeOpNamespace:
    """torch.ops._C on a driverless machine: capability probes answer False."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: False


def stand_in_gpu(capability: tuple[int, int] = (9, 0), name: str = "NVIDIA H100 80GB HBM3") -> Any:
    import torch

    from attnsel.attention import live

    runtime = live._VllmRuntime(offline=True)
    runtime.platform_cls.target = runtime.capability(capability)
    runtime.platform_cls.target_name = name
    torch.ops.__dict__["_C"] = _FakeOpNamespace()
    try:
        from vllm.v1.attention.backends import flashinfer as fi  # type: ignore

        fi.PIN_MEMORY = False  # pinned host buffers need a driver
    except Exception:  # noqa: BLE001 -- FLASHINFER is then reported as not importable
        pass
    return runtime


def reference_from_pages(q, k_pages, v_pages, tables: list[list[int]], seq_lens: list[int],
                         q_starts: list[int], scale: float):
    """fp32 causal attention from a page table, K/V as (pages, page, heads, dim) (the recorders' check)."""
    import torch

    out = torch.empty(q.shape, dtype=torch.float32)
    page = k_pages.shape[1]
    hkv = k_pages.shape[2]
    group = q.shape[1] // hkv
    for r, seq_len in enumerate(seq_lens):
        pages = torch.tensor(tables[r][: -(-seq_len // page)], dtype=torch.long)
        k = k_pages[pages].reshape(-1, hkv, q.shape[2])[:seq_len].float()
        v = v_pages[pages].reshape(-1, hkv, q.shape[2])[:seq_len].float()
        qs = q[q_starts[r]:q_starts[r + 1]].float().reshape(-1, hkv, group, q.shape[2])
        n = qs.shape[0]
        scores = torch.einsum("qhgd,khd->hgqk", qs, k) * scale
        qpos = torch.arange(seq_len - n, seq_len)[:, None]
        scores = scores.masked_fill(torch.arange(seq_len)[None, :] > qpos, float("-inf"))
        o = torch.einsum("hgqk,khd->qhgd", torch.softmax(scores, -1), v)
        out[q_starts[r]:q_starts[r + 1]] = o.reshape(n, -1, q.shape[2])
    return out


def patch_flash_attn(calls: list[dict]) -> None:
    from vllm.v1.attention.backends import flash_attn as fa  # type: ignore

    def varlen(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal,
               block_table, **kwargs):
        calls.append({"num_splits": kwargs.get("num_splits"), "fa_version": kwargs.get("fa_version"),
                      "scheduler_metadata": kwargs.get("scheduler_metadata") is not None, "causal": causal})
        ref = reference_from_pages(q, k, v, block_table.tolist(), seqused_k.tolist(), cu_seqlens_q.tolist(),
                                   softmax_scale)
        out.copy_(ref.to(out.dtype))
        return out

    fa.flash_attn_varlen_func = varlen
    fa.get_scheduler_metadata = lambda **kwargs: calls.append({"scheduler": kwargs}) or None


def patch_flashinfer(calls: list[dict]) -> None:
    """FlashInfer's wrappers replaced by recorders; their plan() arguments are bound to the real
    wrapper's signature, so the page table they describe is what vLLM computed from our metadata."""
    import inspect

    from vllm.v1.attention.backends import flashinfer as fi  # type: ignore

    def recording(real: Any) -> type:
        signature = inspect.signature(real.plan)

        class RecordingWrapper:
            def __init__(self, *args: Any, **kwargs: Any):
                self.is_cuda_graph_enabled = bool(kwargs.get("use_cuda_graph", False))
                self._plan: dict = {}

            def plan(self, *args: Any, **kwargs: Any) -> None:
                bound = signature.bind(self, *args, **kwargs)
                self._plan = dict(bound.arguments)
                # the real wrappers keep these; vLLM's forward asserts them against its impl
                self._window_left = self._plan.get("window_left", -1)
                self._logits_soft_cap = self._plan.get("logits_soft_cap") or 0.0
                self._sm_scale = self._plan.get("sm_scale")
                self._causal = self._plan.get("causal", False)
                calls.append({"wrapper": real.__name__, "plan": {k: v for k, v in self._plan.items()
                                                               if isinstance(v, (int, float, str, bool))}})

            def run(self, q: Any, kv: Any, *args: Any, out: Any = None, **kwargs: Any) -> Any:
                p = self._plan
                indptr = p.get("indptr", p.get("paged_kv_indptr")).tolist()
                indices = p.get("indices", p.get("paged_kv_indices")).tolist()
                last = p.get("last_page_len", p.get("paged_kv_last_page_len")).tolist()
                qo = p["qo_indptr"].tolist() if "qo_indptr" in p else list(range(len(indptr)))
                page = kv.shape[2]
                tables = [indices[indptr[r]:indptr[r + 1]] for r in range(len(indptr) - 1)]
                lens = [(len(t) - 1) * page + last[r] for r, t in enumerate(tables)]
                ref = reference_from_pages(q, kv[:, 0], kv[:, 1], tables, lens, qo, p.get("sm_scale"))
                if out is None:
                    return ref.to(q.dtype)
                out.copy_(ref.to(out.dtype))
                return out

        RecordingWrapper.__name__ = real.__name__
        return RecordingWrapper

    fi.BatchDecodeWithPagedKVCacheWrapper = recording(fi.BatchDecodeWithPagedKVCacheWrapper)
    fi.BatchPrefillWithPagedKVCacheWrapper = recording(fi.BatchPrefillWithPagedKVCacheWrapper)


def check_backend(backend: str) -> list[dict]:
    from attnsel.attention.kernels import paged
    from attnsel.attention.kernels.vllm_backend import VllmBackendAdapter

    calls: list[dict] = []
    if backend == "FLASH_ATTN":
        patch_flash_attn(calls)
    elif backend == "FLASHINFER":
        patch_flashinfer(calls)
    adapter = VllmBackendAdapter(backend, device="cpu")
    results = []
    for kind, batch, context, qlen in SHAPES:
        for block_size in (16, 64):
            # float16: the Triton interpreter's bf16 dot products are wrong (_triton_kernels.py)
            w = paged.Workload(kind, batch, context, qlen, 8, 2, 64, "float16")
            b = paged.make_paged_batch(w, block_size, device="cpu", seed=1)
            started = time.perf_counter()
            row = {"backend": backend, "shape": w.label(), "block_size": block_size}
            try:
                prepared = adapter.prepare(b)
                prepared.poison_output()
                err = paged.relative_error(prepared.run(), paged.reference_attention(b))
                row.update(ok=err < 2e-2, rel_error=err, provider=prepared.provider,
                           launch=prepared.details.get("launch"), details=prepared.details)
            except Exception as exc:  # noqa: BLE001 -- reported per row
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            row["seconds"] = round(time.perf_counter() - started, 2)
            row["recorded_calls"] = calls[-3:]
            results.append(row)
    return results


def record_stacks(backends: list[str]) -> dict:
    """What vLLM's own classes answer for a Llama-3.1-8B layer (32/8 heads, d128, bf16) per backend
    and block size: the facts tests/fixtures/fake_vllm/kernels replays (CUDA-graph support and
    resolved mode, kernel block size, KV-cache shape and stride order, dispatcher answers)."""
    from attnsel.attention.kernels.vllm_stack import StackBuilder, StackSpec, call_accepting

    import vllm  # type: ignore

    builder = StackBuilder(device="cpu")
    doc: dict = {"vllm": getattr(vllm, "__version__", "?"), "gpu": "H100 stand-in (CC 9.0)", "backends": {}}
    for backend in backends:
        entry: dict = {"block_sizes": {}}
        for block_size in (16, 32, 64, 128, 256):
            spec = StackSpec(backend, 32, 8, 128, "bfloat16", "auto", block_size, 131072, 1024, 8192)
            try:
                stack = builder.build(spec)
            except Exception as exc:  # noqa: BLE001 -- vLLM refuses the block size
                entry["block_sizes"][str(block_size)] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            with stack.active():
                shape = call_accepting(stack.backend_cls.get_kv_cache_shape, 10, stack.kernel_block_size, 8, 128)
                order = stack.backend_cls.get_kv_cache_stride_order()
            entry["block_sizes"][str(block_size)] = {"kernel_block_size": stack.kernel_block_size,
                                                     "kv_cache_shape_10_blocks": list(shape), "stride_order": list(order)}
            entry.update(cudagraph_support=stack.cudagraph_support, cudagraph_mode=stack.cudagraph_mode,
                         impl=type(stack.layer.impl).__name__, builder=type(stack.builder).__name__)
            entry["dispatch"] = [[n, u, *stack.launch_for(n, u)] for n in (1, 3, 16, 64, 256, 512, 513, 2048)
                                 for u in (True, False)]
        doc["backends"][backend] = entry
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=["TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"])
    parser.add_argument("--record", help="write what vLLM's classes answered (JSON) to this file and exit")
    args = parser.parse_args(argv)
    stand_in_gpu()
    if args.record:
        import json

        doc = record_stacks(args.backend or ["TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"])
        with open(args.record, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        print(f"recorded {', '.join(doc['backends'])} from vLLM {doc['vllm']} into {args.record}")
        return 0
    failed = 0
    for backend in args.backend or ["TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"]:
        for row in check_backend(backend):
            failed += not row["ok"]
            status = "ok " if row["ok"] else "BAD"
            detail = f"err {row['rel_error']:.2e} launch={row['launch']}" if "rel_error" in row else row.get("error")
            print(f"{status} {row['backend']:<11} bs={row['block_size']:<3} {row['shape']:<40} {detail} ({row['seconds']} s)")
            if not row["ok"] or os.environ.get("ATTNSEL_VERBOSE"):
                print(f"      {row.get('details') or ''} {row['recorded_calls']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
