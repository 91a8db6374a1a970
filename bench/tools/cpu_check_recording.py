"""What the CPU check (bench/tools/vllm_cpu_check.py) records of the installed release beside its rows:
the layer it builds for each backend (`_spec`), the signatures of the calls the adapters make and the
KV-cache layout vLLM allocates (`signatures_and_layout`, saved with `--save`), and, with `--record`,
every backend's stack answers at each block size (`record_stacks`)."""

from __future__ import annotations

from typing import Any

from attnsel.attention.kernels import MLA_BACKENDS, SPARSE_MLA_BACKENDS

INDEX_TOPK = 2048  # DeepSeek-V3.2's indexer top-k, which the sparse builders size their buffers from


def _spec(backend: str, block_size: int, kv_cache_dtype: str = "auto") -> Any:
    """The recorded layer: Llama-3.1-8B's (32/8 heads, d128) or, for an MLA backend, DeepSeek-V3's
    at TP 8 (16 heads, latent 512 + 64), bf16, on an H100 with vllm serve's limits."""
    from attnsel.attention.kernels.vllm import MlaDims, StackSpec

    if backend in SPARSE_MLA_BACKENDS:
        return StackSpec(backend, 16, 1, 576, "bfloat16", kv_cache_dtype, block_size, 131072, 1024, 8192,
                         mla=MlaDims(512, 64, 128, 128, INDEX_TOPK))
    if backend in MLA_BACKENDS:
        return StackSpec(backend, 16, 1, 576, "bfloat16", kv_cache_dtype, block_size, 131072, 1024, 8192,
                         mla=MlaDims(512, 64, 128, 128))
    return StackSpec(backend, 32, 8, 128, "bfloat16", kv_cache_dtype, block_size, 131072, 1024, 8192)


def _record_backend(builder: Any, backend: str) -> dict:
    from attnsel.attention.kernels.vllm import backend_class, call_accepting

    cls = backend_class(backend)
    entry: dict = {"block_sizes": {}, "is_mla": bool(cls.is_mla()),
                   "supported_kv_cache_dtypes": list(getattr(cls, "supported_kv_cache_dtypes", None) or [])}
    for block_size in (16, 32, 64, 128, 256):
        spec = _spec(backend, block_size)
        try:
            stack = builder.build(spec)
        except Exception as exc:  # noqa: BLE001 -- vLLM refuses the block size
            entry["block_sizes"][str(block_size)] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        with stack.active():
            shape = call_accepting(stack.backend_cls.get_kv_cache_shape, 10, stack.kernel_block_size,
                                   spec.num_kv_heads, spec.head_size)
            order = stack.backend_cls.get_kv_cache_stride_order()
        entry["block_sizes"][str(block_size)] = {"kernel_block_size": stack.kernel_block_size,
                                                 "kv_cache_shape_10_blocks": list(shape), "stride_order": list(order)}
        entry.update(cudagraph_support=stack.cudagraph_support, cudagraph_mode=stack.cudagraph_mode,
                     impl=type(stack.layer.impl).__name__, builder=type(stack.builder).__name__)
        entry["dispatch"] = [[n, u, *stack.launch_for(n, u)] for n in (1, 3, 16, 64, 256, 512, 513, 2048)
                             for u in (True, False)]
    fp8 = next((k for k in ("fp8", "fp8_e4m3") if k in entry["supported_kv_cache_dtypes"]), None)
    if fp8 and cls.supports_kv_cache_dtype(fp8):
        sizes = [int(k) for k, v in entry["block_sizes"].items() if "kernel_block_size" in v]
        stack = builder.build(_spec(backend, sizes[0], fp8))
        entry["fp8"] = {"kv_cache_spec_dtype": str(stack.kv_cache_spec.dtype).replace("torch.", ""),
                        "supports_quant_query_input": bool(getattr(stack.layer.impl, "supports_quant_query_input", False)),
                        "layer_has_query_quant": getattr(stack.layer, "query_quant", None) is not None}
    return entry


def record_stacks(backends: list[str]) -> dict:
    """What vLLM's own classes answer per backend and block size (see _spec for the layer): the
    facts tests/fixtures/fake_vllm/kernels replays (CUDA-graph support and resolved mode, kernel
    block size, KV-cache shape and stride order, dispatcher answers, the fp8 KV-cache storage dtype
    and whether the impl takes an fp8 query)."""
    import vllm  # type: ignore

    from attnsel.attention.kernels.vllm import StackBuilder

    builder = StackBuilder(device="cpu")
    doc: dict = {"vllm": getattr(vllm, "__version__", "?"), "gpu": "H100 stand-in (CC 9.0)", "backends": {}}
    for backend in backends:
        doc["backends"][backend] = _record_backend(builder, backend)
    return doc


def _parameters(fn: Any) -> list[str]:
    """A method's parameter names, "name=" where it has a default ("**kwargs" / "*args" as such)."""
    import inspect

    marks: dict[inspect._ParameterKind, str] = {inspect.Parameter.VAR_POSITIONAL: "*",
                                                 inspect.Parameter.VAR_KEYWORD: "**"}
    return [f"{marks.get(p.kind, '')}{name}{'=' if p.default is not p.empty else ''}"
            for name, p in inspect.signature(fn).parameters.items() if name not in ("self", "cls")]


def signatures_and_layout(builder: Any, backend: str, block_size: int) -> dict:
    """What the replay test (tests/test_vllm_cpu_recordings.py) checks our calls against: the
    parameter names of the methods the adapters call on this release's classes, and the logical
    cache shape and stride order get_kv_cache_shape gives for 10 blocks."""
    from attnsel.attention.kernels.vllm.inputs import backend_cache_layout

    stack = builder.build(_spec(backend, block_size))
    impl = stack.layer.impl
    entry: dict = {"block_size": block_size, "impl": type(impl).__name__, "builder": type(stack.builder).__name__,
                   "builder_build": _parameters(stack.builder.build),
                   "cudagraph_support": _parameters(type(stack.builder).get_cudagraph_support)}
    latent = backend in MLA_BACKENDS + SPARSE_MLA_BACKENDS
    if latent:
        entry["mla_forward_mqa"] = _parameters(impl.forward_mqa)
        heads, width = 1, stack.spec.head_size
    else:
        entry["impl_forward"] = _parameters(impl.forward)
        heads, width = stack.spec.num_kv_heads, stack.spec.head_size
    with stack.active():
        shape, order = backend_cache_layout(stack, 10, stack.kernel_block_size, heads, width,
                                            latent=latent)
        entry["kv_cache_shape_10_blocks"], entry["stride_order"] = list(shape), list(order)
    return entry
