"""Where vLLM's own fp8 output is wrong at tune's scales, recognised from what vLLM's classes decided.

tune's fp8 rows run with non-unit per-tensor scales (kv_quant.py): a dropped scale then fails the
check. When vLLM itself mis-applies a scale, the row fails too, and the row should say that it is
vLLM's output that is wrong at those scales, and why, rather than leave the backend looking broken.
These checks read what vLLM's builder and layer hold for the batch (no version strings); the
correctness check still decides, and bench appends the explanation only to a row that fails it.

FlashInfer's native decode with an fp8 cache (vLLM 0.25-0.33, the same code; 0.24 passed no q_scale;
docs/tune.md "FlashInfer's native decode with an fp8 cache"): FlashInferMetadataBuilder.get_q_data_type
keeps the decode query in the model dtype on SM90/SM12x whenever --attention-config.use_trtllm_attention
is not 0, for FlashInfer's XQA decode (0.33 v1/attention/backends/flashinfer.py:1146-1153). Where XQA is
unavailable (no flashinfer-cubin and NVIDIA's artifactory unreachable, or VLLM_BATCH_INVARIANT=1:
vllm/utils/flashinfer.py:647-697; an XQA-incompatible head size, or DCP: flashinfer.py:1016-1039) the
builder plans the native decode wrapper (FIDecode) instead, and FlashInferImpl.forward still passes it
q_scale=layer._q_scale_float with that unquantized query (flashinfer.py:2635-2640). FlashInfer's run()
multiplies the softmax scale by q_scale whatever the query's dtype (flashinfer 0.7.2 decode.py:2907-2908),
so the logits are scaled by q_scale: right at q_scale 1.0 (vLLM's default without calibrated scales),
wrong at any other. 0.24's metadata has no q_data_type_decode, so nothing is named there.
"""

from __future__ import annotations


def native_decode_q_scale_fault(backend: str, layer: object, metadata: object, kv_cache_dtype: str) -> str | None:
    """The explanation for a FLASHINFER fp8 row whose decode runs FlashInfer's native wrapper with a
    16-bit query and a q_scale other than 1.0 (this module's docstring); None for any other row."""
    from attnsel.attention.kernels.kv_quant import is_fp8

    decode = getattr(metadata, "decode", None)
    q_dtype = getattr(metadata, "q_data_type_decode", None)
    if backend != "FLASHINFER" or not is_fp8(kv_cache_dtype) or decode is None or q_dtype is None:
        return None
    if not hasattr(decode, "wrapper") or getattr(q_dtype, "itemsize", 1) == 1:  # XQA/trtllm-gen, or an fp8 query
        return None
    q_scale = float(getattr(layer, "_q_scale_float", 1.0))
    if q_scale == 1.0:
        return None
    query = str(q_dtype).replace("torch.", "")
    return (f"vLLM's output is wrong at these scales, not FlashInfer's kernel: FlashInferImpl.forward decodes with "
            f"FlashInfer's native wrapper here (XQA unavailable: no flashinfer-cubin and NVIDIA's artifactory "
            f"unreachable, VLLM_BATCH_INVARIANT=1, DCP, or an XQA-incompatible head size) and passes it the {query} decode query, "
            f"which FlashInferMetadataBuilder.get_q_data_type kept unquantized for XQA, together with "
            f"q_scale=layer._q_scale_float ({q_scale:.4g}), which FlashInfer folds into the softmax scale; with "
            f"the per-tensor scales tune's fp8 cache has (not 1.0) the logits are scaled by {q_scale:.4g}. Right at "
            f"q_scale 1.0 (vLLM's default without calibrated scales) and where XQA decodes (flashinfer-cubin "
            f"installed: `vllm download-kernels`); docs/tune.md")
