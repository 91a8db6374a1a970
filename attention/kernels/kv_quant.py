"""fp8 KV caches the way vLLM keeps them: per-tensor scales, fp8 storage, dequantize-on-read.

vLLM (0.17-0.33, CUDA) stores `--kv-cache-dtype fp8` / `fp8_e4m3` as float8_e4m3fn values and
`fp8_e5m2` as float8_e5m2 values in a uint8-typed tensor (STR_DTYPE_TO_TORCH_DTYPE in
vllm/utils/torch_utils.py); each backend views it as fp8. A stored value times the layer's scale
(`layer._k_scale` / `_v_scale`, one float per tensor) is the value the model computed. Backends
that quantize the query too (FA3, FlashMLA, FlashInfer's TRT-LLM path: `supports_quant_query_input`)
divide it by `layer._q_scale` first (vLLM's Attention.forward / MLAAttention.forward_impl).

Scales. A checkpoint without KV scales gets 1.0 in vLLM; `--calculate-kv-scales` sets
scale = amax(|x|) / {Q,K,V}_SCALE_CONSTANT (200, 200, 100 by default; vllm/envs.py and
Attention.calc_kv_scales). We use the computed ones: with a scale of 1.0 a kernel that ignores a
scale would pass the correctness check; with these it cannot.

Tolerance (`FP8_TOLERANCE`). The fp32 reference reads the dequantized cache (stored value x
scale), i.e. exactly what the kernel reads, and the model-dtype query. What remains is the query
quantized to fp8 where vLLM does that, and the kernel's own fp8 arithmetic: FA3 casts P to fp8 for
the P.V product, and vLLM's Triton kernel with an fp8 query casts the unnormalized P (values in
(0, 1], many of them fp8 subnormals) to e4m3. Measured against this reference on CPU
(bench/tools/vllm_cpu_check.py, d 64 / 576, 200-700 keys): FA3's and FlashMLA's argument paths
2.3-4.8% (the fp8 query), FlashInfer MLA's 3.7-4.8%, vLLM's own Triton kernel (run by the Triton
interpreter) 5.6-6.8%, our Triton kernel and FlashInfer on Hopper (16-bit query and P) 0.02-0.5%.
1.5e-1 keeps a 2x margin over the worst, while a dropped k_scale or v_scale gives > 10 and a wrong
page mapping ~1.4. (It does not catch an off-by-one length at long contexts, a few %: the 16-bit
runs of the same adapters do.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import (  # noqa: F401  (kernels read it here)
    FP8_KV_CACHE_DTYPES,
    UNQUANTIZED_KV_CACHE_DTYPES,
    is_fp8,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

# The KV caches the kernels build: the model dtype's, and the plain fp8 ones (attention/rules/spec.py).
TIMED_KV_CACHE_DTYPES = UNQUANTIZED_KV_CACHE_DTYPES + FP8_KV_CACHE_DTYPES
# bf16/fp16 kernels pass below ~1e-2 against the fp32 reference (issue "attnsel tune"); measured
# errors are ~5e-4 for bf16 (docs/gpu-facts.md: FA4 3e-4, flex 5e-4), so this still catches a wrong
# mask, scale or page mapping. By query dtype; an fp8 KV cache gets FP8_TOLERANCE below.
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 1e-3}
# vllm/envs.py defaults: Q_SCALE_CONSTANT, K_SCALE_CONSTANT, V_SCALE_CONSTANT
SCALE_CONSTANTS = {"q": 200.0, "k": 200.0, "v": 100.0}
FP8_TOLERANCE = 1.5e-1


def fp8_format(kv_cache_dtype: str) -> str:
    """The torch dtype name of the stored values ("fp8" is e4m3 on CUDA).

    >>> fp8_format("fp8"), fp8_format("fp8_e5m2")
    ('float8_e4m3fn', 'float8_e5m2')
    """
    if kv_cache_dtype not in FP8_KV_CACHE_DTYPES:
        raise ValueError(f"{kv_cache_dtype!r} is not an fp8 KV-cache dtype ({', '.join(FP8_KV_CACHE_DTYPES)})")
    return "float8_e5m2" if kv_cache_dtype == "fp8_e5m2" else "float8_e4m3fn"


def fp8_torch_dtype(kv_cache_dtype: str) -> torch.dtype:
    import torch

    dtype: torch.dtype = getattr(torch, fp8_format(kv_cache_dtype))
    return dtype


def computed_scale(x: torch.Tensor, which: str) -> float:
    """vLLM's calc_kv_scales for one tensor: amax(|x|) / the scale constant of `which` (q, k, v)."""
    amax = float(x.detach().abs().max()) if x.numel() else 0.0
    return max(amax, 1e-12) / SCALE_CONSTANTS[which]


def quantize(x: torch.Tensor, scale: float, kv_cache_dtype: str) -> torch.Tensor:
    """x / scale, saturated to the fp8 range and stored as fp8 (what vLLM's cache-write kernels
    `reshape_and_cache_flash` / `concat_and_cache_mla` and QuantFP8 do with a per-tensor scale)."""
    import torch

    dtype = fp8_torch_dtype(kv_cache_dtype)
    limit = torch.finfo(dtype).max
    return (x.float() / scale).clamp(-limit, limit).to(dtype)


def dequantize(x: torch.Tensor, scale: float) -> torch.Tensor:
    """fp32 values the model computed, from stored fp8 values (identity for unquantized caches)."""
    return x.float() * scale


def tolerance_note(kv_cache_dtype: str, base: float) -> str | None:
    """The line a row carries about its tolerance (None for unquantized caches)."""
    if not is_fp8(kv_cache_dtype):
        return None
    return (f"fp8 KV cache ({fp8_format(kv_cache_dtype)}, per-tensor scales): checked against an fp32 reference "
            f"from the dequantized cache with tolerance {FP8_TOLERANCE:g} (vs {base:g} for 16-bit caches: the "
            f"query and P may be fp8 inside the kernel; attention/kernels/kv_quant.py)")
