"""Which known vLLM faults of the release an answer meets (attention/versions/faults.py): explain's
configuration (the backend vLLM runs, the KV-cache dtype, the GPU, the cubins, batch invariance, DCP)
and what is known about the query scale: `--calibrated-q-scale`, or a checkpoint whose config says it
carries KV-cache scales (compressed-tensors `kv_cache_scheme`, ModelOpt `kv_cache_quant_algo`), which may
carry q scales too -- vLLM reads them into `layer._q_scale_float` and leaves 1.0 without them
(model_executor/layers/quantization/kv_cache.py:164-191 @ 0.34.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from attnsel.attention.versions import FaultConfig, FaultMatch, QScale, faults_met

if TYPE_CHECKING:
    from attnsel.attention.rules import Explanation
    from attnsel.attention.versions import RuleProfile


def checkpoint_has_kv_scales(hf_config: Mapping | None) -> bool:
    """The model's config names calibrated KV-cache scales (text config or top level)."""
    if not isinstance(hf_config, Mapping):
        return False
    sections = [hf_config, hf_config.get("text_config")]
    for section in (s for s in sections if isinstance(s, Mapping)):
        quant = section.get("quantization_config") or section.get("compression_config")
        if isinstance(quant, Mapping) and (quant.get("kv_cache_scheme") is not None
                                           or quant.get("kv_cache_quant_algo") is not None):
            return True
    return False


def q_scale_of(calibrated: bool | None, hf_config: Mapping | None) -> QScale:
    """--calibrated-q-scale / --no-calibrated-q-scale, else what the checkpoint's config says."""
    if calibrated is not None:
        return QScale.CALIBRATED if calibrated else QScale.UNIT
    return QScale.CHECKPOINT if checkpoint_has_kv_scales(hf_config) else QScale.UNIT


def faults_for(profile: RuleProfile, expl: Explanation, q_scale: QScale) -> tuple[FaultMatch, ...]:
    """The release's known faults this answer meets (none where vLLM would refuse to start)."""
    if expl.error is not None or expl.selected is None or not profile.known_faults:
        return ()
    ctx = expl.context
    config = FaultConfig(backend=expl.selected, kv_cache_dtype=expl.inputs.kv_cache_dtype,
                         capability=(expl.capability[0], expl.capability[1]), q_scale=q_scale,
                         flashinfer_cubin=ctx.has_flashinfer_cubin, batch_invariant=ctx.batch_invariant,
                         decode_context_parallel_size=ctx.decode_context_parallel_size,
                         use_trtllm_attention=ctx.use_trtllm_attention)
    return faults_met(profile.known_faults, config)
