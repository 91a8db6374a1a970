"""Recorders for vLLM's CUDA-only sparse MLA kernel calls (bench/tools/vllm_cpu_check.py), in the
style of cpu_recorders.py: each computes the fp32 reference from the arguments vLLM passed it, so
the cache slots vLLM derived from our top-k table and block table (its Triton
triton_convert_req_index_to_global_index, run by the Triton interpreter), the valid counts, the
scale and the query layout are what the check compares against attnsel's own sparse reference.
"""

from __future__ import annotations

from typing import Any


def sparse_reference(q: Any, latent: Any, slots: list[list[int]], scale: float, kv_lora_rank: int) -> Any:
    """fp32 absorbed MLA per token over the given cache slots only: q (tokens, heads, lora + rope),
    latent (slots, lora + rope)."""
    import torch

    out = torch.empty((q.shape[0], q.shape[1], kv_lora_rank), dtype=torch.float32)
    for t, row in enumerate(slots):
        rows = latent[torch.tensor(row, dtype=torch.long)].float()
        scores = torch.einsum("hd,kd->hk", q[t].float(), rows) * scale
        out[t] = torch.softmax(scores, -1) @ rows[:, :kv_lora_rank]
    return out


def _valid_prefix(indices: Any, counts: Any) -> list[list[int]]:
    """Each token's first `count` slots (what the kernels read); all must be real slots."""
    rows = [r[: int(c)] for r, c in zip(indices.tolist(), counts.tolist())]
    if any(s < 0 for r in rows for s in r):
        raise AssertionError("a sparse kernel was handed -1 inside its valid prefix")
    return rows


def patch_flash_attn_mla_sparse(calls: list[dict]) -> None:
    """FA3's sparse MLA call: q = q_pe, q_v = ql_nope, k / v the cache's k_pe / kv_c parts as pages of
    one token, the converted top-k as the block table and the valid counts as seqused_k."""
    import torch
    from vllm.v1.attention.backends.mla import flashattn_mla_sparse as fams  # type: ignore

    def varlen(q, k, v, q_v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k, block_table, softmax_scale,
               causal, **kwargs):
        calls.append({"fa_mla_sparse": {"q_pe": tuple(q.shape), "q_v": tuple(q_v.shape), "k": tuple(k.shape),
                                        "v": tuple(v.shape), "block_table": tuple(block_table.shape),
                                        "max_seqlen_k": max_seqlen_k, "fa_version": kwargs.get("fa_version"),
                                        "valid": seqused_k.tolist()[:4]}})
        latent = torch.cat([v.reshape(v.shape[0], -1), k.reshape(k.shape[0], -1)], dim=-1)
        ref = sparse_reference(torch.cat([q_v, q], dim=-1), latent, _valid_prefix(block_table, seqused_k),
                               softmax_scale, v.shape[-1])
        return ref.to(q.dtype)

    fams.flash_attn_varlen_func = varlen


class _NativeConcat:
    """vllm._custom_ops as flashmla_sparse.py sees it, with concat_mla_q (a CUDA op: a no-op stand-in
    here) done natively."""

    def __init__(self, real: Any):
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @staticmethod
    def concat_mla_q(ql_nope: Any, q_pe: Any, out: Any) -> None:
        import torch

        # the op fills the first heads of `out`: 0.33's concat buffer is padded to FlashMLA's 64 heads
        out[:, : ql_nope.shape[1]].copy_(torch.cat([ql_nope, q_pe], dim=-1))


class _OneStream:
    """A CPU has one stream: nothing to wait for, nothing to record."""

    def wait_event(self, event: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        pass

    def __enter__(self) -> "_OneStream":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


def _one_stream_index_groups() -> None:
    """0.33 converts the top-k to cache slots once per step for every layer of an index group, on a
    side stream with events (v1/attention/backends/mla/index_group.py); CPU tensors have no events,
    so the harness's streams and events are no-ops (the conversion itself runs as vLLM wrote it)."""
    try:
        from vllm.v1.attention.backends.mla import index_group  # type: ignore
    except ImportError:  # before 0.33: the conversion runs inside each layer's forward
        return
    index_group.current_stream = lambda: _OneStream()
    index_group._create_side_stream = lambda device: _OneStream()
    index_group._create_event = lambda: _OneStream()


def patch_flashmla_sparse(calls: list[dict]) -> None:
    """FlashMLA's sparse prefill kernel (vLLM's bf16-cache path for decode too): q (tokens, padded
    heads, 576), the cache as (slots, 1, 576), the converted top-k as (tokens, 1, topk) slots."""
    import torch
    from vllm.v1.attention.backends.mla import flashmla_sparse as fms  # type: ignore

    def sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, **kwargs):
        counts = topk_length if topk_length is not None else (indices[:, 0] >= 0).sum(-1)
        calls.append({"flash_mla_sparse_fwd": {"q": tuple(q.shape), "kv": tuple(kv.shape),
                                               "indices": tuple(indices.shape), "valid": counts.tolist()[:4]}})
        ref = sparse_reference(q, kv[:, 0], _valid_prefix(indices[:, 0], counts), sm_scale, d_v)
        return ref.to(q.dtype), torch.zeros(q.shape[0], q.shape[1]), torch.zeros(q.shape[0], q.shape[1])

    fms.flash_mla_sparse_fwd = sparse_fwd
    _one_stream_index_groups()
    fms.ops = _NativeConcat(fms.ops)
    fms.num_compute_units = lambda device_id=0: 132  # the H100 SXM's SMs (the builder sizes buffers by it)


PATCHES = {"FLASH_ATTN_MLA_SPARSE": patch_flash_attn_mla_sparse, "FLASHMLA_SPARSE": patch_flashmla_sparse}
