"""Recorders that stand in for vLLM's CUDA-only kernel calls in bench/tools/vllm_cpu_check.py.

Each replaces one function in the module of vLLM's backend that calls it (so vLLM's own impl and
builder run unchanged around it), records the arguments vLLM passed, and computes the fp32
reference FROM THOSE ARGUMENTS: the page table, lengths, scale, fp8 descales and layout vLLM
derived from what attnsel handed it. A wrong block table, length, scale or query layout in our
adapters therefore fails the check; a kernel bug on the GPU is out of reach here (the GPU run's
correctness gate covers that). Every argument the real kernel reads counts, scales included, and
each is applied as the kernel applies it, not as the caller presumably meant it (wrapper_scales: a
q_scale handed over with a 16-bit query still scales the logits, as vLLM 0.33's native fp8 decode
showed on an H200).
"""

from __future__ import annotations

import inspect
from typing import Any, cast


def _scalar(value: Any) -> float:
    """A descale/scale argument (float, 0-d tensor or an expanded per-(batch, head) tensor) as a float."""
    if value is None:
        return 1.0
    if hasattr(value, "reshape"):
        return float(value.reshape(-1)[0])
    return float(value)


def wrapper_scales(run_kwargs: dict) -> dict[str, float]:
    """The scales a FlashInfer paged wrapper's run() applies, as it applies them: q_scale and k_scale
    multiply the softmax scale WHATEVER the query's dtype (FlashInfer 0.7.2: BatchDecodeWithPagedKVCacheWrapper.run
    flashinfer/decode.py:2907-2910, BatchPrefillWithPagedKVCacheWrapper.run prefill.py:4322-4326 outside its
    cudnn backend; 0.6.14: decode.py:1530-1533), and v_scale multiplies the output (0.7.2 decode.py:3316-3318).
    So a 16-bit query handed over with a q_scale other than 1.0 gets its logits scaled by it: the recorder
    does the same (it once applied q_scale to fp8 queries only, and passed vLLM 0.33's native fp8 decode,
    which the H200 failed; docs/tune.md "FlashInfer's native decode with an fp8 cache")."""
    return {f"{name}_scale": _scalar(run_kwargs.get(f"{name}_scale")) for name in "qkv"}


def paged_wrapper_output(plan: dict, q: Any, kv: Any, kv_layout: str, run_kwargs: dict) -> Any:
    """What a FlashInfer paged wrapper's run(q, kv, **run_kwargs) computes (fp32), from the arguments
    its plan() was given (`plan`: indptr, indices, last_page_len, optional qo_indptr, sm_scale) and
    every scale run() is given (wrapper_scales)."""
    indptr = _planned(plan, "indptr", "paged_kv_indptr").tolist()
    indices = _planned(plan, "indices", "paged_kv_indices").tolist()
    last = _planned(plan, "last_page_len", "paged_kv_last_page_len").tolist()
    qo = plan["qo_indptr"].tolist() if "qo_indptr" in plan else list(range(len(indptr)))
    k_pages, v_pages = _flashinfer_pages(kv, kv_layout)
    page = k_pages.shape[1]
    tables = [indices[indptr[r]:indptr[r + 1]] for r in range(len(indptr) - 1)]
    lens = [(len(t) - 1) * page + last[r] for r, t in enumerate(tables)]
    scale = cast(float, plan.get("sm_scale"))  # vLLM's plan() calls always pass sm_scale
    return reference_from_pages(q, k_pages, v_pages, tables, lens, qo, scale, **wrapper_scales(run_kwargs))


def _planned(plan: dict, name: str, other_name: str) -> Any:
    """A plan() argument recorded under either of its names (FlashInfer's two spellings): a tensor."""
    return plan.get(name, plan.get(other_name))


def reference_from_pages(q, k_pages, v_pages, tables: list[list[int]], seq_lens: list[int], q_starts: list[int],
                         scale: float, q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0):
    """fp32 causal attention from a page table, K/V as (pages, page, heads, dim); fp8 inputs are
    dequantized with the scales the kernel was given."""
    import torch

    out = torch.empty(q.shape, dtype=torch.float32)
    page, hkv = k_pages.shape[1], k_pages.shape[2]
    group = q.shape[1] // hkv
    for r, seq_len in enumerate(seq_lens):
        pages = torch.tensor(tables[r][: -(-seq_len // page)], dtype=torch.long)
        k = k_pages[pages].reshape(-1, hkv, q.shape[2])[:seq_len].float() * k_scale
        v = v_pages[pages].reshape(-1, hkv, v_pages.shape[-1])[:seq_len].float() * v_scale
        qs = q[q_starts[r]:q_starts[r + 1]].float().reshape(-1, hkv, group, q.shape[2]) * q_scale
        n = qs.shape[0]
        scores = torch.einsum("qhgd,khd->hgqk", qs, k) * scale
        qpos = torch.arange(seq_len - n, seq_len)[:, None]
        scores = scores.masked_fill(torch.arange(seq_len)[None, :] > qpos, float("-inf"))
        o = torch.einsum("hgqk,khd->qhgd", torch.softmax(scores, -1), v)
        out[q_starts[r]:q_starts[r + 1]] = o.reshape(n, -1, q.shape[2])
    return out


def mla_reference_from_pages(q, cache, tables, seq_lens: list[int], q_starts: list[int], scale: float,
                             kv_lora_rank: int, q_scale: float = 1.0, k_scale: float = 1.0):
    """fp32 absorbed MLA from a page table: q (tokens, heads, lora + rope), cache (pages, page, lora + rope)."""
    import torch

    out = torch.empty((q.shape[0], q.shape[1], kv_lora_rank), dtype=torch.float32)
    page = cache.shape[1]
    for r, seq_len in enumerate(seq_lens):
        pages = torch.as_tensor(tables[r][: -(-seq_len // page)], dtype=torch.long)
        latent = cache[pages].reshape(-1, cache.shape[-1])[:seq_len].float() * k_scale
        qs = q[q_starts[r]:q_starts[r + 1]].float() * q_scale
        n = qs.shape[0]
        scores = torch.einsum("qhd,kd->hqk", qs, latent) * scale
        qpos = torch.arange(seq_len - n, seq_len)[:, None]
        scores = scores.masked_fill(torch.arange(seq_len)[None, :] > qpos, float("-inf"))
        out[q_starts[r]:q_starts[r + 1]] = torch.einsum("hqk,kd->qhd", torch.softmax(scores, -1), latent[:, :kv_lora_rank])
    return out


def patch_flash_attn(calls: list[dict]) -> None:
    from vllm.v1.attention.backends import flash_attn as fa  # type: ignore

    def varlen(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal,
               block_table, **kwargs):
        calls.append({"num_splits": kwargs.get("num_splits"), "fa_version": kwargs.get("fa_version"),
                      "scheduler_metadata": kwargs.get("scheduler_metadata") is not None, "causal": causal,
                      "q_dtype": str(q.dtype), "k_descale": kwargs.get("k_descale") is not None})
        ref = reference_from_pages(q, k, v, block_table.tolist(), seqused_k.tolist(), cu_seqlens_q.tolist(),
                                   softmax_scale, *(_scalar(kwargs.get(f"{n}_descale")) for n in "qkv"))
        out.copy_(ref.to(out.dtype))
        return out

    fa.flash_attn_varlen_func = varlen
    fa.get_scheduler_metadata = lambda **kwargs: _recorded(calls, {"scheduler": kwargs})


def patch_flashinfer(calls: list[dict]) -> None:
    """FlashInfer's wrappers replaced by recorders; their plan() arguments are bound to the real
    wrapper's signature, so the page table they describe is what vLLM computed from our metadata."""
    from vllm.v1.attention.backends import flashinfer as fi  # type: ignore

    def recording(real: Any) -> type:
        signature = inspect.signature(real.plan)

        class RecordingWrapper:
            def __init__(self, *args: Any, **kwargs: Any):
                self.is_cuda_graph_enabled = bool(kwargs.get("use_cuda_graph", False))
                # FlashInfer's wrappers take (float_workspace_buffer, kv_layout="NHD", ...)
                self.kv_layout = kwargs.get("kv_layout", args[1] if len(args) > 1 else "NHD")
                self._plan: dict = {}

            def plan(self, *args: Any, **kwargs: Any) -> None:
                bound = signature.bind(self, *args, **kwargs)
                self._plan = dict(bound.arguments)
                # FlashInfer 0.7's decode plan() takes all but the first seven as **kwargs (decode.py:1834)
                for name, parameter in signature.parameters.items():
                    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                        self._plan.update(self._plan.pop(name, {}))
                # the real wrappers keep these; vLLM's forward asserts them against its impl
                self._window_left = self._plan.get("window_left", -1)
                self._logits_soft_cap = self._plan.get("logits_soft_cap") or 0.0
                self._sm_scale = self._plan.get("sm_scale")
                self._causal = self._plan.get("causal", False)
                calls.append({"wrapper": real.__name__, "plan": {k: v for k, v in self._plan.items()
                                                               if isinstance(v, (int, float, str, bool))},
                              "kv_data_type": str(self._plan.get("kv_data_type"))})

            def run(self, q: Any, kv: Any, *args: Any, out: Any = None, **kwargs: Any) -> Any:
                calls.append({"run": real.__name__, "q_dtype": str(q.dtype), "q_scale": kwargs.get("q_scale"),
                              "k_scale": kwargs.get("k_scale"), "v_scale": kwargs.get("v_scale"),
                              "kv": "(k, v) tuple" if isinstance(kv, (tuple, list)) else f"{kv.dim()}-D tensor",
                              "kv_layout": self.kv_layout})
                ref = paged_wrapper_output(self._plan, q, kv, self.kv_layout, kwargs)
                if out is None:
                    return ref.to(q.dtype)
                out.copy_(ref.to(out.dtype))
                return out

        RecordingWrapper.__name__ = real.__name__
        return RecordingWrapper

    fi.BatchDecodeWithPagedKVCacheWrapper = recording(fi.BatchDecodeWithPagedKVCacheWrapper)
    fi.BatchPrefillWithPagedKVCacheWrapper = recording(fi.BatchPrefillWithPagedKVCacheWrapper)
    if hasattr(fi, "fast_decode_plan"):
        # a CUDA-graph decode wrapper's second and later plans go through FlashInfer's fast_decode_plan
        # (0.33 flashinfer.py:2934, vLLM's fast_plan_decode), which fills the same plan into the
        # wrapper's graph buffers: the recorder takes it as a plan()
        fi.fast_decode_plan = lambda wrapper, *args, **kwargs: wrapper.plan(*args, **kwargs)
    if hasattr(fi, "_get_trtllm_workspace_buffer"):
        _patch_flashinfer_trtllm_decode(fi, calls)
    if hasattr(fi, "custom_ops"):
        fi.custom_ops = _NativeFp8Quant(fi.custom_ops)
    if hasattr(fi, "get_device_sm_count"):
        fi.get_device_sm_count = lambda device=None: 132  # 0.33's FlashInferImpl asks the GPU: the H100 SXM's
    if hasattr(fi, "_get_multi_ctas_kv_counter_buffer"):  # 0.33: a kernel scratch buffer on "cuda"
        fi._get_multi_ctas_kv_counter_buffer = lambda min_bytes, device=None: _zeros_on_cpu(min_bytes)


def _zeros_on_cpu(num_bytes: int) -> Any:
    import torch

    return torch.zeros(num_bytes, dtype=torch.uint8)


class _NativeFp8Quant:
    """vllm._custom_ops as one backend module sees it, with scaled_fp8_quant done natively: its CUDA
    op (torch.ops._C.static_scaled_fp8_quant) is a no-op stand-in here, which left 0.26 FlashInfer's
    fp8 prefill query (maybe_quant_query) uninitialized. Static scale only, as that call passes."""

    def __init__(self, real: Any):
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @staticmethod
    def scaled_fp8_quant(x: Any, scale: Any = None, **kwargs: Any) -> tuple[Any, Any]:
        import torch

        if scale is None:
            raise NotImplementedError("the CPU check's scaled_fp8_quant takes a static scale only")
        fp8 = torch.float8_e4m3fn
        limit = torch.finfo(fp8).max
        return (x.float() / _scalar(scale)).clamp(-limit, limit).to(fp8), scale


def _patch_flashinfer_trtllm_decode(fi: Any, calls: list[dict]) -> None:
    """vLLM decodes on SM90 with FlashInfer's XQA kernel: 0.26 through trtllm_batch_decode_with_kv_cache,
    0.33 through xqa_batch_decode_with_kv_cache (flashinfer_xqa_batch_decode_with_kv_cache in
    vllm/utils/flashinfer.py; vllm/v1/attention/backends/flashinfer.py FlashInferImpl.forward), both
    a block table rather than a planned wrapper, with a workspace vLLM allocates on "cuda" on first use.
    bmm1_scale is the softmax scale times the fp8 query (when the query is fp8) and K scales; bmm2_scale
    the V scale (FlashInfer's xqa_batch_decode_with_kv_cache folds them into the kernel's scales)."""
    import torch

    def decode(query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len, bmm1_scale=1.0,
               bmm2_scale=1.0, out=None, kv_layout="NHD", q_len_per_req=1, q_cu_seq_lens=None, kernel="trtllm_decode",
               **kwargs):
        k_pages, v_pages = _flashinfer_pages(kv_cache, kv_layout)
        calls.append({kernel: {"query": tuple(query.shape), "q_dtype": str(query.dtype),
                                        "k": tuple(k_pages.shape), "kv_layout": kv_layout, "backend": kwargs.get("backend"),
                                        "bmm1_scale": _scalar(bmm1_scale), "bmm2_scale": _scalar(bmm2_scale),
                                        "q_len_per_req": q_len_per_req, "ragged": q_cu_seq_lens is not None}})
        if kwargs.get("window_left", -1) >= 0 or kwargs.get("sinks") is not None:
            raise NotImplementedError("the CPU check's XQA recorder has no sliding window or sinks")
        if q_cu_seq_lens is not None:
            q_starts = q_cu_seq_lens.tolist()
        else:
            q_starts = list(range(0, query.shape[0] + 1, q_len_per_req or 1))
        ref = reference_from_pages(query, k_pages, v_pages, block_tables.tolist(), seq_lens.tolist(), q_starts,
                                   _scalar(bmm1_scale), v_scale=_scalar(bmm2_scale))
        if out is None:
            return ref.to(query.dtype if query.element_size() > 1 else torch.bfloat16)
        out.copy_(ref.to(out.dtype))
        return out

    fi.trtllm_batch_decode_with_kv_cache = decode
    fi._get_trtllm_workspace_buffer = lambda: torch.zeros(1, dtype=torch.uint8)
    if hasattr(fi, "flashinfer_xqa_batch_decode_with_kv_cache"):
        # 0.28+ call FlashInfer's XQA decode by its own name on SM90 (0.31: flashinfer.py:2540), with
        # the same arguments and scales (bmm1 = softmax scale x K scale, x Q scale for an fp8 query)
        fi.flashinfer_xqa_batch_decode_with_kv_cache = lambda *a, **kw: decode(*a, **{**kw, "kernel": "xqa_decode"})


def _recorded(calls: list, call: dict) -> None:
    """A stub's answer: the call recorded, nothing returned (what the stubbed function returns here)."""
    calls.append(call)


def _flashinfer_pages(kv: Any, kv_layout: str) -> tuple[Any, Any]:
    """K and V as (pages, page, heads, dim) from what a FlashInfer wrapper's run() is given: one
    tensor (pages, 2, page, heads, dim) (NHD; HND swaps page and heads), as vLLM 0.24 passes it, or
    a (K, V) tuple of (pages, page, heads, dim) tensors (HND: (pages, heads, page, dim)), as 0.26's
    FlashInferImpl passes its packed cache split in two."""
    if isinstance(kv, (tuple, list)):
        k, v = kv
    else:
        k, v = kv[:, 0], kv[:, 1]
    if kv_layout == "HND":
        k, v = k.transpose(1, 2), v.transpose(1, 2)
    return k, v


def patch_flashmla(calls: list[dict]) -> None:
    """vllm._flashmla_C's scheduler and decode kernels (bf16 and fp8 paths) as vLLM's FlashMLA
    backend module imported them."""
    from types import SimpleNamespace

    import torch
    from vllm.v1.attention.backends.mla import flashmla as fm  # type: ignore

    def metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, **kwargs):
        calls.append({"get_mla_metadata": {"num_q_tokens_per_head_k": num_q_tokens_per_head_k,
                                           "num_heads_k": num_heads_k, **kwargs}})
        return SimpleNamespace(tile_scheduler_metadata=None, num_splits=None), None

    def decode(q, k_cache, block_table, cache_seqlens, head_dim_v, *, softmax_scale, causal, descale_q=None,
               descale_k=None, **kwargs):
        calls.append({"flash_mla": {"q": tuple(q.shape), "q_dtype": str(q.dtype), "k_cache": tuple(k_cache.shape),
                                    "head_dim_v": head_dim_v, "causal": causal, "fp8": descale_k is not None}})
        batch, s_q, heads, width = q.shape
        ref = mla_reference_from_pages(q.reshape(batch * s_q, heads, width), k_cache[:, :, 0], block_table.tolist(),
                                       cache_seqlens.tolist(), list(range(0, batch * s_q + 1, s_q)), softmax_scale,
                                       head_dim_v, _scalar(descale_q), _scalar(descale_k))
        out_dtype = torch.bfloat16 if q.dtype.itemsize == 1 else q.dtype
        return ref.reshape(batch, s_q, heads, head_dim_v).to(out_dtype), torch.zeros(batch, heads, s_q)

    fm.get_mla_metadata = metadata
    fm.get_mla_metadata_dense_fp8 = lambda *a, **k: (torch.zeros(1, 8, dtype=torch.int32),
                                                      torch.zeros(2, dtype=torch.int32))
    fm.flash_mla_with_kvcache = lambda **kw: decode(**{k: v for k, v in kw.items() if k != "is_fp8_kvcache"})
    fm.flash_mla_with_kvcache_fp8 = lambda **kw: decode(**{k: v for k, v in kw.items()
                                                           if k not in ("tile_scheduler_metadata", "num_splits")})


def patch_flash_attn_mla(calls: list[dict]) -> None:
    """vllm_flash_attn's FA3 MLA decode (q = q_pe with q_v = ql_nope over the latent cache's k_pe
    and kv_c parts) and its AOT scheduler, as vLLM's FLASH_ATTN_MLA module imported them."""
    import torch
    from vllm.v1.attention.backends.mla import flashattn_mla as fam  # type: ignore

    def varlen(q, k, v, q_v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k, block_table, softmax_scale,
               causal, return_softmax_lse=False, **kwargs):
        calls.append({"fa_mla": {"q_pe": tuple(q.shape), "q_v": tuple(q_v.shape), "k": tuple(k.shape),
                                 "v": tuple(v.shape), "fa_version": kwargs.get("fa_version"),
                                 "num_splits": kwargs.get("num_splits"),
                                 "scheduler_metadata": kwargs.get("scheduler_metadata") is not None}})
        lora = v.shape[-1]
        query = torch.cat([q_v, q], dim=-1)
        cache = torch.cat([v[:, :, 0], k[:, :, 0]], dim=-1)
        ref = mla_reference_from_pages(query, cache, block_table.tolist(), seqused_k.tolist(), cu_seqlens_q.tolist(),
                                       softmax_scale, lora).to(q.dtype)
        return (ref, torch.zeros(q.shape[1], q.shape[0])) if return_softmax_lse else ref

    fam.flash_attn_varlen_func = varlen
    fam.get_scheduler_metadata = lambda **kwargs: _recorded(calls, {"scheduler": {
        k: v for k, v in kwargs.items() if isinstance(v, (int, float, bool, str))}})


def patch_flashinfer_mla(calls: list[dict]) -> None:
    """FlashInfer's TRT-LLM MLA decode as vLLM's FLASHINFER_MLA module imported it."""
    import torch
    from vllm.v1.attention.backends.mla import flashinfer_mla as fim  # type: ignore

    def decode(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim, block_tables,
               seq_lens, max_seq_len, bmm1_scale=1.0, bmm2_scale=1.0, **kwargs):
        calls.append({"trtllm_mla": {"query": tuple(query.shape), "q_dtype": str(query.dtype),
                                     "kv_cache": tuple(kv_cache.shape), "bmm1_scale": bmm1_scale,
                                     "bmm2_scale": bmm2_scale}})
        batch, s_q, heads, width = query.shape
        ref = mla_reference_from_pages(query.reshape(batch * s_q, heads, width), kv_cache[:, 0], block_tables.tolist(),
                                       seq_lens.tolist(), list(range(0, batch * s_q + 1, s_q)), bmm1_scale,
                                       kv_lora_rank) * bmm2_scale
        out_dtype = torch.bfloat16 if query.dtype.itemsize == 1 else query.dtype
        out = ref.reshape(batch, s_q, heads, kv_lora_rank).to(out_dtype)
        return (out, torch.zeros(batch, s_q, heads)) if kwargs.get("return_lse") else out

    fim.trtllm_batch_decode_with_kv_cache_mla = decode
    if hasattr(fim, "get_device_sm_count"):  # 0.33 sizes its multi-CTA counter from the GPU: a B200's
        fim.get_device_sm_count = lambda device=None: 148
    if hasattr(fim, "_get_multi_ctas_kv_counter_buffer"):  # 0.33: a kernel scratch buffer on "cuda"
        fim._get_multi_ctas_kv_counter_buffer = lambda min_bytes, device=None: _zeros_on_cpu(min_bytes)
    if hasattr(fim, "_get_workspace_buffer"):
        # 0.26 allocates the kernel's workspace on "cuda" on first use (a driver call); the kernel
        # that reads it is the recorder above
        fim._get_workspace_buffer = lambda return_lse=False: torch.zeros(1, dtype=torch.int8)
    if hasattr(fim, "get_device_sm_count"):
        # 0.27+ size trtllm-gen's multi-CTA-KV counter by the GPU's SM count (0.27: flashinfer_mla.py:330, a
        # driver call): the H100 SXM's
        fim.get_device_sm_count = lambda device=None: 132


PATCHES = {
    "FLASH_ATTN": patch_flash_attn, "FLASHINFER": patch_flashinfer, "FLASHMLA": patch_flashmla,
    "FLASH_ATTN_MLA": patch_flash_attn_mla, "FLASHINFER_MLA": patch_flashinfer_mla,
}
