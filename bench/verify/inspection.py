"""What `attnsel verify`'s engine worker reads back from vLLM's engine in-process (bench/verify/engine_worker.py):
the facts of its VllmConfig, and the attention backends its model inspection names. What differs
between releases is release data (attention/versions `engine`), checked on CPU per release by
bench/tools/engine_cpu_check.py. Torch-free: it only reads attributes and text.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from typing import Any

# vLLM's attention implementation classes (Attention.extra_repr prints `backend=<class>`,
# model_executor/layers/attention/attention.py:561) -> the --attention-backend name.
IMPL_BACKENDS = {
    "FlashAttentionImpl": "FLASH_ATTN", "FlashAttentionDiffKVImpl": "FLASH_ATTN",
    "FlashInferImpl": "FLASHINFER", "TritonAttentionImpl": "TRITON_ATTN", "TritonAttentionDiffKVImpl": "TRITON_ATTN",
    "FlexAttentionImpl": "FLEX_ATTENTION", "TurboQuantAttentionImpl": "TURBOQUANT",
    "FlashMLAImpl": "FLASHMLA", "FlashAttnMLAImpl": "FLASH_ATTN_MLA", "CutlassMLAImpl": "CUTLASS_MLA",
    "FlashInferMLAImpl": "FLASHINFER_MLA", "TritonMLAImpl": "TRITON_MLA",
}
# What the worker reads back from the engine's VllmConfig (fact -> attribute path). The KV-cache
# capacity is set by the engine core at the end of its start and sent back to the front end
# (kv_cache_size_tokens, kv_cache_max_concurrency); bench/tools/engine_cpu_check.py checks that each
# path exists in a release's config classes (tests/fixtures/verify_engine/vllm_0_X.json).
CONFIG_FACTS = {
    "block_size": "cache_config.block_size", "num_gpu_blocks": "cache_config.num_gpu_blocks",
    "kv_cache_tokens": "cache_config.kv_cache_size_tokens", "max_concurrency": "cache_config.kv_cache_max_concurrency",
    "gpu_memory_utilization": "cache_config.gpu_memory_utilization", "max_model_len": "model_config.max_model_len",
    "dtype": "model_config.dtype", "is_hybrid": "model_config.is_hybrid",
    "max_num_batched_tokens": "scheduler_config.max_num_batched_tokens", "max_num_seqs": "scheduler_config.max_num_seqs",
    "async_scheduling": "scheduler_config.async_scheduling", "cudagraph_mode": "compilation_config.cudagraph_mode",
    "compilation_mode": "compilation_config.mode", "requested_backend": "attention_config.backend",
}

def backends_in_inspection(text: str, ambiguous: Sequence[str] = ()) -> list[str]:
    """The attention backends named in vLLM's model inspection (`LLM.__repr__`), in order of
    appearance; an impl class several backends share (`ambiguous`, the release's
    `engine.inspection_ambiguous_impls`) names none.

    >>> backends_in_inspection("(attn): Attention(head_size=128, num_heads=32, backend=TritonAttentionImpl)")
    ['TRITON_ATTN']
    """
    found: list[str] = []
    for impl in re.findall(r"backend=(\w+)", text or ""):
        if impl in ambiguous:
            continue
        name = IMPL_BACKENDS.get(impl, impl)
        if name not in found:
            found.append(name)
    return found


def unnamed_attention_layers(text: str, engine: dict) -> list[str]:
    """vLLM attention layers in the model inspection whose line names no backend: their class
    prints none in this release (`engine.inspection_layers` of attention/versions: class -> whether
    its repr names the backend) or their impl class is shared by several backends
    (`engine.inspection_ambiguous_impls`). vLLM's MLAAttention defines no extra_repr in 0.24-0.33
    (model_executor/layers/attention/mla_attention.py), so an MLA model's inspection says `MLAAttention(`.

    >>> unnamed_attention_layers("(self_attn): DeepseekV2MLAAttention(\\n  (mla_attn): MLAAttention(",
    ...                          {"inspection_layers": {"Attention": True, "MLAAttention": False}})
    ['MLAAttention']
    """
    layers = engine.get("inspection_layers") or {"Attention": True}
    ambiguous = set(engine.get("inspection_ambiguous_impls") or ())
    found: list[str] = []
    for line in (text or "").splitlines():
        impl = re.search(r"backend=(\w+)", line)
        for layer in re.findall(r"\b(\w+)\(", line):
            if layer not in layers:
                continue
            if not layers[layer] or not impl:
                label = layer
            elif impl.group(1) in ambiguous:
                label = f"{layer} ({impl.group(1)})"
            else:
                continue
            if label not in found:
                found.append(label)
    return found


def installed_engine_facts() -> dict:
    """The `engine` facts of the release that answers for the installed vLLM (attention/versions)."""
    from attnsel.attention.versions import select_profile

    try:
        return select_profile(None).profile.engine
    except Exception:  # noqa: BLE001 -- a vLLM attnsel has no data for: the defaults
        return {}


def config_facts(cfg: Any) -> dict:
    """CONFIG_FACTS read from a VllmConfig: enums by name, dtypes without `torch.`."""
    out: dict[str, Any] = {}
    for fact, path in CONFIG_FACTS.items():
        value: Any = cfg
        for part in path.split("."):
            value = getattr(value, part, None)
        if isinstance(value, enum.Enum):
            value = value.name
        out[fact] = str(value).removeprefix("torch.") if fact == "dtype" else value
    out["is_hybrid"] = bool(out["is_hybrid"])
    return out
