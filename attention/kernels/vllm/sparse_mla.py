"""Sparse MLA backends (FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE, 0.33's
FLASHINFER_MLA_SPARSE_SM90) run by the
installed vLLM's own classes at decode, with the indexer's top-k, the way MLAAttention calls them.

Built as for dense MLA (mla.py), from a DeepSeek-V3.2-style config (index_topk set, so the sparse
builders size their buffers from it) and an MLAAttention built use_sparse=True with one shared
topk_indices_buffer, as deepseek_v2.py builds it (mla_layer.py sparse_layer_arguments). The indexer is
not run: before the timed call the first rows of that buffer get the batch's top-k per decode token
(request-local positions, -1 after them: what vLLM's indexer writes, attention/kernels/mla.py says
how they are chosen). The timed call is `impl.forward_mqa(q, kv_cache, metadata, layer)`, which
includes what vLLM runs per layer to turn those positions into cache slots
(sparse_utils.py triton_convert_req_index_to_global_index) and the sparse kernel: FA3 with the
top-k as a page-size-1 block table (flashattn_mla_sparse.py), FlashMLA's flash_mla_sparse_fwd over
the concatenated query (flashmla_sparse.py _bf16_flash_mla_kernel, heads padded to 64 on Hopper);
FLASHINFER_MLA_SPARSE_SM90 (0.33 mla/flashinfer_mla_sparse_sm90.py): its builder plans FlashInfer's
BatchMLAPagedAttentionWrapper (backend "fa3", use_cuda_graph=True, one row per query token, pages of
one token, causal=False) from host upper bounds and clamps each work's kv_end on the device; the
timed forward_mqa converts the top-k, packs it into the wrapper's kv_indices (Triton) and runs it
with the split (ql_nope, q_pe) query and the cache's kv_c / k_pe parts (no head padding).

Not timed, as for dense MLA: the W_UK_T / W_UV GEMMs and the KV-cache write; and the indexer
itself (its own kernels and cache, the same whichever attention backend runs).
fp8: FLASHMLA_SPARSE stores an fp8 cache in DeepSeek's 656-byte fp8_ds_mla format (vLLM
canonicalizes --kv-cache-dtype fp8 to it, mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype);
tune does not build that format yet, so fp8 rows say so (vLLM's own canonicalization decides which
backends store it so: stored_as_fp8_ds_mla). FLASH_ATTN_MLA_SPARSE takes 16-bit caches only.
FLASHINFER_MLA_SPARSE_SM90 keeps a plain e4m3 cache with a per-tensor scale; a release whose impl
mis-scales part of it says so in its adapter facts (fp8_not_timed) and those rows are not timed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.kernels.base import SPARSE_MLA_BACKENDS
from attnsel.attention.kernels.vllm.mla import VllmMlaAdapter

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnsel.attention.kernels.mla import MlaBatch
    from attnsel.attention.kernels.paged import Workload
    from attnsel.attention.kernels.vllm.stack import VllmStack

FP8_DS_MLA_NOTE = ("--kv-cache-dtype fp8: vLLM's sparse FlashMLA stores it as fp8_ds_mla (656 bytes per token: "
                   "512 fp8 values, 4 fp32 tile scales, 64 bf16 rope values), which tune does not build yet")


def stored_as_fp8_ds_mla(backend: str, kv_cache_dtype: str) -> bool:
    """Whether vLLM stores this fp8 cache in DeepSeek's fp8_ds_mla format for the backend, in vLLM's
    own words: MLAAttention.__init__ canonicalizes the cache dtype with
    _canonicalize_sparse_mla_kv_cache_dtype (0.26 / 0.33 model_executor/layers/attention/mla_attention.py:
    FLASHMLA_SPARSE's fp8 is fp8_ds_mla; FLASHINFER_MLA_SPARSE_SM90 keeps a plain e4m3 cache with a
    per-tensor scale). A release or machine without that function: taken as yes (fp8 not timed); a
    release without the backend: no (its rows say the backend is missing)."""
    try:
        from vllm.model_executor.layers.attention import mla_attention  # type: ignore

        from attnsel.attention.kernels.vllm.stack import backend_class

        canonical = mla_attention._canonicalize_sparse_mla_kv_cache_dtype
        cls = backend_class(backend)
    except (ImportError, AttributeError):
        return True
    except KeyError:  # MissingBackend: the row says this release lacks the backend (unsupported_reason)
        return False
    return canonical(cls, kv_cache_dtype) == "fp8_ds_mla"


def fp8_refusal(backend: str) -> str | None:
    """The installed release's reason not to time `backend` with a plain fp8 cache (its adapter facts)."""
    from attnsel.attention.kernels.vllm.stack import installed_facts

    try:
        return installed_facts().fp8_refusal(backend)
    except ValueError as exc:  # no facts for the installed vLLM: its rows say so when built
        return str(exc)


class VllmSparseMlaAdapter(VllmMlaAdapter):
    """vLLM's own sparse MLA impl (forward_mqa over the indexer's top-k) + its sparse metadata builder."""

    driven_backends = SPARSE_MLA_BACKENDS

    def sparsity_reason(self, w: Workload) -> str | None:
        from attnsel.attention.kernels.kv_quant import is_fp8

        if not getattr(w, "index_topk", None):
            return "needs a sparse MLA workload (the indexer's index_topk)"
        kv_cache_dtype = getattr(w, "kv_cache_dtype", "auto")
        if not is_fp8(kv_cache_dtype):
            return None
        if stored_as_fp8_ds_mla(self.backend, kv_cache_dtype):
            return FP8_DS_MLA_NOTE
        return fp8_refusal(self.backend)

    def fill_model_inputs(self, stack: VllmStack, b: MlaBatch) -> list[str]:
        """The indexer's output for this step in the layer's shared topk_indices_buffer (the rows
        of the batch's tokens; the rest keep -1, as the indexer leaves them)."""
        buffer = stack.layer.impl.topk_indices_buffer
        assert b.topk_indices is not None  # sparsity_reason refused workloads without index_topk
        tokens, topk = b.topk_indices.shape
        if buffer.shape[1] != topk:
            raise ValueError(f"the layer's top-k buffer is {buffer.shape[1]} wide, the batch's top-k {topk}")
        buffer.fill_(-1)
        buffer[:tokens].copy_(b.topk_indices)
        return [f"top-k: {topk} positions per decode token (every position of a sequence no longer than that), "
                f"written into the layer's topk_indices_buffer before the timed call, as the indexer writes them"]

    def details(self, stack: VllmStack, metadata: object, launch: tuple[str, str],
                kv_cache: torch.Tensor) -> dict[str, object]:
        facts = super().details(stack, metadata, launch, kv_cache)
        facts["index_topk"] = int(stack.layer.impl.topk_indices_buffer.shape[1])
        facts["fp8_use_mixed_batch"] = getattr(metadata, "fp8_use_mixed_batch", None)
        return facts
