"""How one GPU's KV cache is laid out in block ids, and what one request of n tokens holds of it.

vLLM's hybrid allocator (v1/core/kv_cache_planning.py @ 0.33.0; kv_cache_utils.py before): layers with
the same spec form one type (full attention, sliding window of one size, Mamba state), every type is
split into groups of `group_size` layers (`_get_kv_cache_groups_uniform_page_size`, :416-556, the group size :521-532), and all
groups draw block ids from one pool. One block id costs a page in every layer of the widest group
(`_get_kv_cache_bytes_per_block`, :574). A request holds, per group, the blocks its spec's
`max_memory_usage_bytes` asks for (`_max_memory_usage_bytes_from_groups`, :1253-1285; the same sum is
the divisor of `get_max_concurrency_for_kv_cache_config`, kv_cache_utils.py:1061-1094):
- full attention: cdiv(n, block_size) (kv_cache_interface.py:643-648 `AttentionSpec`);
- sliding window: cdiv(min(window - 1 + in-flight tokens, n), block_size) + 1, the +1 because the
  window need not start on a block boundary (kv_cache_interface.py:918-955 `SlidingWindowSpec`); the
  in-flight tokens are `VllmConfig.max_in_flight_tokens` = concurrent batches x max_num_batched_tokens
  (config/vllm.py:588-609 @ 0.33.0: 2 with async scheduling, the default; pp + 1 with pipeline
  parallelism on the V2 model runner), one batch's tokens before 0.26.0;
- a Mamba group: 1 block ("none" cache mode), 2 + checkpoint blocks ("align"), attention/hybrid/groups.py.
Attention sinks (gpt-oss) are a learned per-head logit, not a cache: its layers are full attention and
sliding window like any other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnsel.attention.hybrid.groups import split_types
from attnsel.attention.memory.weights import DTYPE_BYTES
from attnsel.attention.rules import is_fp8

if TYPE_CHECKING:
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.rules import Explanation


@dataclass(frozen=True)
class KvLayout:
    """One GPU's KV cache in vLLM's terms. `full_groups` / `sliding_groups` / `state_blocks`: per request,
    the groups of each type (a Mamba type's blocks already multiplied out)."""

    block_size: int
    page_bytes: float  # one layer's page: one block of one layer
    group_size: int  # layers per group: a block id costs group_size pages
    full_groups: int
    sliding_groups: int = 0
    window: int = 0  # sliding window (tokens)
    in_flight_tokens: int = 0  # VllmConfig.max_in_flight_tokens
    state_blocks: int = 0  # blocks a request pins in the Mamba groups
    null_block_reserved: bool = False  # the check plans against the pool less BlockPool's null block (0.29+)

    @property
    def block_bytes(self) -> float:
        return self.page_bytes * self.group_size

    @property
    def has_state(self) -> bool:
        return self.state_blocks > 0

    def sliding_blocks(self, n: int) -> int:
        """SlidingWindowSpec.max_admission_blocks_per_request (kv_cache_interface.py:918-940 @ 0.33.0)."""
        return math.ceil(min(self.window - 1 + self.in_flight_tokens, n) / self.block_size) + 1

    def blocks_per_request(self, n: int) -> int:
        """Block ids one request of n tokens holds over all groups."""
        blocks = self.full_groups * math.ceil(n / self.block_size) + self.state_blocks
        if self.sliding_groups:
            blocks += self.sliding_groups * self.sliding_blocks(n)
        return blocks

    def needed_bytes(self, n: int) -> float:
        """`_max_memory_usage_bytes_from_groups`: bytes per block x the blocks of one request."""
        return self.block_bytes * self.blocks_per_request(n)

    def check_bytes(self, available: float) -> float:
        """What vLLM's check compares with the need: the pool less the null block where it reserves it
        (kv_cache_planning.py:1533-1543 @ 0.33.0, `check_memory`; from 0.29.0)."""
        return available - self.block_bytes if self.null_block_reserved and available > 0 else available

    def search_max_len(self, available: float, limit: int) -> int:
        """`_estimate_max_model_len_from_groups` (:1288-1334): the longest request that fits (binary search)."""
        if self.needed_bytes(1) > available:
            return 0
        low, high, best = 1, limit, 1
        while low <= high:
            mid = (low + high) // 2
            if self.needed_bytes(mid) <= available:
                best, low = mid, mid + 1
            else:
                high = mid - 1
        return best


def text_config(hf_config: Mapping) -> Mapping:
    text = hf_config.get("text_config")
    return text if isinstance(text, Mapping) and "hidden_size" in text else hf_config


def kv_bytes_per_token_layer(facts: ModelFacts, kv_cache_dtype: str | None, tp: int) -> float:
    item = 1.0 if is_fp8(kv_cache_dtype or "auto") else DTYPE_BYTES.get(facts.dtype, 2.0)
    if facts.use_mla:  # one latent head, replicated on every rank (MLAAttentionSpec)
        return ((facts.kv_lora_rank or 512) + (facts.qk_rope_head_dim or 64)) * item
    kv_heads = max(1, facts.num_kv_heads // tp)
    return 2 * kv_heads * facts.head_size * item


def sliding_split(hf_config: Mapping, facts: ModelFacts, layers: int) -> int:
    """How many layers use the sliding window: the config's layer_types, Gemma-3's pattern (every
    Nth layer global), Gemma-2's alternation, else all of them when vLLM applies the window."""
    if not facts.sliding_window:
        return 0
    c = text_config(hf_config)
    types = c.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types[:layers] if t == "sliding_attention")
    pattern = c.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0:
        return layers - layers // pattern
    if facts.model_type in ("gemma2", "gemma3", "gemma3_text"):
        return layers // 2
    return layers


def in_flight_tokens(rules: Mapping, batched_tokens: int, pp: int) -> int:
    """VllmConfig.max_in_flight_tokens (config/vllm.py:588-609 @ 0.33.0, 0.26.0+): async scheduling (on by
    default, :1685-1719) keeps 2 batches in flight, pp + 1 with pipeline parallelism; before 0.26.0 the
    window's bound took one batch (`in_flight_batches`: "one" in the data)."""
    if rules.get("in_flight_batches", "one") == "one":
        return batched_tokens
    return (pp + 1 if pp > 1 else 2) * batched_tokens


def kv_layout(hf_config: Mapping, facts: ModelFacts, explanation: Explanation | None, rules: Mapping, *, tp: int, pp: int,
              kv_cache_dtype: str | None, batched_tokens: int) -> KvLayout:
    """The busiest stage's layout: a hybrid model's from attention/hybrid (its aligned block size and
    groups), any other from its layers' specs and the block size `explain` settled."""
    null_block = bool(rules.get("null_block_reserved"))
    hybrid = getattr(explanation, "hybrid", None) if explanation is not None else None
    if hybrid is not None:
        groups = hybrid.groups
        return KvLayout(hybrid.block_size, hybrid.attention_page_bytes, max(1, math.ceil(groups.group_size / pp)),
                        groups.attention_groups, state_blocks=groups.blocks_pinned_per_request - groups.attention_groups,
                        null_block_reserved=null_block)
    block = (getattr(explanation, "block_size", None) if explanation is not None else None) or 16
    layers = math.ceil(int(text_config(hf_config).get("num_hidden_layers") or 1) / pp)
    page = kv_bytes_per_token_layer(facts, kv_cache_dtype or facts.kv_cache_dtype_forced, tp) * block
    sliding = sliding_split(hf_config, facts, layers)
    size, (full_groups, sliding_groups) = split_types([layers - sliding, sliding])  # attention/hybrid's grouping
    return KvLayout(block, page, size, full_groups, sliding_groups, int(facts.sliding_window or 0),
                    in_flight_tokens(rules, batched_tokens, pp), null_block_reserved=null_block)
