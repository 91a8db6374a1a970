"""vLLM's MLAAttention layer as tune builds it for an MLA backend (the stack's layer when its spec
has MLA sizes): a one-layer DeepSeek-V3-style config.json, the layer with the spec's sizes and no
weights, and what sparse MLA needs while it is built. torch and vLLM are imported inside the
functions: this module loads with the stack, before either is needed.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from attnsel.attention.kernels.vllm.calls import call_accepting

MLA_LAYER_MODULES = ("vllm.model_executor.layers.attention.mla_attention", "vllm.model_executor.layers.attention",
                     "vllm.attention.layer")


def synthetic_mla_model_config(spec: Any) -> dict:
    """A one-layer DeepSeek-V3-style config.json with the spec's MLA sizes and per-GPU heads."""
    mla = spec.mla
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 1024,
        "intermediate_size": 256,
        "moe_intermediate_size": 256,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "num_attention_heads": spec.num_q_heads,
        "num_key_value_heads": spec.num_q_heads,
        "kv_lora_rank": mla.kv_lora_rank,
        "qk_rope_head_dim": mla.qk_rope_head_dim,
        "qk_nope_head_dim": mla.qk_nope_head_dim,
        "v_head_dim": mla.v_head_dim,
        "q_lora_rank": 1536,
        "num_hidden_layers": 1,
        "vocab_size": 1024,
        "max_position_embeddings": spec.max_model_len,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "torch_dtype": spec.dtype,
        # sparse MLA: vLLM's use_sparse is hasattr(hf_config, "index_topk"); the sparse builders size
        # their buffers from it (sparse_mla_attention.py SparseMLACommonMetadataBuilder)
        **({"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
            "index_topk": mla.index_topk} if mla.index_topk else {}),
    }


def mla_layer_class() -> Any:
    for module_name in MLA_LAYER_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        layer_cls = getattr(module, "MLAAttention", None)
        if layer_cls is not None:
            return layer_cls
    raise ImportError(f"no vLLM MLAAttention layer class in {', '.join(MLA_LAYER_MODULES)}")


def mla_scale(mla: Any) -> float:
    """The softmax scale DeepSeek's model code passes: qk_head_dim ** -0.5 (its YaRN mscale factor
    is left out: a scale value changes no kernel's speed)."""
    return (mla.qk_nope_head_dim + mla.qk_rope_head_dim) ** -0.5


def mla_layer(spec: Any, config: Any, backend_cls: Any, prefix: str, facts: Any) -> Any:
    """vLLM's MLAAttention with the spec's sizes and no kv_b_proj (only forward_mha and
    process_weights_after_loading read it; neither runs here)."""
    from types import SimpleNamespace

    mla = spec.mla
    # no weights either way; a release whose __init__ marks kv_b_proj gets an object to mark (adapter facts)
    kv_b_proj = SimpleNamespace() if facts.mla_kv_b_proj == "placeholder" else None
    sparse = sparse_layer_arguments(spec, config) if mla.index_topk else {}
    with tp_world_of_one() if sparse else contextlib.nullcontext():
        return call_accepting(
            mla_layer_class(), num_heads=spec.num_q_heads, scale=mla_scale(mla), qk_nope_head_dim=mla.qk_nope_head_dim,
            qk_rope_head_dim=mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim, q_lora_rank=1536,
            kv_lora_rank=mla.kv_lora_rank, kv_b_proj=kv_b_proj, cache_config=config.cache_config, prefix=prefix,
            attn_backend=backend_cls, **sparse,
        )


@contextlib.contextmanager
def tp_world_of_one() -> Iterator[None]:
    """vLLM's sparse MLA impls ask the tensor-parallel group's size while they are built (from 0.27:
    model_executor/layers/attention/sparse_mla_attention.py, num_heads_total = num_heads x
    get_tensor_model_parallel_world_size(), read only by Blackwell's masked-MHA prefill path, which
    tune does not time). A tune worker is one process with no TP group; where vLLM's group is not set
    up, it answers 1 while the layer is built, as a TP=1 engine's group would. Releases without that
    module or call are left as they are."""
    try:
        from vllm.distributed import parallel_state  # type: ignore
        from vllm.model_executor.layers.attention import (
            sparse_mla_attention as sparse_module,  # type: ignore
        )
    except ImportError:
        yield
        return
    asked = getattr(sparse_module, "get_tensor_model_parallel_world_size", None)
    if asked is None or parallel_state.model_parallel_is_initialized():
        yield
        return
    sparse_module.get_tensor_model_parallel_world_size = lambda: 1
    try:
        yield
    finally:
        sparse_module.get_tensor_model_parallel_world_size = asked


def sparse_layer_arguments(spec: Any, config: Any) -> dict:
    """What DeepSeek-V3.2's model code gives a sparse MLAAttention (vllm/model_executor/models/
    deepseek_v2.py: one topk_indices_buffer of (max_num_batched_tokens, index_topk) int32 shared by
    every layer, use_sparse=True; the indexer that fills it is not built: tune fills the buffer with
    the batch's top-k, kernels/mla.py). The sparse impls take scratch space from the engine's
    workspace manager (FlashMLASparseImpl's q_concat_buffer), which GPUModelRunner sets up first."""
    import torch

    try:
        from vllm.v1.worker import workspace  # type: ignore
    except ImportError:
        workspace = None
    if workspace is not None and not workspace.is_workspace_manager_initialized():
        workspace.init_workspace_manager(torch.empty(0).device)  # the current (layer build) device
    buffer = torch.full((config.scheduler_config.max_num_batched_tokens, spec.mla.index_topk), -1, dtype=torch.int32)
    return dict(use_sparse=True, topk_indices_buffer=buffer)
