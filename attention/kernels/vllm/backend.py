"""FLASH_ATTN, FLASHINFER and TRITON_ATTN run by the installed vLLM's own backend classes.

One call of a prepared kernel is `layer.impl.forward(layer, q, k, v, kv_cache, metadata, output)`
(keyword names and the cache layout from the installed release's adapter facts, stack.py):
vLLM's AttentionImpl with the metadata its own builder built for the batch (vllm_stack.py explains
what is constructed and why). That is the attention op vLLM's model runner calls per layer and step,
minus the KV-cache write, which vLLM does in a separate op (not timed; our cache is pre-filled).

Provider choice (registry.py): whenever vLLM is installed this adapter comes first for these three
backends. If vLLM's classes cannot be driven for a shape (prepare raises), the worker falls back to
the next provider and every such row says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from attnsel.attention.kernels.base import (
    PreparedKernel,
    cuda_device_reason,
    installed_version,
    module_missing,
    paged,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnsel.attention.kernels.base import Batch, HasKind, PrebuildSummary
    from attnsel.attention.kernels.paged import Workload
    from attnsel.attention.kernels.vllm.stack import StackBuilder, StackSpec, VllmStack

DRIVEN_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
# Backends whose impl.forward launches vLLM's Triton kernels with `kernel[grid](...)`, compiled at first
# call and without a multi-config autotuner (vllm/v1/attention/ops/triton_unified_attention.py:1090 and
# :1170 in 0.26): they can be compiled ahead, in parallel (base.TritonPrecompilingAdapter).
TRITON_JIT_BACKENDS = ("TRITON_ATTN",)
# Developer switch: time the stand-ins even though vLLM is installed (to measure them against it).
STANDINS_ENV = "ATTNSEL_TUNE_STANDINS"
# Longest context a stack is built for unless a batch needs more (Llama-3.1's max_position_embeddings).
DEFAULT_MAX_MODEL_LEN = 131072


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _synchronize(device: torch.device | str) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def _device_memory_and_name(device: torch.device) -> tuple[int, str]:
    """What vLLM's engine defaults read (total memory, name); on CPU (bench/tools' CPU check of
    this adapter) an H100's, so the stack is the one `vllm serve` builds there."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        props = torch.cuda.get_device_properties(device)
        return int(props.total_memory), str(props.name)
    return 80 * 2**30, "NVIDIA H100 80GB HBM3"


def class_reason(cls: Any, w: Workload) -> str | None:
    """vLLM's own class checks for a workload, in vLLM's words (validate_configuration's first
    reasons, docs/vllm-rules.md §2): head size, dtype, KV-cache dtype. `cls`: the installed vLLM's
    backend class (any release's: untyped here)."""
    import torch

    if not cls.supports_head_size(w.head_size):
        return "head_size not supported"
    supported = getattr(cls, "supported_dtypes", None)
    if supported is not None and getattr(torch, w.dtype) not in supported:
        return "dtype not supported"
    kv = getattr(w, "kv_cache_dtype", "auto")
    check = getattr(cls, "supports_kv_cache_dtype", None)
    if kv != "auto" and check is not None and not check(kv):
        return "kv_cache_dtype not supported"
    return None


def query_as_vllm_hands_it(stack: VllmStack, query: torch.Tensor) -> tuple[torch.Tensor, str | None]:
    """The query the impl receives: Attention.forward quantizes it to fp8 with layer._q_scale first
    when the cache is fp8 and the impl takes quantized queries (supports_quant_query_input: FA3,
    vLLM's Triton kernel on CUDA, FlashInfer's TRT-LLM path). Done here, once, outside the timed
    call: in vLLM it is a separate op before the attention op (fused by torch.compile into the
    projection before it)."""
    layer = stack.layer
    quant = getattr(layer, "query_quant", None)
    if quant is None or not getattr(layer.impl, "supports_quant_query_input", False):
        return query, None
    quantized, _ = quant(query, layer._q_scale)
    return quantized.view(query.shape), (f"query quantized to {quantized.dtype} with layer._q_scale by vLLM's "
                                         f"QuantFP8 before the timed call, as Attention.forward does")


class VllmBackendAdapter:
    """vLLM's own AttentionImpl + AttentionMetadataBuilder for one backend."""

    name = "vllm"
    drives_vllm_classes = True
    driven_backends: tuple[str, ...] = DRIVEN_BACKENDS

    def __init__(self, backend: str, *, device: str = "cuda") -> None:
        if backend not in self.driven_backends:
            raise ValueError(f"{backend} is not driven by {type(self).__name__} "
                             f"(only {', '.join(self.driven_backends)})")
        self.backend = backend
        self.device = device
        self._builder: StackBuilder | None = None
        self._stacks: dict[tuple[tuple[str, object], ...], VllmStack] = {}
        self._class_error: str | None = None

    @property
    def precompiles_triton(self) -> bool:
        """base.TritonPrecompilingAdapter: TRITON_ATTN's forward JIT-compiles vLLM's Triton kernels."""
        return self.backend in TRITON_JIT_BACKENDS

    # -- KernelAdapter ---------------------------------------------------------------------------

    def availability(self) -> str | None:
        missing = self.availability_without_cuda()
        if missing:
            return missing
        # device "cpu": bench/tools/vllm_cpu_check.py and CI's fake vLLM tree (no CUDA there)
        reason = None if self.device == "cpu" else cuda_device_reason(self.device)
        if reason:
            return reason
        try:
            from attnsel.attention.kernels.vllm.stack import backend_class

            backend_class(self.backend)
        except Exception as exc:  # noqa: BLE001 -- ImportError, missing extension, CUDA init errors
            return f"vLLM's {self.backend} backend class cannot be loaded: {type(exc).__name__}: {str(exc)[:200]}"
        return None

    def preload_modules(self) -> list[str]:
        """What availability()/prepare() import, for a pre-spawned worker to import before "go"
        (`import vllm` took 18.5 s on an H100): never creates a CUDA context itself."""
        if self.availability_without_cuda() is not None:
            return []
        from vllm.v1.attention.backends.registry import AttentionBackendEnum  # type: ignore

        try:
            backend_module = str(AttentionBackendEnum[self.backend].value).rsplit(".", 1)[0]
        except (KeyError, ValueError):  # a backend this release lacks: its rows say so, nothing to preload
            return []
        from attnsel.attention.kernels.vllm.stack import ATTENTION_LAYER_MODULES

        return ["vllm.config", backend_module, ATTENTION_LAYER_MODULES[0], "vllm.v1.worker.utils",
                "vllm.v1.cudagraph_dispatcher"]

    def availability_without_cuda(self) -> str | None:
        if os.environ.get(STANDINS_ENV) == "1":
            return f"skipped: {STANDINS_ENV}=1 asks for the stand-ins (bench/tools/compare_runs.py)"
        return module_missing("vllm")

    def unsupported_reason(self, w: Workload, block_size: int, device: str) -> str | None:
        """vLLM's own class checks, in vLLM's words (docs/vllm-rules.md §2)."""
        try:
            from attnsel.attention.kernels.vllm.stack import backend_class

            cls = backend_class(self.backend)
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        return class_reason(cls, w) or (None if str(device) == "cpu" == self.device else cuda_device_reason(device))

    def prepare(self, batch: Batch) -> PreparedKernel:
        import torch

        from attnsel.attention.kernels import paged as paged_batches
        from attnsel.attention.kernels.vllm.calls import keyword_arguments, keyword_call
        from attnsel.attention.kernels.vllm.fp8_faults import (
            native_decode_q_scale_fault,
        )
        from attnsel.attention.kernels.vllm.inputs import (
            common_metadata,
            fp8_format_the_impl_reads,
            kv_cache_tensor,
            set_layer_scales,
        )

        b = paged(batch)
        started = time.perf_counter()
        stack = self.stack_for(b)
        kb = paged_batches.split_into_kernel_blocks(b, stack.kernel_block_size)
        device = b.query.device
        with stack.active():  # the builder and the cache layout read the current config
            notes = set_layer_scales(stack.layer, b)
            metadata = keyword_call(stack.builder.build, stack.facts.builder_build, 0, common_metadata(kb, device))
            kv_cache = kv_cache_tensor(stack, kb)
            read_as = fp8_format_the_impl_reads(stack, kb.key_cache.dtype)
            if read_as is not None:
                notes.append(f"vLLM's {self.backend} writes and reads a {b.kv_cache_dtype} cache as {read_as}: "
                             f"filled that way here, as vLLM fills it")
            query, quant_note = query_as_vllm_hands_it(stack, b.query)
        fault = native_decode_q_scale_fault(self.backend, stack.layer, metadata, getattr(b, "kv_cache_dtype", "auto"))
        num_tokens = int(b.query.shape[0])
        # the forward pass reads K/V from the cache; the new-token K/V arguments are only read by
        # encoder attention and DCP (not timed here)
        new_kv = torch.zeros(num_tokens, b.num_kv_heads, b.head_size, dtype=b.query.dtype, device=device)
        out = torch.empty_like(b.query)  # vLLM's output keeps the model dtype when the query is fp8
        forward_arguments = keyword_arguments(stack.facts.impl_forward, stack.layer, query, new_kv, new_kv, kv_cache,
                                              metadata, out)
        forward = stack.layer.impl.forward

        def run() -> torch.Tensor:
            forward(**forward_arguments)
            return out

        run()
        _synchronize(device)
        setup = time.perf_counter() - started
        out.fill_(float("nan"))
        uniform_decode = b.num_decodes == b.batch
        launch = stack.launch_for(num_tokens, uniform_decode)
        return PreparedKernel(
            run=run, output=lambda: out, provider=self.provider_text(stack),
            kernel_block_size=stack.kernel_block_size, setup_seconds=setup,
            notes=tuple(stack.notes + notes + ([quant_note] if quant_note else [])),
            poison_output=lambda: out.fill_(float("nan")),
            writes_into_given_output=True,
            # vllm_fault: why vLLM's own output misses the reference at these scales (fp8_faults.py);
            # bench says it on a row that fails the check
            details={**self.details(stack, metadata, launch, kv_cache), "query_dtype": str(query.dtype),
                     **({"vllm_fault": fault} if fault else {})},
        )

    def prebuild(self, workloads: Sequence[HasKind | str], *, dtype: str, head_size: int,
                 num_q_heads: int | None = None, num_kv_heads: int | None = None, kv_cache_dtype: str = "auto",
                 capability: tuple[int, int] | list[int] | None = None) -> PrebuildSummary:
        """FLASHINFER: compile the JIT modules vLLM's FlashInfer wrappers will plan (the same
        BatchDecode(tensor cores) / BatchPrefill plans as the direct adapter, in the flashinfer
        vLLM imports) before "go", CPU only (base.PrebuildingAdapter). Other backends: nothing."""
        if self.backend != "FLASHINFER":
            return {"modules": [], "built": 0, "cached": 0, "error": None}
        from attnsel.attention.kernels.flashinfer_adapter import FlashInferAdapter

        return FlashInferAdapter(use_tensor_cores=True).prebuild(
            workloads, dtype=dtype, head_size=head_size, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
            kv_cache_dtype=kv_cache_dtype, capability=capability)

    # -- helpers ---------------------------------------------------------------------------------

    def stack_spec(self, b: Batch) -> StackSpec:
        from attnsel.attention.kernels.paged import dtype_name
        from attnsel.attention.kernels.vllm.stack import StackSpec, engine_defaults

        seq_lens, q_lens = b.host_lists()
        max_len = max(DEFAULT_MAX_MODEL_LEN, _round_up(max(seq_lens), 1024))
        max_seqs, max_tokens = engine_defaults(*_device_memory_and_name(b.query.device))
        return StackSpec(
            backend=self.backend, num_q_heads=b.num_q_heads, num_kv_heads=b.num_kv_heads, head_size=b.head_size,
            dtype=dtype_name(b.query), kv_cache_dtype=getattr(b, "kv_cache_dtype", "auto"),
            block_size=b.block_size, max_model_len=max_len,
            # a batch beyond the engine's limits still has to fit the builder's persistent buffers
            max_num_seqs=max(max_seqs, b.batch), max_num_batched_tokens=max(max_tokens, sum(q_lens)),
        )

    def stack_for(self, b: Batch) -> VllmStack:
        from attnsel.attention.kernels.vllm.stack import StackBuilder

        spec = self.stack_spec(b)
        key = tuple(sorted(vars(spec).items()))
        if key not in self._stacks:
            if self._builder is None:
                self._builder = StackBuilder(self.device)
            self._stacks = {key: self._builder.build(spec)}  # one live stack: builders hold GPU buffers
        return self._stacks[key]

    def provider_text(self, stack: VllmStack) -> str:
        impl = type(stack.layer.impl).__name__
        builder = type(stack.builder).__name__
        version = getattr(stack.layer.impl, "vllm_flash_attn_version", None)
        fa = f", FA{version}" if version else ""
        return f"vllm {installed_version('vllm')} {self.backend}: {impl}.forward + {builder}{fa}"

    def details(self, stack: VllmStack, metadata: object, launch: tuple[str, str],
                kv_cache: torch.Tensor) -> dict[str, object]:
        """What a row records of vLLM's run (`metadata`: the release's builder output, untyped)."""
        facts: dict[str, object] = {
            "vllm": installed_version("vllm"),
            "adapter_facts": stack.facts.describe(),
            "impl": type(stack.layer.impl).__name__,
            "builder": type(stack.builder).__name__,
            "cudagraph_support": stack.cudagraph_support,
            "cudagraph_mode": stack.cudagraph_mode,
            "launch": launch[0],
            "launch_reason": launch[1],
            "kv_cache_shape": list(kv_cache.shape),
            "kv_cache_stride": list(kv_cache.stride()),
            "kv_cache_storage": str(kv_cache.dtype),
        }
        version = getattr(stack.layer.impl, "vllm_flash_attn_version", None)
        if version:
            facts["fa_version"] = int(version)
        # what the builder decided for this batch (the knobs that make vLLM's run differ from a bare op)
        for name in ("seq_threshold_3D", "num_par_softmax_segments", "max_num_splits", "use_cascade"):
            value = getattr(metadata, name, None)
            if isinstance(value, (int, bool)):
                facts[name] = value
        if getattr(metadata, "scheduler_metadata", None) is not None:
            facts["aot_scheduler_metadata"] = True
        # FlashInfer (0.25+): the query dtype its builder chose per phase (maybe_quant_query converts to it)
        for part in ("decode", "prefill"):
            chosen = getattr(metadata, f"q_data_type_{part}", None)
            if chosen is not None:
                facts[f"{part}_query_dtype"] = str(chosen)
        for part in ("decode", "prefill"):
            sub = getattr(metadata, part, None)
            if sub is not None:
                facts[f"{part}_path"] = type(sub).__name__
        return facts
