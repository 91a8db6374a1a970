"""vLLM's start-up refusals a memory plan can predict, besides the KV-cache check itself.

Each check is vLLM's own condition and text (the texts are the release data's `memory.checks`, with
the module and lines that raise them); code here only fills the numbers in:
- `derived_max_len`: config/model.py `_get_and_verify_max_len` (0.33.0:2545-2684, 0.34.0:2589-2728, the same code):
  a --max-model-len above what vLLM derives from the config (the smallest of the length keys,
  transformers_utils/model_arch_config_convertor.py:376-406, times the RoPE scaling factor);
- `batched_tokens_below_len` / `batched_tokens_below_seqs`: config/scheduler.py `verify_max_model_len`
  (0.33.0:317-336, 0.34.0:361-380), after engine/arg_utils.py sets the defaults
  (`_set_default_max_num_seqs_and_batched_tokens_args`, 0.33.0:3151-3224);
- `startup_free`: v1/worker/utils.py `request_memory` (0.33.0:761-770, 0.34.0:783-797): the worker asks
  for utilization x the device's total and stops when less than that is free at start (on a GPU with
  nothing else on it: the total less the CUDA context, the data's `context_gib`); 0.34's extensible
  cache skips it (the budget is only a cap there);
- `mamba_blocks`: config/compilation.py `resolve_cudagraph_mode_and_sizes` (0.33.0:1517-1532,
  0.34.0:1666-1681): with full CUDA graphs each decode sequence needs its own Mamba block, so a hybrid
  model whose KV pool has fewer blocks than max_num_seqs stops before capturing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnsel.attention.memory.cache import KvLayout, text_config
from attnsel.attention.memory.verdict import Verdict

if TYPE_CHECKING:
    from attnsel.attention.memory.plan import MemoryFlags
    from attnsel.attention.rules import Explanation

# model_arch_config_convertor.py:376-393 @ 0.33.0 `possible_keys`, in vLLM's order
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# config/model.py @ 0.33.0: RoPE types whose max_position_embeddings is already scaled (no factor applied)
SCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
DEFAULT_LEN = 2048  # no length key at all: vLLM assumes 2048 and warns


@dataclass(frozen=True)
class DerivedLength:
    """What vLLM derives as the model's longest length, as its error prints it."""

    value: int | float
    key: str | None
    model_max_length: int | None
    default_len: int  # max_model_len when none is given (LongRoPE: the original length)

    @property
    def shown(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Refusal:
    verdict: Verdict
    message: str
    source: str
    fix: str


def _rope_parameters(c: Mapping) -> list[Mapping]:
    """transformers' rope_parameters (rope_scaling and rope_theta folded in; one dict, or one per layer type)."""
    params = c.get("rope_parameters")
    if isinstance(params, Mapping) and params and all(isinstance(v, Mapping) for v in params.values()):
        return [p for p in params.values() if p]
    if isinstance(params, Mapping) and params:
        return [params]
    scaling = c.get("rope_scaling")
    if isinstance(scaling, Mapping) and scaling:
        return [scaling]
    return [{"rope_type": "default"}] if c.get("rope_theta") is not None else []


def derived_max_model_len(hf_config: Mapping) -> DerivedLength:
    c = text_config(hf_config)
    value: int | float = float("inf")
    key = None
    for name in LENGTH_KEYS:
        length = c.get(name)
        if isinstance(length, (int, float)) and not isinstance(length, bool):
            if length < value:
                key = name
            value = min(value, length)
    if isinstance(c.get("model_max_length"), int):  # Command-R / Cohere: it wins (convertor.py:403-406)
        key, value = "model_max_length", c["model_max_length"]
    if value == float("inf"):
        value = DEFAULT_LEN
    rope = _rope_parameters(c)
    if rope and "gemma3" not in str(hf_config.get("model_type") or c.get("model_type") or ""):
        factor: int | float = 1.0
        for p in rope:
            if (p.get("rope_type") or p.get("type") or "default") not in SCALED_ROPE_TYPES:
                factor = p.get("factor", factor)
        value = value * (1.0 if factor is None else factor)
    default = int(value)
    if any((p.get("rope_type") or p.get("type")) == "longrope" for p in rope):
        default = int(c.get("original_max_position_embeddings") or value)
    model_max = c.get("model_max_length") if isinstance(c.get("model_max_length"), int) else None
    return DerivedLength(value, key, model_max, default)


def check_derived_len(checks: Mapping, derived: DerivedLength, max_model_len: int | None) -> Refusal | None:
    """A --max-model-len above the derived length (unless the config's model_max_length allows it)."""
    if "derived_max_len" not in checks or max_model_len is None or max_model_len <= derived.value:
        return None
    if derived.model_max_length is not None and max_model_len <= derived.model_max_length:
        return None
    rule = checks["derived_max_len"]
    text = rule["text"].format(max_model_len=max_model_len, key=derived.key, derived=derived.shown,
                               model_max_length=derived.model_max_length)
    return Refusal(Verdict.DERIVED_MAX_LEN, text, rule["source"],
                   f"--max-model-len {int(derived.value)} (the model's derived maximum)")


def check_scheduler(checks: Mapping, *, batched_tokens: int, seqs: int, max_len: int, chunked_prefill: bool) -> Refusal | None:
    if "batched_tokens_below_seqs" not in checks:
        return None
    if batched_tokens < max_len and not chunked_prefill:
        rule = checks["batched_tokens_below_len"]
        return Refusal(Verdict.BATCHED_TOKENS_BELOW_LEN,
                       rule["text"].format(max_num_batched_tokens=batched_tokens, max_model_len=max_len),
                       rule["source"], f"--max-num-batched-tokens {max_len} (or drop --no-enable-chunked-prefill)")
    if batched_tokens < seqs:
        rule = checks["batched_tokens_below_seqs"]
        return Refusal(Verdict.BATCHED_TOKENS_BELOW_SEQS,
                       rule["text"].format(max_num_batched_tokens=batched_tokens, max_num_seqs=seqs),
                       rule["source"], f"--max-num-seqs {batched_tokens} or --max-num-batched-tokens {seqs}")
    return None


def effective_batching(rules: Mapping, flags: MemoryFlags, default_tokens: int, seqs: int, max_len: int) -> int:
    """max_num_batched_tokens as arg_utils.py leaves it: a default one is raised to max_model_len
    without chunked prefill, then capped at max_num_seqs x max_model_len (0.33.0:3190-3224)."""
    if flags.max_num_batched_tokens is not None:
        return int(flags.max_num_batched_tokens)
    tokens = default_tokens
    if not chunked_prefill_on(flags):
        tokens = max(max_len, tokens)
    if rules.get("batched_tokens_capped"):
        tokens = min(seqs * max_len, tokens)
    return tokens


def chunked_prefill_on(flags: MemoryFlags) -> bool:
    """`ModelConfig.is_chunked_prefill_supported` for a generative decoder: on unless turned off."""
    value = getattr(flags, "enable_chunked_prefill", None)
    return True if value is None else bool(value)


def full_cudagraphs(flags: MemoryFlags, explanation: Explanation | None) -> bool:
    """FULL_AND_PIECEWISE is the default mode; it keeps full decode graphs unless --enforce-eager or an
    attention backend that never supports them (AttentionCGSupport.NEVER) sends it to PIECEWISE / NONE."""
    if getattr(flags, "enforce_eager", False):
        return False
    support = getattr(explanation, "cudagraph_support", None) if explanation is not None else None
    return str(support or "").upper() != "NEVER"


def check_startup_free(checks: Mapping, util: float, cuda_total: float, extensible: bool) -> Refusal | None:
    """utilization x total above what a GPU with nothing else on it has free when vLLM starts."""
    rule = checks.get("startup_free")
    if rule is None or extensible:
        return None
    gib = 2**30
    free = cuda_total - float(rule["context_gib"]) * gib
    requested = math.ceil(cuda_total * util)
    if requested <= free:
        return None
    text = rule["text"].format(free_gib=round(free / gib, 2), total_gib=round(cuda_total / gib, 2),
                               utilization=util, requested_gib=round(requested / gib, 2))
    return Refusal(Verdict.FREE_MEMORY, text, rule["source"],
                   f"--gpu-memory-utilization {math.floor(free / cuda_total * 100) / 100:g} (what is free at start)")


def check_mamba_blocks(checks: Mapping, cache: KvLayout, num_blocks: int, seqs: int, flags: MemoryFlags,
                       explanation: Explanation | None) -> Refusal | None:
    """max_num_seqs against the pool's block count (`kv_cache_config.num_blocks`: every block id of the
    pool, the null block included) for a model with Mamba layers under full CUDA graphs."""
    if "mamba_blocks" not in checks or not cache.has_state or not full_cudagraphs(flags, explanation) \
            or seqs <= num_blocks:
        return None
    rule = checks["mamba_blocks"]
    return Refusal(Verdict.MAMBA_BLOCKS, rule["text"].format(max_num_seqs=seqs, num_blocks=num_blocks),
                   rule["source"], f"--max-num-seqs {max(1, num_blocks)} (vLLM's bound: {num_blocks} Mamba cache blocks)")
