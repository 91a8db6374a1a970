"""Recorders for vLLM's CUDA-only sparse MLA kernel calls (bench/tools/vllm_cpu_check.py), in the
style of cpu_recorders.py: each computes the fp32 reference from the arguments vLLM passed it, so
the cache slots vLLM derived from our top-k table and block table (its Triton
triton_convert_req_index_to_global_index, run by the Triton interpreter), the valid counts, the
scale and the query layout are what the check compares against attnsel's own sparse reference.
"""

from __future__ import annotations

from typing import Any, Literal


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

    def __enter__(self) -> _OneStream:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
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
    # 0.34 makes them with torch.Stream / torch.Event / torch.accelerator.current_stream() in place
    # (index_group.py:135,188,208,387 @ 0.34.0): the module sees a torch whose streams are the no-ops
    index_group.torch = _TorchWithOneStream(index_group.torch)


class _TorchWithOneStream:
    """torch for one module: Stream, Event and accelerator.current_stream are `_OneStream`s, the rest torch's."""

    def __init__(self, torch: Any):
        self._torch = getattr(torch, "_torch", torch)
        self.accelerator = _AcceleratorWithOneStream(self._torch.accelerator)

    def __getattr__(self, name: str) -> Any:
        if name in ("Stream", "Event"):
            return lambda *args, **kwargs: _OneStream()
        return getattr(self._torch, name)


class _AcceleratorWithOneStream:
    def __init__(self, accelerator: Any):
        self._accelerator = accelerator

    def __getattr__(self, name: str) -> Any:
        if name == "current_stream":
            return lambda *args, **kwargs: _OneStream()
        return getattr(self._accelerator, name)


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


# A stand-in for FlashInfer's FA3 MLA schedule (its int workspace, flashinfer/mla/_batch_mla): one work
# item per KV chunk of each query row, so vLLM's device-side clamp of every work's kv_end
# (flashinfer_mla_sparse_sm90.py _clamp_work_kv_end) runs over split rows as on the GPU.
SM90_WORK_CHUNK = 512
# MLAPlanInfo field indices vLLM reads (flashinfer_mla_sparse_sm90.py _PI_*): byte offsets of the per-work
# arrays in the int workspace, and the number of y blocks (the works' count follows work_indptr).
SM90_PLAN_FIELDS = {"num_blks_y": 1, "q_indptr": 2, "kv_indptr": 3, "kv_start": 13, "kv_end": 14, "work_indptr": 15}


class _Sm90Schedule:
    """The int workspace of one plan: per work its query row, the row's offset into kv_indices, and
    the [kv_start, kv_end) part of the row it reads; then work_indptr (0, number of works)."""

    def __init__(self, kv_indptr: Any, kv_lens: Any, rows: int, capacity: int):
        import torch

        works = [(r, int(kv_indptr[r]), start, min(start + SM90_WORK_CHUNK, int(kv_lens[r])))
                 for r in range(rows) for start in range(0, max(int(kv_lens[r]), 1), SM90_WORK_CHUNK)]
        if len(works) > capacity:
            raise AssertionError(f"{len(works)} works planned, the schedule holds {capacity}")
        self.int_workspace = torch.zeros(4 * capacity + 2, dtype=torch.int32)
        for field, column in enumerate(zip(*works)):
            self.int_workspace[field * capacity: field * capacity + len(works)] = torch.tensor(column)
        self.int_workspace[4 * capacity + 1] = len(works)
        info = [0] * 18
        for name, field in (("q_indptr", 0), ("kv_indptr", 1), ("kv_start", 2), ("kv_end", 3), ("work_indptr", 4)):
            info[SM90_PLAN_FIELDS[name]] = 4 * field * capacity
        info[SM90_PLAN_FIELDS["num_blks_y"]] = 1
        self.plan_info, self.capacity = info, capacity

    def rows(self) -> dict[int, list[int]]:
        """Per query row, the kv_indices positions its works read (kv_end as vLLM's clamp left it)."""
        cap, ws = self.capacity, self.int_workspace.tolist()
        read: dict[int, list[int]] = {}
        for w in range(ws[4 * cap + 1]):
            row, offset, start, end = (ws[f * cap + w] for f in range(4))
            read.setdefault(row, []).extend(range(offset + start, offset + end))
        return read


def _sm90_wrapper(real: Any, calls: list[dict]) -> type:
    """flashinfer.mla.BatchMLAPagedAttentionWrapper as vLLM's SM90 sparse backend drives it: every call
    bound to the real class's signature (a wrong argument fails), plan() copying its CSR metadata into
    the caller's reserved buffers as use_cuda_graph=True does, run() computing the fp32 reference over
    the slots the planned works read in the kv_indices vLLM packed."""
    import inspect

    signatures = {name: inspect.signature(getattr(real, name)) for name in ("__init__", "plan", "run")}

    class RecordingWrapper:
        def __init__(self, *args: Any, **kwargs: Any):
            self.init = signatures["__init__"].bind(self, *args, **kwargs).arguments
            self._plan: dict = {}
            self._planned_backend: Any = None
            self._plan_info: list[int] = []

        def plan(self, *args: Any, **kwargs: Any) -> None:
            import types

            given = signatures["plan"].bind(self, *args, **kwargs).arguments
            for name in ("qo_indptr", "kv_indptr", "kv_len_arr"):  # exact-size copies (CUDA-graph plans)
                self.init[name].copy_(given[name])
            self.init["kv_indices"][: given["kv_indices"].numel()].copy_(given["kv_indices"])
            rows = int(given["qo_indptr"][-1])
            if not bool((given["qo_indptr"][: rows + 1] == _arange(rows + 1)).all()):
                raise AssertionError("the SM90 plan must give each query token its own row")
            capacity = self.init["kv_len_arr"].numel() * -(-self.init["kv_indices"].numel()
                                                           // (self.init["kv_len_arr"].numel() * SM90_WORK_CHUNK))
            schedule = _Sm90Schedule(given["kv_indptr"], given["kv_len_arr"], rows, capacity)
            self._planned_backend = types.SimpleNamespace(_int_workspace_buffer=schedule.int_workspace,
                                                          schedule=schedule)
            self._plan_info, self._plan = schedule.plan_info, given

        def run(self, *args: Any, **kwargs: Any) -> Any:
            given = signatures["run"].bind(self, *args, **kwargs).arguments
            q_nope, q_pe, ckv, kpe = (given[k] for k in ("q_nope", "q_pe", "ckv_cache", "kpe_cache"))
            plan = self._plan
            _check_sm90_plan(plan, q_nope, q_pe, ckv)
            slots = [self.init["kv_indices"][positions].tolist()
                     for _row, positions in sorted(self._planned_backend.schedule.rows().items())]
            if any(len(set(r)) != len(r) for r in slots):
                raise AssertionError("a planned work read past its row's valid prefix (a repeated slot)")
            latent = _sm90_latent(ckv, kpe, given.get("ckv_scale"), given.get("kpe_scale"))
            calls.append({"flashinfer_mla_sm90": {"q_nope": tuple(q_nope.shape), "q_pe": tuple(q_pe.shape),
                                                  "ckv": tuple(ckv.shape), "kv_dtype": str(plan["kv_data_type"]),
                                                  "ckv_scale": given.get("ckv_scale"), "valid": [len(r) for r in slots][:4]}})
            ref = sparse_reference(_concat_query(q_nope, q_pe), latent, slots, plan["sm_scale"], ckv.shape[-1])
            return ref.to(q_nope.dtype)

    # vLLM detects the SM90 support by the real run()'s parameters (0.33 utils/flashinfer.py:442
    # has_flashinfer_sm90_nope_mla: `ckv_scale_arr`); the stand-in shows the same ones
    for name in ("__init__", "plan", "run"):
        getattr(RecordingWrapper, name).__signature__ = signatures[name]
    return RecordingWrapper


def _arange(n: int) -> Any:
    import torch

    return torch.arange(n, dtype=torch.int32)


def _concat_query(q_nope: Any, q_pe: Any) -> Any:
    import torch

    return torch.cat([q_nope, q_pe], dim=-1)


def _check_sm90_plan(plan: dict, q_nope: Any, q_pe: Any, ckv: Any) -> None:
    """What FlashInfer's kernel would refuse or misread: heads, widths, page size, dtypes."""
    import torch

    kv_dtype = torch.float8_e4m3fn if ckv.dtype == torch.uint8 else ckv.dtype
    expected = {"num_heads": q_nope.shape[1], "head_dim_ckv": q_nope.shape[-1], "head_dim_kpe": q_pe.shape[-1],
                "page_size": 1, "causal": False, "q_data_type": q_nope.dtype, "kv_data_type": kv_dtype}
    wrong = {k: (plan[k], v) for k, v in expected.items() if plan[k] != v}
    if wrong:
        raise AssertionError(f"SM90 plan does not match its run (planned, run): {wrong}")


def _sm90_latent(ckv: Any, kpe: Any, ckv_scale: Any, kpe_scale: Any) -> Any:
    """The flat cache as rows of [kv_c | k_pe], dequantized with the scales vLLM passed for fp8."""
    import torch

    parts = [ckv[:, 0].float() * (ckv_scale or 1.0), kpe[:, 0].float() * (kpe_scale or 1.0)]
    return torch.cat(parts, dim=-1)


def patch_flashinfer_mla_sparse_sm90(calls: list[dict]) -> None:
    """FlashInfer's BatchMLAPagedAttentionWrapper (FA3 MLA) as vLLM 0.33's SM90 sparse backend plans and
    runs it: one query token per row, its top-k slots packed into kv_indices as pages of one token
    (vLLM's Triton _pack_topk_indices and _clamp_work_kv_end run by the interpreter on the recorder's
    schedule). Releases without the backend are left as they are (their rows say it is missing)."""
    import torch

    try:
        import flashinfer.mla as flashinfer_mla  # type: ignore
        from vllm.v1.attention.backends.mla import flashinfer_mla_sparse_sm90  # type: ignore  # noqa: F401
    except ImportError:
        return
    flashinfer_mla.BatchMLAPagedAttentionWrapper = _sm90_wrapper(flashinfer_mla.BatchMLAPagedAttentionWrapper, calls)
    torch.cuda.is_current_stream_capturing = lambda: False  # a CPU captures no graph (the builder asks before plan)
    _one_stream_index_groups()


PATCHES = {"FLASH_ATTN_MLA_SPARSE": patch_flash_attn_mla_sparse, "FLASHMLA_SPARSE": patch_flashmla_sparse,
           "FLASHINFER_MLA_SPARSE_SM90": patch_flashinfer_mla_sparse_sm90}
