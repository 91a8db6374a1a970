"""MLA backends (FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA, CUTLASS_MLA) run by the
installed vLLM's own classes, at decode, the way MLAAttention.forward_impl calls them.

What is built (vllm_stack.py, with an MLA spec): a VllmConfig from a synthesized one-layer
DeepSeek-V3-style config.json (kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim and
the per-GPU heads: what get_mla_dims and the builders read), vLLM's own `MLAAttention` layer (it
builds the backend's MLA impl with vLLM's arguments and its MLA prefill backend), the backend's
metadata builder for the layer's MLAAttentionSpec at the kernel block size, vLLM's CUDA-graph
resolution and CudagraphDispatcher.

One timed call is `impl.forward_mqa(q, kv_cache, metadata, layer)`: the absorbed decode attention
of mla.py, with the metadata vLLM's MLA builder built (FlashMLA's tile scheduler, FA3's AOT
schedule, ...). What forward_impl does around it is done once, outside the timed call, exactly as
it does it: the query handed over as vLLM hands it (ql_nope as the transposed output of the
W_UK_T bmm, q_pe a slice of the projected query; for an fp8 cache and an impl that takes quantized
queries, the two concatenated and quantized by MLAAttention's own _decode_concat_quant_fp8_op with
layer._q_scale), the cache viewed as fp8 for an fp8 cache. Bypassed, per row (and said so): the
W_UK_T absorption bmm and the W_UV up-projection after it (GEMMs with the model's kv_b_proj
weights, the same for every backend: the layer is built with kv_b_proj=None, so no weights are
loaded), and the KV-cache write. MLA prefill is not timed (mla.py says why).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from attnsel.attention.kernels.base import (
    MLA_BACKENDS,
    PreparedKernel,
    cuda_device_reason,
    installed_version,
    latent,
    shape_kind_reason,
)
from attnsel.attention.kernels.vllm.backend import (
    VllmBackendAdapter,
    _synchronize,
    class_reason,
)
from attnsel.attention.kernels.vllm.mla_layer import MLA_LAYER_MODULES

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnsel.attention.kernels.base import Batch
    from attnsel.attention.kernels.mla import MlaBatch
    from attnsel.attention.kernels.paged import Workload
    from attnsel.attention.kernels.vllm.stack import StackSpec, VllmStack

BYPASSED = ("not timed: the W_UK_T absorption bmm before forward_mqa and the W_UV up-projection after it "
            "(GEMMs with the model's weights, the same for every backend), and the KV-cache write")


def latent_cache_tensor(stack: VllmStack, batch: MlaBatch) -> torch.Tensor:
    """The layer's latent cache in the backend's shape (num_blocks, block_size, head_size), stride
    order and storage dtype (uint8 for fp8), holding the batch's cache; viewed as fp8 for an fp8
    cache, as forward_impl hands it to forward_mqa."""
    from attnsel.attention.kernels.kv_quant import fp8_torch_dtype, is_fp8
    from attnsel.attention.kernels.vllm.inputs import (
        allocate_like_vllm,
        as_storage,
        backend_cache_layout,
    )

    nb, bs, d = batch.latent_cache.shape
    shape, order = backend_cache_layout(stack, nb, bs, 1, d, latent=True)
    cache = allocate_like_vllm(stack, shape, order, batch.latent_cache.device)
    cache.copy_(as_storage(batch.latent_cache, cache.dtype).reshape(shape))
    if stack.facts.shape_from == "kv_cache_layouts":
        cache = cache.squeeze(1)  # MLAAttention binds its [blocks, 1, block_size, width] view squeezed (0.29+, KVCacheLayout releases)
    if is_fp8(batch.kv_cache_dtype):
        return cache.view(fp8_torch_dtype(batch.kv_cache_dtype))
    return cache


def mqa_query(stack: VllmStack, b: MlaBatch) -> tuple[torch.Tensor | tuple[torch.Tensor, torch.Tensor], str | None]:
    """What forward_impl passes forward_mqa for the batch's absorbed query [ql_nope | q_pe]:
    the tuple (ql_nope, q_pe) with vLLM's memory layout, or, for an fp8 cache with an impl that
    takes quantized queries, the two concatenated and quantized with layer._q_scale."""
    from attnsel.attention.kernels.kv_quant import is_fp8

    layer, impl = stack.layer, stack.layer.impl
    tokens, heads, width = b.query.shape
    assert stack.spec.mla is not None  # VllmMlaAdapter.stack_spec
    lora, nope = b.kv_lora_rank, stack.spec.mla.qk_nope_head_dim
    padded = getattr(layer, "q_pad_num_heads", None) or heads
    # torch.bmm(q_nope (N, B, P), W_UK_T) writes (N, B, L); forward_impl transposes it to (B, N, L)
    ql_nope = b.query.new_empty((padded, tokens, lora))
    ql_nope.resize_((heads, tokens, lora))
    ql_nope.copy_(b.query[..., :lora].transpose(0, 1))
    ql_nope = ql_nope.transpose(0, 1)
    # q_pe: the rope part of the projected query, split off it (a strided view)
    projected = b.query.new_empty((tokens, padded, nope + width - lora))[:, :heads]
    projected[..., nope:].copy_(b.query[..., lora:])
    q_pe = projected[..., nope:]
    if is_fp8(b.kv_cache_dtype) and getattr(impl, "supports_quant_query_input", False):
        quantized = layer._decode_concat_quant_fp8_op(ql_nope, q_pe, layer._q_scale)
        return quantized, (f"query concatenated and quantized to {quantized.dtype} with layer._q_scale by "
                           f"MLAAttention's _decode_concat_quant_fp8_op before the timed call, as forward_impl does")
    return (ql_nope, q_pe), None


class VllmMlaAdapter(VllmBackendAdapter):
    """vLLM's own MLA impl (forward_mqa) + MLA metadata builder for one MLA backend."""

    driven_backends = MLA_BACKENDS

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        kind = shape_kind_reason(w, mla=True, fp8=True) or self.sparsity_reason(w)
        if kind:
            return kind
        try:
            from attnsel.attention.kernels.vllm.stack import backend_class

            cls = backend_class(self.backend)
        except KeyError as exc:  # MissingBackend: not in this release's AttentionBackendEnum
            return str(exc)
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        return class_reason(cls, w) or (None if str(device) == "cpu" == self.device else cuda_device_reason(device))

    def sparsity_reason(self, w: Workload) -> str | None:
        if getattr(w, "index_topk", None):
            return "a sparse MLA (index_topk) workload: vLLM runs it with its sparse MLA backends"
        return None

    def fill_model_inputs(self, stack: VllmStack, b: MlaBatch) -> list[str]:
        """What the model hands the layer besides q and the cache (sparse MLA: the indexer's top-k);
        dense MLA: nothing."""
        return []

    def preload_modules(self) -> list[str]:
        modules = super().preload_modules()
        return [*modules, MLA_LAYER_MODULES[0]] if modules else modules

    def stack_spec(self, b: Batch) -> StackSpec:
        import dataclasses

        from attnsel.attention.kernels.vllm.stack import MlaDims

        spec = super().stack_spec(b)
        # v_head_dim only sizes W_UV (not built): DeepSeek's 128
        b = latent(b)
        mla = MlaDims(b.kv_lora_rank, b.qk_rope_head_dim, b.qk_nope_head_dim, 128, getattr(b, "index_topk", None))
        return dataclasses.replace(spec, num_kv_heads=1, mla=mla)

    def prepare(self, batch: Batch) -> PreparedKernel:
        from attnsel.attention.kernels import mla
        from attnsel.attention.kernels.vllm.calls import keyword_arguments, keyword_call
        from attnsel.attention.kernels.vllm.inputs import (
            common_metadata,
            set_layer_scales,
        )

        b = latent(batch)
        started = time.perf_counter()
        stack = self.stack_for(b)
        kb = mla.split_into_kernel_blocks(b, stack.kernel_block_size)
        device = b.query.device
        layer, impl = stack.layer, stack.layer.impl
        if getattr(impl, "dcp_world_size", 1) == -1:
            impl.dcp_world_size = 1  # forward_impl sets it from the DCP group on its first call: none here
        with stack.active():
            notes = set_layer_scales(layer, b)
            metadata = keyword_call(stack.builder.build, stack.facts.builder_build, 0, common_metadata(kb, device))
            kv_cache = latent_cache_tensor(stack, kb)
            query, quant_note = mqa_query(stack, b)
            notes += self.fill_model_inputs(stack, kb)
        result: list[torch.Tensor | None] = [None]
        mqa_arguments = keyword_arguments(stack.facts.mla_forward_mqa, query, kv_cache, metadata, layer)

        def run() -> torch.Tensor | None:
            result[0] = impl.forward_mqa(**mqa_arguments)[0]
            return result[0]

        run()
        _synchronize(device)
        setup = time.perf_counter() - started
        launch = stack.launch_for(int(b.query.shape[0]), b.num_decodes == b.batch)
        details = self.details(stack, metadata, launch, kv_cache)
        details.update(query=("fp8 (concatenated)" if quant_note else "(ql_nope, q_pe) tuple"), bypassed=BYPASSED)
        return PreparedKernel(
            run=run, output=lambda: result[0], provider=self.provider_text(stack),
            kernel_block_size=stack.kernel_block_size, setup_seconds=setup,
            notes=tuple(stack.notes + notes + ([quant_note] if quant_note else []) + [BYPASSED]),
            poison_output=None,  # forward_mqa returns a new output tensor on every call
            details=details,
        )

    def provider_text(self, stack: VllmStack) -> str:
        impl, builder = type(stack.layer.impl).__name__, type(stack.builder).__name__
        return f"vllm {installed_version('vllm')} {self.backend}: {impl}.forward_mqa + {builder}"
