"""What the installed release's own selector says about one row of the CPU check
(bench/tools/vllm_cpu_check.py) before the check drives it.

tune never times a (backend, block size) that vLLM refuses: its plan asks the release's rule profile
(bench/plan/rules.py `vllm_verdict`). The CPU check runs on the real release, so it asks that
release's selector itself, with the selector inputs tune's plan builds for the row's layer
(`selector_inputs`): `--attention-backend BACKEND --block-size N` as `explain --live` asks it
(attention/explain/live.py `ask_vllm`: the backend class's validate_configuration, then vLLM's
get_attn_backend_cls). A row it refuses is recorded as refused with vLLM's reasons, never driven:
e.g. FLASH_ATTN at head size 512 with an fp8 cache on 0.27-0.30, whose supports_combination says
"FP8 KV cache requires FA3 on SM90 or FA4 on SM100" (0.27 v1/attention/backends/flash_attn.py:229)
and whose impl would raise if built anyway.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# the MLA layer the check builds (cpu_check_recording._spec: DeepSeek-V3's qk_nope_head_dim and v_head_dim)
QK_NOPE_HEAD_DIM = 128
V_HEAD_DIM = 128


def tune_shape(w: Any) -> Any:
    """The tune shape of one check workload (attention/kernels/paged.py Workload): its heads per
    GPU, head size, dtypes and, for MLA, the latent dimensions and the sparse indexer's top-k."""
    from attnsel.bench.plan import TuneShape

    latent: dict = {}
    if w.kv_lora_rank is not None:
        latent = dict(use_mla=True, kv_lora_rank=w.kv_lora_rank, qk_rope_head_dim=w.head_size - w.kv_lora_rank,
                      qk_nope_head_dim=QK_NOPE_HEAD_DIM, v_head_dim=V_HEAD_DIM,
                      use_sparse=w.index_topk is not None, index_topk=w.index_topk)
    return TuneShape(head_size=w.head_size, num_q_heads=w.num_q_heads, num_kv_heads=w.num_kv_heads, dtype=w.dtype,
                     kv_cache_dtype=w.kv_cache_dtype, **latent)


def selector_reasons(backend: str, w: Any, block_size: int, capability: tuple[int, int], gpu_name: str,
                     vllm_version: str | None = None, has_flashinfer_cubin: bool = True) -> list[str]:
    """The installed vLLM's reasons for refusing `--attention-backend BACKEND --block-size N` for the
    row's layer on the stand-in GPU; empty when it accepts."""
    from attnsel.attention.explain import ask_vllm
    from attnsel.attention.kernels.vllm.stack import MissingBackend, backend_class
    from attnsel.bench.plan import selector_inputs

    try:  # a backend this release does not have (FLASHINFER_MLA_SPARSE_SM90 before 0.30): the enum says so
        backend_class(backend)
    except MissingBackend as missing:
        return [str(missing)]
    except ImportError:
        pass  # the class needs what the CPU lacks; the selector below still answers for the row
    inputs, ctx = selector_inputs(backend, block_size, tune_shape(w), capability, vllm_version=vllm_version)
    # the GPU the check stands in for, and the FlashInfer-cubin answer the check set for these rows
    # (FLASHINFER runs both ways: vllm_cpu_check.flashinfer_cubin), so asking leaves the platform as
    # the rows that are driven find it
    ctx = dataclasses.replace(ctx, gpu_name=gpu_name, has_flashinfer_cubin=has_flashinfer_cubin)
    answer = ask_vllm(inputs, ctx, offline=True)
    explicit = answer.explicit_backend
    if explicit is not None and not explicit.valid:
        return list(explicit.reasons)
    return [answer.error] if answer.error else []
