"""The installed vLLM's own objects for one attention layer, built the way its model runner builds
them, without a model: a VllmConfig, a real `Attention` layer (which constructs the backend's
AttentionImpl with vLLM's own arguments and registers itself in the config's forward context), and
the backend's AttentionMetadataBuilder for the layer's KV-cache spec.

Why the real classes: the same kernel runs differently depending on what the builder decides per
step. vLLM 0.24's TritonAttentionImpl splits long contexts across programs for small decode batches
(seq_threshold_3D, softmax segment buffers from TritonAttentionMetadataBuilder: 16x slower at batch 1
without it, docs/gpu-facts.md §5); FA3 gets AOT scheduler metadata and, under full
CUDA graphs, a capped split count; FlashInfer plans its wrappers in build(). Calling the bare ops
would time something vLLM never runs.

What we construct mirrors vLLM's own attention benchmark (benchmarks/attention_benchmarks/runner.py
in vLLM's repository) and GPUModelRunner: a model config from a synthesized config.json (a one-layer
Llama-style text model with the shape's per-GPU heads: nothing is downloaded), the engine's default
scheduler limits for this GPU (EngineArgs defaults, see `engine_defaults`), a default
CompilationConfig whose CUDA-graph mode is then resolved against the backend's AttentionCGSupport
exactly as the model runner does, and the builder created from the layer's KV-cache spec at the
kernel block size (AttentionGroup.create_metadata_builders).

What differs between vLLM releases in how a cache is shaped and how the impl, builder and
CUDA-graph support are called is the release's adapter facts (attention/versions/adapter_facts.py,
picked by the installed vLLM's version); module paths and config keywords are found by feature
detection. Nothing here compares version strings. torch and vLLM are imported lazily.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from attnsel.attention.versions import AdapterFacts

from attnsel.attention.kernels.vllm.calls import (
    call_accepting,
    construct,
    keyword_call,
)
from attnsel.attention.kernels.vllm.mla_layer import (
    mla_layer,
    synthetic_mla_model_config,
)

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


class MissingBackend(KeyError):
    """The installed vLLM's AttentionBackendEnum has no member of that name."""

    def __str__(self) -> str:
        return str(self.args[0])


def backend_class(backend: str) -> Any:
    """vLLM's backend class for an AttentionBackendEnum name (raises ImportError, or MissingBackend
    where this release has no such backend, e.g. FLASHINFER_MLA_SPARSE_SM90 before 0.30)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum  # type: ignore

    try:
        member = AttentionBackendEnum[backend]
    except (KeyError, ValueError):  # the enum's metaclass raises ValueError("Unknown attention backend ...")
        from attnsel.attention.kernels.base import installed_version

        raise MissingBackend(f"vLLM {installed_version('vllm')} has no {backend} backend") from None
    return member.get_class()


def kernel_block_size(backend_cls: Any, block_size: int, kv_cache_spec: object = None) -> int:
    """The page size vLLM's kernels use for a --block-size (GPUModelRunner splits a cache block into
    kernel blocks with vllm.v1.worker.utils.select_common_block_size). Where that helper takes the
    layers' KV-cache specs (0.33: prepare_kernel_block_sizes passes each group's specs, and
    FLASH_ATTN answers from the spec: the SM90 FP8-KV FA4 kernel's 64-token page,
    _get_sm90_fa4_fp8_kv_block_size in vllm/v1/attention/backends/flash_attn.py) the layer's is passed."""
    try:
        from vllm.v1.worker.utils import select_common_block_size  # type: ignore
    except ImportError:
        from attnsel.attention.rules import (  # the same rule, without vLLM's helper
            MultipleOf,
            kernel_block_size_for,
        )

        sizes = [s if isinstance(s, int) else MultipleOf(s.base) for s in backend_cls.get_supported_kernel_block_sizes()]
        found = kernel_block_size_for(block_size, sizes)
        if found is None:
            raise ValueError(f"No common block size for {block_size}. ") from None  # vLLM's own message
        return found
    return int(call_accepting(select_common_block_size, block_size, [backend_cls], kv_cache_specs=[kv_cache_spec]))


def installed_facts() -> AdapterFacts:
    """The adapter facts of the installed vLLM's release (its version picks the profile); a
    release attnsel has none for cannot be driven (ValueError, one line)."""
    from attnsel.attention.versions import installed_adapter_facts

    installed, facts, _ = installed_adapter_facts()
    if facts is None:
        raise ValueError(f"no adapter facts for vLLM {installed or '(version unknown)'}: "
                         f"attention/versions has none for that release")
    return facts


def resolve_kv_cache_layout(config: Any, backend_cls: Any, notes: list[str]) -> None:
    """What the engine core does once in a release that lays caches out by KVCacheLayout (0.29+):
    the layout every backend supports, most preferred first, recorded in the cache config, where
    builders and impls read it (CacheConfig.get_resolved_kv_cache_layout)."""
    from vllm.v1.attention.backends import utils as U  # type: ignore

    layout = U.get_supported_kv_cache_layouts([backend_cls])[0]
    if getattr(config.cache_config, "kv_cache_layout", None) is None:
        U.record_kv_cache_layout(config.cache_config, layout.name)
    notes.append(f"KV cache layout {layout.name} (vLLM's resolution for this backend)")


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
    mla: MlaDims | None = None  # an MLA layer (vllm_mla.py): num_kv_heads 1, head_size = latent width

    def model_config_json(self) -> dict[str, object]:
        if self.mla is not None:
            return synthetic_mla_model_config(self)
        return synthetic_model_config(self.num_q_heads, self.num_kv_heads, self.head_size, self.dtype,
                                      self.max_model_len)


@dataclass(frozen=True)
class MlaDims:
    """The MLA sizes vLLM's MLAAttention layer is built with (DeepSeek-V3: 512, 64, 128, 128)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    index_topk: int | None = None  # sparse MLA (DeepSeek-V3.2: 2048): the layer is built use_sparse


@dataclass
class VllmStack:
    """A built stack: config, layer (with its impl), builder, and what vLLM resolved. The vLLM objects
    are the installed release's, whichever it is (untyped here: Any)."""

    spec: StackSpec
    vllm_config: Any
    layer: Any
    backend_cls: Any
    builder: Any
    kernel_block_size: int
    kv_cache_spec: Any
    cudagraph_support: str  # AttentionCGSupport name, from the builder class
    cudagraph_mode: str  # CUDAGraphMode name after vLLM resolved it against that support
    facts: AdapterFacts  # the release's AdapterFacts (attention/versions/adapter_facts.py)
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
    """Builds VllmStacks in one worker process, each from a config.json synthesized for its head layout."""

    def __init__(self, device: str = "cuda", facts: AdapterFacts | None = None) -> None:
        self.device = device
        self._layer_count = 0
        self._facts = facts

    @property
    def facts(self) -> AdapterFacts:
        """The installed release's adapter facts (given, or asked of its version object once)."""
        if self._facts is None:
            self._facts = installed_facts()
        return self._facts

    def vllm_config(self, spec: StackSpec) -> Any:
        from vllm import config as C  # type: ignore

        # vLLM reads config.json while ModelConfig is built and not after: the folder is removed
        # at once (tune's workers end with os._exit, so a folder kept for later would be left in /tmp)
        with tempfile.TemporaryDirectory(prefix="attnsel-model-") as folder:
            with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
                json.dump(spec.model_config_json(), fh)
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
            layer = self._layer(spec, config, backend_cls)
            kv_spec = layer.get_kv_cache_spec(config)
            # inside: FLASH_ATTN's supported kernel sizes read the current config (hybrid models)
            kernel_bs = kernel_block_size(backend_cls, spec.block_size, kv_spec)
            if kernel_bs != spec.block_size and hasattr(kv_spec, "copy_with_new_block_size"):
                kv_spec = kv_spec.copy_with_new_block_size(kernel_bs)
            builder_cls = backend_cls.get_builder_cls()
            facts = self.facts
            support = keyword_call(builder_cls.get_cudagraph_support, facts.cudagraph_support, config, kv_spec)
            mode = self._resolve_cudagraph_mode(config, support, spec.backend, notes)
            self._apply_required_layout(backend_cls, notes)
            if facts.shape_from == "kv_cache_layouts":
                resolve_kv_cache_layout(config, backend_cls, notes)
            builder = builder_cls(kv_spec, [layer.layer_name], config, torch.device(self.device))
            dispatcher = self._dispatcher(config, mode, notes)
        return VllmStack(spec=spec, vllm_config=config, layer=layer, backend_cls=backend_cls, builder=builder,
                         kernel_block_size=kernel_bs, kv_cache_spec=kv_spec,
                         cudagraph_support=getattr(support, "name", str(support)),
                         cudagraph_mode=getattr(mode, "name", str(mode)), dispatcher=dispatcher, notes=notes,
                         facts=facts)

    def _layer(self, spec: StackSpec, config: Any, backend_cls: Any) -> Any:
        """vLLM's own Attention layer (MLAAttention for an MLA spec, vllm_mla.py) on the GPU, built
        under the model dtype as model code does."""
        import torch

        self._layer_count += 1  # the forward context refuses duplicate layer names
        prefix = f"model.layers.{self._layer_count}.self_attn.attn"
        previous = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, spec.dtype))
        try:
            with torch.device(self.device):
                if spec.mla is not None:
                    return mla_layer(spec, config, backend_cls, prefix, self.facts)
                return call_accepting(attention_layer_class(), spec.num_q_heads, spec.head_size,
                                      spec.head_size ** -0.5, num_kv_heads=spec.num_kv_heads,
                                      cache_config=config.cache_config, prefix=prefix, attn_backend=backend_cls)
        finally:
            torch.set_default_dtype(previous)

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
