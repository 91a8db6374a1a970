"""The installed vLLM's own objects for one attention layer, built the way its model runner builds
them, without a model: a VllmConfig, a real `Attention` layer (which constructs the backend's
AttentionImpl with vLLM's own arguments and registers itself in the config's forward context), and
the backend's AttentionMetadataBuilder for the layer's KV-cache spec.

Why the real classes: the same kernel runs differently depending on what the builder decides per
step. vLLM 0.24's TritonAttentionImpl splits long contexts across programs for small decode batches
(seq_threshold_3D, softmax segment buffers from TritonAttentionMetadataBuilder: 16x slower at batch 1
without it, gpu-facts "vLLM 0.24.0 on the H100"); FA3 gets AOT scheduler metadata and, under full
CUDA graphs, a capped split count; FlashInfer plans its wrappers in build(). Calling the bare ops
would time something vLLM never runs.

What we construct mirrors vLLM's own attention benchmark (benchmarks/attention_benchmarks/runner.py
in vLLM's repository) and GPUModelRunner: a model config from a synthesized config.json (a one-layer
Llama-style text model with the shape's per-GPU heads: nothing is downloaded), the engine's default
scheduler limits for this GPU (EngineArgs defaults, see `engine_defaults`), a default
CompilationConfig whose CUDA-graph mode is then resolved against the backend's AttentionCGSupport
exactly as the model runner does, and the builder created from the layer's KV-cache spec at the
kernel block size (AttentionGroup.create_metadata_builders).

Everything that differs between vLLM releases is found by feature detection (module paths, keyword
names), never by comparing version strings. torch and vLLM are imported lazily.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

GIB = 1 << 30

# vLLM's EngineArgs defaults for `vllm serve` (UsageContext.OPENAI_API_SERVER), 0.24
# engine/arg_utils.py `_get_default_max_num_seqs_and_batched_tokens`: GPUs with >= 70 GiB that are
# not A100s get max_num_seqs 1024 / max_num_batched_tokens 8192, others 256 / 2048. They decide the
# CUDA-graph capture sizes (min(2 * max_num_seqs, 512, max_num_batched_tokens)) and the builders'
# persistent buffer sizes.
LARGE_GPU_DEFAULTS = (1024, 8192)
SMALL_GPU_DEFAULTS = (256, 2048)

# Module paths of the attention layer across releases (0.18+ moved it under model_executor).
ATTENTION_LAYER_MODULES = ("vllm.model_executor.layers.attention", "vllm.attention.layer", "vllm.attention")


def engine_defaults(total_memory_bytes: int, device_name: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that `vllm serve` would default to on this GPU.

    >>> engine_defaults(80 * GIB, "NVIDIA H100 80GB HBM3")
    (1024, 8192)
    >>> engine_defaults(80 * GIB, "NVIDIA A100-SXM4-80GB")
    (256, 2048)
    """
    if total_memory_bytes >= 70 * GIB and "a100" not in device_name.lower():
        return LARGE_GPU_DEFAULTS
    return SMALL_GPU_DEFAULTS


def synthetic_model_config(num_q_heads: int, num_kv_heads: int, head_size: int, dtype: str,
                           max_model_len: int) -> dict:
    """A one-layer Llama-style config.json with the per-GPU attention shape: what ModelConfig needs
    to answer get_num_attention_heads / get_num_kv_heads / get_head_size / dtype for this shape."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": num_q_heads * head_size,
        "intermediate_size": 256,
        "num_attention_heads": num_q_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_size,
        "num_hidden_layers": 1,
        "vocab_size": 1024,
        "max_position_embeddings": max_model_len,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "torch_dtype": dtype,
    }


def construct(cls: Any, **kwargs: Any) -> Any:
    """`cls(**kwargs)` keeping only the keywords this release's class accepts (config dataclasses
    gain and lose fields between releases)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return cls(**kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return cls(**kwargs)
    return cls(**{k: v for k, v in kwargs.items() if k in params})


def call_accepting(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` dropping keywords the installed vLLM's function does not take."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args, **kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **kwargs)
    return fn(*args, **{k: v for k, v in kwargs.items() if k in params})


def attention_layer_class() -> Any:
    for module_name in ATTENTION_LAYER_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        layer_cls = getattr(module, "Attention", None)
        if layer_cls is not None:
            return layer_cls
    raise ImportError(f"no vLLM Attention layer class in {', '.join(ATTENTION_LAYER_MODULES)}")


def backend_class(backend: str) -> Any:
    """vLLM's backend class for an AttentionBackendEnum name (raises ImportError/KeyError)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum  # type: ignore

    return AttentionBackendEnum[backend].get_class()


def kernel_block_size(backend_cls: Any, block_size: int) -> int:
    """The page size vLLM's kernels use for a --block-size (GPUModelRunner splits a cache block into
    kernel blocks with vllm.v1.worker.utils.select_common_block_size)."""
    try:
        from vllm.v1.worker.utils import select_common_block_size  # type: ignore
    except ImportError:
        from .base import kernel_block_size_for

        sizes = [s if isinstance(s, int) else s.base for s in backend_cls.get_supported_kernel_block_sizes()]
        found = kernel_block_size_for(block_size, sizes)
        if found is None:
            raise ValueError(f"No common block size for {block_size}. ")
        return found
    return int(select_common_block_size(block_size, [backend_cls]))


@dataclass
class StackSpec:
    """What one stack is built for (the per-GPU attention shape, one framework block size)."""

    backend: str
    num_q_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str  # "bfloat16" | "float16" | "float32"
    kv_cache_dtype: str
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int


@dataclass
class VllmStack:
    """A built stack: config, layer (with its impl), builder, and what vLLM resolved."""

    spec: StackSpec
    vllm_config: Any
    layer: Any
    backend_cls: Any
    builder: Any
    kernel_block_size: int
    kv_cache_spec: Any
    cudagraph_support: str  # AttentionCGSupport name, from the builder class
    cudagraph_mode: str  # CUDAGraphMode name after vLLM resolved it against that support
    dispatcher: Any = None
    notes: list[str] = field(default_factory=list)

    @contextmanager
    def active(self) -> Iterator[None]:
        """The config vLLM code reads while it runs (get_current_vllm_config())."""
        from vllm.config import set_current_vllm_config  # type: ignore

        with set_current_vllm_config(self.vllm_config):
            yield

    def launch_for(self, num_tokens: int, uniform_decode: bool) -> tuple[str, str]:
        """("graph" | "eager", why): what vLLM's CudagraphDispatcher answers for this batch. FULL
        means the attention kernels run inside a captured graph; PIECEWISE and NONE both run the
        attention op eagerly (piecewise graphs split at attention)."""
        if self.dispatcher is None:
            return "eager", f"vLLM's CUDA-graph mode here is {self.cudagraph_mode}"
        runtime_mode, descriptor = call_accepting(self.dispatcher.dispatch, num_tokens, uniform_decode=uniform_decode)
        name = getattr(runtime_mode, "name", str(runtime_mode))
        padded = getattr(descriptor, "num_tokens", num_tokens)
        pad = f", padded to {padded} tokens" if padded != num_tokens else ""
        why = (f"vLLM's CudagraphDispatcher: {name} for {num_tokens} tokens"
               f"{' (uniform decode)' if uniform_decode else ''}{pad}; mode {self.cudagraph_mode}, "
               f"{self.spec.backend} {self.cudagraph_support}")
        return ("graph" if name == "FULL" else "eager"), why


class StackBuilder:
    """Builds VllmStacks in one worker process (one synthesized model folder per head layout)."""

    def __init__(self, device: str = "cuda"):
        self.device = device
        self._folders: dict[tuple, str] = {}
        self._layer_count = 0

    def model_folder(self, spec: StackSpec) -> str:
        key = (spec.num_q_heads, spec.num_kv_heads, spec.head_size, spec.dtype, spec.max_model_len)
        if key not in self._folders:
            folder = tempfile.mkdtemp(prefix="attnsel-model-")
            with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
                json.dump(synthetic_model_config(spec.num_q_heads, spec.num_kv_heads, spec.head_size,
                                                 spec.dtype, spec.max_model_len), fh)
            self._folders[key] = folder
        return self._folders[key]

    def vllm_config(self, spec: StackSpec) -> Any:
        from vllm import config as C  # type: ignore

        folder = self.model_folder(spec)
        model = construct(C.ModelConfig, model=folder, tokenizer=folder, skip_tokenizer_init=True,
                          dtype=spec.dtype, max_model_len=spec.max_model_len, seed=0)
        cache = construct(C.CacheConfig, block_size=spec.block_size, cache_dtype=spec.kv_cache_dtype)
        scheduler = construct(C.SchedulerConfig, max_num_seqs=spec.max_num_seqs,
                              max_num_batched_tokens=spec.max_num_batched_tokens, max_model_len=spec.max_model_len,
                              is_encoder_decoder=False, enable_chunked_prefill=True)
        parts = dict(model_config=model, cache_config=cache, scheduler_config=scheduler,
                     parallel_config=C.ParallelConfig(), compilation_config=C.CompilationConfig())
        if hasattr(C, "AttentionConfig"):
            parts["attention_config"] = construct(C.AttentionConfig, backend=spec.backend)
        return construct(C.VllmConfig, **parts)

    def build(self, spec: StackSpec) -> VllmStack:
        import torch

        backend_cls = backend_class(spec.backend)
        config = self.vllm_config(spec)
        notes: list[str] = []
        from vllm.config import set_current_vllm_config  # type: ignore

        with set_current_vllm_config(config):
            # inside: FLASH_ATTN's supported kernel sizes read the current config (hybrid models)
            kernel_bs = kernel_block_size(backend_cls, spec.block_size)
            layer = self._layer(spec, config, backend_cls)
            kv_spec = layer.get_kv_cache_spec(config)
            if kernel_bs != spec.block_size and hasattr(kv_spec, "copy_with_new_block_size"):
                kv_spec = kv_spec.copy_with_new_block_size(kernel_bs)
            builder_cls = backend_cls.get_builder_cls()
            support = call_accepting(builder_cls.get_cudagraph_support, config, kv_spec)
            mode = self._resolve_cudagraph_mode(config, support, spec.backend, notes)
            self._apply_required_layout(backend_cls, notes)
            builder = builder_cls(kv_spec, [layer.layer_name], config, torch.device(self.device))
            dispatcher = self._dispatcher(config, mode, notes)
        return VllmStack(spec=spec, vllm_config=config, layer=layer, backend_cls=backend_cls, builder=builder,
                         kernel_block_size=kernel_bs, kv_cache_spec=kv_spec,
                         cudagraph_support=getattr(support, "name", str(support)),
                         cudagraph_mode=getattr(mode, "name", str(mode)), dispatcher=dispatcher, notes=notes)

    def _layer(self, spec: StackSpec, config: Any, backend_cls: Any) -> Any:
        """vLLM's own Attention layer on the GPU, built under the model dtype as model code does."""
        import torch

        layer_cls = attention_layer_class()
        self._layer_count += 1  # the forward context refuses duplicate layer names
        prefix = f"model.layers.{self._layer_count}.self_attn.attn"
        previous = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, spec.dtype))
        try:
            with torch.device(self.device):
                layer = call_accepting(layer_cls, spec.num_q_heads, spec.head_size, spec.head_size ** -0.5,
                                       num_kv_heads=spec.num_kv_heads, cache_config=config.cache_config,
                                       prefix=prefix, attn_backend=backend_cls)
        finally:
            torch.set_default_dtype(previous)
        return layer

    @staticmethod
    def _resolve_cudagraph_mode(config: Any, support: Any, backend: str, notes: list[str]) -> Any:
        """GPUModelRunner._check_and_update_cudagraph_mode for a model whose only attention backend
        is this one: vLLM's own resolution of the default mode against the builder's support."""
        compilation = config.compilation_config
        resolve = getattr(compilation, "resolve_cudagraph_mode_and_sizes", None)
        if resolve is None:
            notes.append("this vLLM has no resolve_cudagraph_mode_and_sizes: its default CUDA-graph mode is used as is")
            return compilation.cudagraph_mode
        return call_accepting(resolve, support, backend, uniform_decode_query_len=1, tensor_parallel_size=1,
                              kv_cache_config=None, max_num_reqs=config.scheduler_config.max_num_seqs)

    @staticmethod
    def _apply_required_layout(backend_cls: Any, notes: list[str]) -> None:
        required = getattr(backend_cls, "get_required_kv_cache_layout", lambda: None)()
        if required is None:
            return
        from vllm.v1.attention.backends import utils as U  # type: ignore

        U.set_kv_cache_layout(required)
        if hasattr(U.get_kv_cache_layout, "cache_clear"):
            U.get_kv_cache_layout.cache_clear()
        notes.append(f"KV cache layout {required} (required by the backend on this GPU)")

    @staticmethod
    def _dispatcher(config: Any, mode: Any, notes: list[str]) -> Any:
        try:
            from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher  # type: ignore
        except ImportError:
            notes.append("this vLLM has no CudagraphDispatcher: decode launch mode taken from the recorded rule")
            return None
        dispatcher = CudagraphDispatcher(config)
        call_accepting(dispatcher.initialize_cudagraph_keys, mode, uniform_decode_query_len=1)
        return dispatcher


def common_metadata(batch: Any, device: Any) -> Any:
    """vLLM's CommonAttentionMetadata for a PagedBatch (decodes first, as vLLM orders them), filling
    only the fields this release's dataclass has."""
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata  # type: ignore

    seq_lens, q_lens = batch.host_lists()
    query_start_loc_cpu = torch.tensor([0] + list(_cumulative(q_lens)), dtype=torch.int32)
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    computed_cpu = seq_lens_cpu - torch.tensor(q_lens, dtype=torch.int32)
    num_tokens = int(sum(q_lens))
    values = dict(
        query_start_loc=query_start_loc_cpu.to(device), query_start_loc_cpu=query_start_loc_cpu,
        seq_lens=batch.seq_lens, seq_lens_cpu=seq_lens_cpu, _seq_lens_cpu=seq_lens_cpu,
        num_computed_tokens_cpu=computed_cpu, _num_computed_tokens_cpu=computed_cpu,
        seq_lens_cpu_upper_bound=seq_lens_cpu,
        num_reqs=len(seq_lens), num_actual_tokens=num_tokens, max_query_len=max(q_lens), max_seq_len=max(seq_lens),
        block_table_tensor=batch.block_table,
        # the forward pass only reads the cache; vLLM writes K/V in a separate step (not timed)
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device=device),
        causal=True,
    )
    names = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    return CommonAttentionMetadata(**{k: v for k, v in values.items() if k in names})


def _cumulative(values: list[int]) -> Iterator[int]:
    total = 0
    for v in values:
        total += v
        yield total


def kv_cache_tensor(stack: VllmStack, batch: Any) -> Any:
    """The layer's KV cache in the backend's own shape and physical layout (get_kv_cache_shape +
    get_kv_cache_stride_order, as GPUModelRunner allocates it), holding the batch's K and V."""
    import torch

    cls = stack.backend_cls
    nb, bs, hkv, d = batch.key_cache.shape
    shape = tuple(call_accepting(cls.get_kv_cache_shape, nb, bs, hkv, d,
                                 cache_dtype_str=stack.spec.kv_cache_dtype))
    try:
        order = tuple(cls.get_kv_cache_stride_order())
    except (AttributeError, NotImplementedError):
        order = tuple(range(len(shape)))
    physical = torch.empty(tuple(shape[i] for i in order), dtype=batch.key_cache.dtype, device=batch.key_cache.device)
    cache = physical.permute(*[order.index(i) for i in range(len(order))])
    kv_dim = kv_axis(shape, nb)
    cache.select(kv_dim, 0).copy_(batch.key_cache)
    cache.select(kv_dim, 1).copy_(batch.value_cache)
    return cache


def kv_axis(shape: tuple, num_blocks: int) -> int:
    """Which axis of a 5-D vLLM KV-cache shape separates K from V: (2, nb, ...) or (nb, 2, ...).

    >>> kv_axis((2, 10, 16, 8, 128), 10)
    0
    >>> kv_axis((10, 2, 16, 8, 128), 10)
    1
    """
    if len(shape) != 5:
        raise ValueError(f"expected a 5-D KV cache shape, got {shape}")
    if shape[0] == 2 and shape[1] == num_blocks:
        return 0
    if shape[1] == 2 and shape[0] == num_blocks:
        return 1
    raise ValueError(f"cannot tell the K/V axis of KV cache shape {shape} with {num_blocks} blocks")
