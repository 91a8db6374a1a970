"""What vLLM's classes are handed for one batch: its CommonAttentionMetadata, the KV cache in the
backend's own shape, layout and storage dtype, and the layer's quantization scales.

The forward pass only reads the cache: vLLM writes K/V (reshape_and_cache_flash,
concat_and_cache_mla) in a separate op that tune does not time, so the cache is filled here once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from attnsel.attention.kernels.vllm.calls import call_accepting
from attnsel.attention.kernels.vllm.stack import VllmStack

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnsel.attention.kernels.base import Batch
    from attnsel.attention.kernels.paged import PagedBatch


def common_metadata(batch: Batch, device: torch.device) -> object:
    """vLLM's CommonAttentionMetadata for a PagedBatch (or a latent one) (decodes first, as vLLM orders them), filling
    only the fields this release's dataclass has."""
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata  # type: ignore

    seq_lens, q_lens = batch.host_lists()
    query_start_loc_cpu = torch.tensor([0, *list(_cumulative(q_lens))], dtype=torch.int32)
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


def kv_cache_tensor(stack: VllmStack, batch: PagedBatch) -> torch.Tensor:
    """The layer's KV cache in the backend's own shape and physical layout, as GPUModelRunner
    allocates it in this release (the release's adapter facts say how: stack.facts), holding the
    batch's K and V."""
    nb, bs, hkv, d = batch.key_cache.shape
    shape, order = backend_cache_layout(stack, nb, bs, hkv, d)
    cache = allocate_like_vllm(stack, shape, order, batch.key_cache.device)
    read_as = fp8_format_the_impl_reads(stack, batch.key_cache.dtype)
    for index, values in enumerate(kv_views(cache, stack.facts.kv_split, nb, hkv, d)):
        source = (batch.key_cache, batch.value_cache)[index]
        source = source if read_as is None else source.float().to(read_as)
        values.copy_(as_storage(source, cache.dtype))
    return cache


def backend_cache_layout(stack: VllmStack, nb: int, bs: int, hkv: int, d: int,
                         latent: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(logical shape, stride order) of the backend's cache for `nb` blocks, the way this release's
    model runner lays it out (stack.facts.shape_from): the backend's get_kv_cache_shape and
    get_kv_cache_stride_order (0.24-0.28), or the per-layer view of 0.29+ [blocks, heads, block_size,
    content] in the physical order of the KVCacheLayout vLLM resolves for the backend
    (get_supported_kv_cache_layouts' first; create_kv_cache_views, vllm/v1/kv_cache_interface.py)."""
    cls = stack.backend_cls
    if stack.facts.shape_from == "get_kv_cache_shape":
        shape = tuple(call_accepting(cls.get_kv_cache_shape, nb, bs, hkv, d, cache_dtype_str=stack.spec.kv_cache_dtype))
        try:
            return shape, tuple(cls.get_kv_cache_stride_order())
        except (AttributeError, NotImplementedError):
            return shape, tuple(range(len(shape)))
    # an MLA latent cache holds one vector per token (no K/V pair)
    content = 2 * d if stack.facts.kv_split == "packed_content" and not latent else d
    return (nb, hkv, bs, content), layer_view_order(cls)


def layer_view_order(backend_cls: Any) -> tuple[int, ...]:
    """The physical order of a layer's [blocks, heads, block_size, content] cache view in the
    KVCacheLayout vLLM resolves for the backend (0.29+: get_supported_kv_cache_layouts' first)."""
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts  # type: ignore

    return tuple(get_supported_kv_cache_layouts([backend_cls])[0].layer_view_order)


def backend_cache_shape(stack: VllmStack, nb: int, bs: int, hkv: int, d: int) -> tuple[int, ...]:
    """The backend's logical cache shape for `nb` blocks (backend_cache_layout)."""
    return backend_cache_layout(stack, nb, bs, hkv, d)[0]


def kv_views(cache: torch.Tensor, kv_split: str, nb: int, hkv: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, V) as (blocks, block_size, heads, head_size) views of a cache of the backend's logical
    shape: `kv_axis` selects K and V on the size-2 axis of a 5-D shape (vLLM 0.24); `packed_content`
    takes them from the last axis of (blocks, heads, block_size, 2 * head_size), K first, as 0.26's
    impls read it (kv_cache.transpose(1, 2).split(head_size, dim=-1))."""
    shape = tuple(cache.shape)
    if kv_split == "kv_axis":
        axis = kv_axis(shape, nb)
        return cache.select(axis, 0), cache.select(axis, 1)
    if len(shape) != 4 or shape[0] != nb or shape[1] != hkv or shape[3] != 2 * d:
        raise ValueError(f"expected a packed KV cache shape (blocks {nb}, heads {hkv}, block size, 2 x {d}), "
                         f"got {shape}")
    by_token = cache.transpose(1, 2)
    return by_token.narrow(-1, 0, d), by_token.narrow(-1, d, d)


def fp8_format_the_impl_reads(stack: VllmStack, stored: torch.dtype) -> torch.dtype | None:
    """The fp8 format an impl views the cache as, where it differs from the batch's: vLLM 0.24's
    TritonAttentionImpl views any fp8 cache as the platform's fp8 (float8_e4m3fn on CUDA) when it
    writes (do_kv_cache_update) and when it reads, so with --kv-cache-dtype fp8_e5m2 the cache vLLM
    fills really holds e4m3 values. Filling it with e5m2 bytes instead would be read as nonsense
    (relative error 0.88 on an H100). None: the impl reads the batch's own format."""
    import torch

    read_as = getattr(getattr(stack.layer, "impl", None), "fp8_dtype", None)
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    if isinstance(read_as, torch.dtype) and stored in fp8 and read_as in fp8 and read_as != stored:
        return read_as
    return None


def allocate_like_vllm(stack: VllmStack, shape: tuple[int, ...], order: tuple[int, ...],
                       device: torch.device) -> torch.Tensor:
    """An empty cache of the backend's logical `shape`, laid out in `order` and typed as the
    layer's KV-cache spec says (GPUModelRunner allocates the spec's dtype: uint8 for fp8 caches,
    which each impl views as fp8)."""
    import torch

    dtype = getattr(stack.kv_cache_spec, "dtype", None)
    if not isinstance(dtype, torch.dtype):
        dtype = getattr(torch, stack.spec.dtype)
    physical = torch.empty(tuple(shape[i] for i in order), dtype=dtype, device=device)
    return physical.permute(*[order.index(i) for i in range(len(order))])


def as_storage(values: torch.Tensor, storage_dtype: torch.dtype) -> torch.Tensor:
    """`values` as the cache stores them: fp8 values copied bit for bit into a uint8 cache (a plain
    copy_ would convert the numbers), anything else as is."""
    if values.dtype != storage_dtype and values.element_size() == storage_dtype.itemsize:
        return values.view(storage_dtype)
    return values


def set_layer_scales(layer: Any, batch: Batch) -> list[str]:
    """The layer's KV-cache scales (and the query scale) set to the batch's, the way vLLM's
    calc_kv_scales sets them (tensor and float copies); for an unquantized cache nothing changes
    (vLLM's defaults, 1.0). Impls that cache products of the scales on their first forward
    (FlashInfer's bmm1_scale/bmm2_scale) get them cleared, as a freshly built layer would have them."""
    from attnsel.attention.kernels.kv_quant import is_fp8

    if not is_fp8(getattr(batch, "kv_cache_dtype", "auto")):
        return []
    for name in ("q", "k", "v"):
        value = float(getattr(batch, f"{name}_scale"))
        tensor = getattr(layer, f"_{name}_scale", None)
        if tensor is not None:
            tensor.fill_(value)
        setattr(layer, f"_{name}_scale_float", value)
    cleared = [n for n in ("bmm1_scale", "bmm2_scale") if getattr(layer.impl, n, None) is not None]
    for name in cleared:
        setattr(layer.impl, name, None)
    return [f"layer._q_scale/_k_scale/_v_scale = {batch.q_scale:.4g}/{batch.k_scale:.4g}/{batch.v_scale:.4g} "
            f"(vLLM's calc_kv_scales rule)"]


def kv_axis(shape: tuple[int, ...], num_blocks: int) -> int:
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
