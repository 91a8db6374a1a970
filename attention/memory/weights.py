"""The bytes of a model's weights on one GPU, from its config.json alone (no checkpoint read).

vLLM loads every linear layer sharded over tensor parallelism (column/row parallel), the vocabulary
padded to a multiple of 64 and split over TP (VocabParallelEmbedding), KV heads replicated where
there are fewer than TP ranks, MLA's down-projections and the router replicated, and each pipeline
stage holds its share of the layers (the first stage the embedding, the last the LM head). This
is a parameter count per layer kind, times the bytes per parameter of the checkpoint's
quantization; norms and biases (well under 0.1% of a model) are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attnsel.attention.memory.checkpoint import checkpoint_bytes
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.hybrid.layout import HybridLayout
    from attnsel.attention.model.facts import ModelFacts

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
# Bytes per parameter of a linear layer's weight, per quantization method (scales included: a
# 128x128 fp8 block scale or a 32-value mxfp4 group adds well under 1%, int4 with group 128 ~3%).
QUANT_BYTES = {"fp8": 1.0, "fbgemm_fp8": 1.0, "modelopt": 1.0, "mxfp4": 4.25 / 8, "awq": 0.53, "gptq": 0.53,
               "awq_marlin": 0.53, "gptq_marlin": 0.53, "bitsandbytes": 0.53, "modelopt_fp4": 0.56}
VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE (vocab_parallel_embedding.py)


@dataclass(frozen=True)
class WeightBytes:
    """Weights of one GPU (the largest pipeline stage), in bytes, with what they were counted as."""

    total: int
    linear_bytes_per_param: float
    quantization: str | None
    parameters: int  # the whole model's parameters, for the note
    from_checkpoint: bool = False  # the total read from the checkpoint's safetensors headers
    note: str | None = None  # why the headers were not used (an unreadable file)

    @property
    def gib(self) -> float:
        return self.total / 2**30


def _get(c: Mapping, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if c.get(key) is not None:
            return c[key]
    return default


def quantization_method(hf_config: Mapping, flag: str | None) -> str | None:
    """`--quantization` wins; else the checkpoint's `quantization_config` (compressed-tensors: its bits)."""
    if flag:
        return flag
    q = hf_config.get("quantization_config") or _get(hf_config.get("text_config") or {}, "quantization_config")
    if not isinstance(q, Mapping):
        return None
    method = str(q.get("quant_method") or "")
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        bits = [g.get("weights", {}).get("num_bits") for g in groups.values() if isinstance(g, Mapping)]
        names = {8: "fp8", 4: "gptq"}
        return names.get(bits[0], method) if bits and isinstance(bits[0], int) else method
    return method or None


def _attention_params(c: Mapping, tp: int, head_size: int) -> float:
    hidden = int(c["hidden_size"])
    heads = int(_get(c, "num_attention_heads", default=1))
    if c.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3): latent down-projections replicated, the rest sharded
        nope, rope = int(c.get("qk_nope_head_dim") or 128), int(c.get("qk_rope_head_dim") or 64)
        v_head, kv_lora = int(c.get("v_head_dim") or 128), int(c["kv_lora_rank"])
        q_lora = c.get("q_lora_rank")
        q_proj = (hidden * q_lora + q_lora * heads * (nope + rope) / tp) if q_lora else hidden * heads * (nope + rope) / tp
        return q_proj + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_head) / tp + heads * v_head * hidden / tp
    kv_heads = int(_get(c, "num_key_value_heads", default=heads))
    kv_per_gpu = max(1, kv_heads // tp) if kv_heads >= tp else 1  # replicated when fewer KV heads than ranks
    return hidden * head_size * (2 * heads / tp + 2 * kv_per_gpu)


def _mixer_params(layout: HybridLayout, hidden: int, tp: int) -> float:
    """A Mamba / linear-attention layer's projections (in_proj and out_proj dominate)."""
    s = dict(layout.sizes)
    if layout.kind == "mamba2":
        inner, ng, ds, nh = s["intermediate_size"], s["n_groups"], s["state_size"], s["num_heads"]
        return (hidden * (2 * inner + 2 * ng * ds + nh) + inner * hidden) / tp
    if layout.kind == "mamba1":
        inner, ds = s["intermediate_size"], s["state_size"]
        rank = math.ceil(hidden / 16)
        return (3 * hidden * inner + inner * (rank + 2 * ds) + rank * inner) / tp
    if layout.kind == "gdn":
        k, v = s["num_k_heads"] * s["head_k_dim"], s["num_v_heads"] * s["head_v_dim"]
        return (hidden * (2 * k + 2 * v + 2 * s["num_v_heads"]) + v * hidden) / tp
    width = s.get("num_heads", 1) * s.get("head_dim", hidden)
    return 4 * hidden * width / tp


def _mlp_params(c: Mapping, tp: int, gated: bool) -> float:
    return (3 if gated else 2) * int(c["hidden_size"]) * int(c.get("intermediate_size") or 4 * c["hidden_size"]) / tp


def _moe_params(c: Mapping, tp: int) -> tuple[float, float]:
    """(sharded expert weights, of which the routed experts) of one MoE layer."""
    hidden = int(c["hidden_size"])
    experts = int(_get(c, "n_routed_experts", "num_local_experts", "num_experts", default=0))
    size = int(_get(c, "moe_intermediate_size", "intermediate_size"))
    routed = experts * 3 * hidden * size / tp
    shared = int(_get(c, "n_shared_experts", default=0)) * 3 * hidden * size / tp
    if c.get("shared_expert_intermediate_size"):
        shared += 3 * hidden * int(c["shared_expert_intermediate_size"]) / tp
    return routed + shared + hidden * experts, routed


def _moe_layers(c: Mapping, layers: int) -> int:
    if not _get(c, "n_routed_experts", "num_local_experts", "num_experts"):
        return 0
    if "first_k_dense_replace" in c:
        return layers - int(c["first_k_dense_replace"])
    if "expert_layer_period" in c:
        period, offset = int(c["expert_layer_period"]), int(c.get("expert_layer_offset") or 0)
        return (layers - 1 - offset) // period + 1 if 0 <= offset < layers else 0  # layers i with i % period == offset
    return layers // int(c.get("decoder_sparse_step") or 1)


def _vision_params(config: Mapping) -> float:
    v = config.get("vision_config")
    if not isinstance(v, Mapping):
        return 0.0
    hidden = int(_get(v, "hidden_size", "embed_dim", default=0))
    depth = int(_get(v, "depth", "num_hidden_layers", "num_layers", default=0))
    inter = int(_get(v, "intermediate_size", default=4 * hidden))
    return depth * (4 * hidden * hidden + 3 * hidden * inter)


def weight_bytes(hf_config: Mapping, facts: ModelFacts, *, tp: int = 1, pp: int = 1, quantization: str | None = None,
                 model_dir: str | None = None) -> WeightBytes:
    """The weights on the busiest GPU: its TP shard of the largest pipeline stage. With a checkpoint
    folder holding *.safetensors, the whole model's bytes are the headers' (checkpoint.py) and the
    config's count only says which share of them one GPU holds (sharded, replicated, per stage);
    not with an online --quantization of an unquantized checkpoint (vLLM converts while loading)."""
    counted = _counted(hf_config, facts, tp, pp, quantization)
    online = quantization is not None and quantization_method(hf_config, None) is None
    try:
        stored = None if online else checkpoint_bytes(model_dir, DTYPE_BYTES.get(facts.dtype, 2.0))
    except UserInputError as exc:  # vLLM would fail loading it; the plan keeps the config's count
        return replace(counted, note=f"{exc.message}: weights counted from config.json instead")
    if stored is None:
        return counted
    whole = _counted(hf_config, facts, 1, 1, quantization).total
    share = counted.total / whole if whole else 1.0
    return replace(counted, total=int(stored.total * share), from_checkpoint=True)


def _counted(hf_config: Mapping, facts: ModelFacts, tp: int, pp: int, quantization: str | None) -> WeightBytes:
    c = hf_config.get("text_config") or hf_config
    if not isinstance(c, Mapping) or "hidden_size" not in c:
        c = {**hf_config, **(c if isinstance(c, Mapping) else {})}
    hidden, layers = int(c["hidden_size"]), int(c.get("num_hidden_layers") or 1)
    method = quantization_method(hf_config, quantization)
    dtype_bytes = DTYPE_BYTES.get(facts.dtype, 2.0)
    linear_bytes = QUANT_BYTES.get(method or "", dtype_bytes)
    layout = facts.hybrid_layout
    attention_layers = layout.attention_layers if layout else (0 if facts.is_attention_free else layers)
    mixer_layers = layout.mamba_layers if layout else (layers if facts.is_attention_free else 0)
    pattern = str(c.get("hybrid_override_pattern") or "")
    mlp_layers = pattern.count("-") if pattern else (0 if facts.is_attention_free else layers)
    moe_layers = pattern.count("E") if pattern else _moe_layers(c, layers)
    moe, routed = _moe_params(c, tp) if moe_layers else (0.0, 0.0)
    attention = attention_layers * _attention_params(c, tp, facts.head_size)
    mixers = mixer_layers * _mixer_params(layout, hidden, tp) if layout and mixer_layers else 0.0
    dense = (mlp_layers - (0 if pattern else moe_layers)) * _mlp_params(c, tp, gated=not pattern)
    body = attention + mixers + dense + moe_layers * moe
    experts_bytes = linear_bytes
    if method == "mxfp4":  # gpt-oss: only the experts are mxfp4, attention stays bf16
        body_bytes = (body - moe_layers * routed) * dtype_bytes + moe_layers * routed * linear_bytes
    else:
        body_bytes = body * experts_bytes
    vocab = int(_get(c, "vocab_size", default=0) or hf_config.get("vocab_size") or 0)
    vocab_shard = math.ceil(vocab / (VOCAB_PADDING * tp)) * VOCAB_PADDING
    # transformers' PretrainedConfig ties them unless the config says otherwise (Gemma's leave it out)
    tied = bool(_get(hf_config, "tie_word_embeddings", default=c.get("tie_word_embeddings", True)))
    embed_bytes = vocab_shard * hidden * dtype_bytes
    # pipeline: the busiest stage has ceil(layers / pp) layers plus the embedding (first) or the LM head (last)
    stage_share = math.ceil(layers / pp) / layers
    ends = embed_bytes * (2 if pp == 1 and not tied else 1)
    total = body_bytes * stage_share + ends + _vision_params(hf_config) * dtype_bytes / tp
    params = int(body * tp + vocab * hidden * (1 if tied else 2) + _vision_params(hf_config))
    return WeightBytes(int(total), linear_bytes, method, params)
