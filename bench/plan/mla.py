"""What the tune plan does for MLA models and fp8 KV caches (torch-free; bench/plan/build.py calls it).

MLA (DeepSeek-V2/V3/R1, Kimi-K2, GLM-4.x-MoE-Lite...): vLLM chooses among its MLA backends
(docs/vllm-rules.md §3b, §5a: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA, CUTLASS_MLA), so those
are the grid; the rule profile filters them per GPU and block size exactly as for dense models
(FLASHMLA: kernel pages of 64, so --block-size 64/128/256; FLASHINFER_MLA and CUTLASS_MLA: CC 10.x).
One layer per GPU holds `num_heads // TP` query heads over ONE latent cache of
kv_lora_rank + qk_rope_head_dim values per token; tune times the decode kernel vLLM runs for it
(attention/kernels/mla.py, vllm_mla.py). Prefill is not timed for MLA, and the plan says why.

fp8 KV caches: every backend the profile accepts with that --kv-cache-dtype is timed with an fp8
cache (attention/kernels/kv_quant.py); the others stay skipped with vLLM's reason
(`kv_cache_dtype not supported`, FA's combination messages) like any refused config.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from attnsel.attention.kernels import (  # vLLM's MLA backends (one list each)
    MLA_BACKENDS,
    SPARSE_MLA_BACKENDS,
)
from attnsel.bench.plan.shape import TuneShape
from attnsel.bench.plan.workloads import WorkloadKind
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.bench.plan.shape import TuneShape

# DeepSeek-V2/V3/R1 and Kimi-K2's qk_nope_head_dim: what `--use-mla` assumes when none is given
# (it sets the softmax scale and FLASHINFER_MLA's validity, docs/vllm-rules.md §3b/§9)
DEFAULT_QK_NOPE_HEAD_DIM = 128

PREFILL_NOTE = ("MLA: decode is timed; prefill and mixed batches are not. vLLM runs MLA prefill non-absorbed "
                "(forward_mha: latent cache and new tokens up-projected with the model's kv_b_proj, then its MLA "
                "prefill backend), and that prefill backend is chosen apart from --attention-backend "
                "(--attention-config.mla_prefill_backend), so --attention-backend and --block-size change the "
                "decode kernels timed here (attention/kernels/mla.py)")
TIMED_NOTE = ("MLA decode is timed as vLLM's MLA impl runs it: forward_mqa (absorbed multi-query attention over "
              "the latent cache) with the metadata of vLLM's MLA builder; the W_UK_T / W_UV projections around it "
              "(model GEMMs, the same for every backend) are not part of the timed call")
SPARSE_NOTE = ("sparse MLA (an index_topk model, e.g. DeepSeek-V3.2): vLLM's sparse MLA backends are timed, each "
               "decode token attending to the indexer's top-k positions of its sequence (every position when the "
               "context is no longer than the top-k; a seeded choice otherwise: attention/kernels/mla.py); the "
               "indexer itself (its own kernels, the same whichever backend runs) is not timed")
SPARSE_WITHOUT_TOPK_NOTE = ("sparse MLA without the model's index_topk: tune cannot build the indexer's top-k, so the "
                            "sparse backends' rows will say so")


def default_backends(use_mla: bool, dense: Sequence[str], use_sparse: bool = False) -> list[str]:
    """The grid's backends when --backends is not given: vLLM's MLA backends for an MLA model, its
    sparse MLA backends for a sparse one (vLLM refuses the dense ones for it: "sparse not supported")."""
    if use_mla and use_sparse:
        return list(SPARSE_MLA_BACKENDS)
    return list(MLA_BACKENDS if use_mla else dense)


def mla_fields(kv_lora_rank: int, qk_rope_head_dim: int, qk_nope_head_dim: int | None) -> dict:
    """TuneShape fields of an MLA layer: head_size = kv_lora_rank + qk_rope_head_dim, one KV head."""
    if kv_lora_rank <= 0 or qk_rope_head_dim < 0:
        raise UserInputError("--kv-lora-rank must be positive and --qk-rope-head-dim not negative")
    return dict(head_size=kv_lora_rank + qk_rope_head_dim, num_kv_heads=1, use_mla=True, kv_lora_rank=kv_lora_rank,
                qk_rope_head_dim=qk_rope_head_dim,
                qk_nope_head_dim=DEFAULT_QK_NOPE_HEAD_DIM if qk_nope_head_dim is None else qk_nope_head_dim)


def make_mla_shape(
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    num_heads: int,
    dtype: str,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    qk_nope_head_dim: int | None = None,
) -> TuneShape:
    """An MLA layer from explicit flags (`--use-mla --kv-lora-rank --qk-rope-head-dim --num-heads`):
    query heads per GPU = total // TP over one latent cache (docs/vllm-rules.md §6)."""
    from attnsel.attention.rules import parse_dtype
    from attnsel.attention.selector import heads_per_gpu

    if num_heads <= 0 or tensor_parallel_size <= 0:
        raise UserInputError("--num-heads and --tensor-parallel-size must be positive")
    q_per_gpu, _kv = heads_per_gpu(num_heads, None, tensor_parallel_size)  # MLA: one latent KV head per GPU
    return TuneShape(num_q_heads=int(q_per_gpu or 0), dtype=parse_dtype(dtype),
                     kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size,
                     assumed=mla_assumption(qk_nope_head_dim),
                     **mla_fields(kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim))


def mla_assumption(qk_nope_head_dim: int | None) -> str | None:
    if qk_nope_head_dim is not None:
        return None
    return (f"no --qk-nope-head-dim given: assumed {DEFAULT_QK_NOPE_HEAD_DIM} (DeepSeek-V3/R1, Kimi-K2); it sets "
            f"the softmax scale and whether vLLM accepts FLASHINFER_MLA")


def workload_kinds(use_mla: bool, kinds: Sequence[WorkloadKind]) -> tuple[list[WorkloadKind], list[str]]:
    """(kinds to time, notes): an MLA plan times decode only and says why."""
    if not use_mla:
        return list(kinds), []
    if WorkloadKind.DECODE not in kinds:
        raise UserInputError(f"{PREFILL_NOTE}; pass --workload decode")
    notes = [TIMED_NOTE] + ([PREFILL_NOTE] if set(kinds) - {WorkloadKind.DECODE} else [])
    return [WorkloadKind.DECODE], notes


def shape_notes(shape: TuneShape) -> list[str]:
    notes: list[str] = []
    if shape.use_sparse:
        notes.append(SPARSE_NOTE if shape.index_topk else SPARSE_WITHOUT_TOPK_NOTE)
    if shape.kv_cache_dtype not in ("auto", "bfloat16", "float16", shape.dtype):
        from attnsel.attention.kernels import FP8_TOLERANCE
        from attnsel.attention.rules import (
            is_fp8,  # the fp8 cache names live with the rules' vocabulary
        )

        if is_fp8(shape.kv_cache_dtype):
            notes.append(f"--kv-cache-dtype {shape.kv_cache_dtype}: each backend vLLM accepts it for is timed with an "
                         f"fp8 cache (per-tensor scales as vLLM's calc_kv_scales sets them) and checked against an fp32 "
                         f"reference from the dequantized cache with tolerance {FP8_TOLERANCE:g}; the backends vLLM "
                         f"refuses it for are listed with vLLM's reason")
        else:
            notes.append(f"--kv-cache-dtype {shape.kv_cache_dtype} is not timed (tune builds 16-bit and fp8 caches): "
                         f"the rows that vLLM accepts report it as unsupported")
    return notes


class ModelDims(TypedDict, total=False):
    """An MLA model's sizes, in the names of attention/model `ModelFacts`."""

    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    kv_lora_rank: int | None
    v_head_dim: int | None
    index_topk: int | None


def model_dims(shape: TuneShape) -> ModelDims:
    """The MLA sizes vLLM's rules read from the model config (FLASHINFER_MLA: qk_nope_head_dim; 0.33:
    kv_lora_rank, rope, v_head_dim, sparse MLA's index_topk), in the names of attention/model `ModelFacts`."""
    if not shape.use_mla:
        return {}
    return ModelDims(qk_nope_head_dim=shape.qk_nope_head_dim, qk_rope_head_dim=shape.qk_rope_head_dim,
                     kv_lora_rank=shape.kv_lora_rank, v_head_dim=shape.v_head_dim, index_topk=shape.index_topk)


