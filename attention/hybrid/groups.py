"""KV-cache groups of a hybrid model and what one running request pins.

v1/core/kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`: layers with the same spec
form one type (all full-attention layers, all Mamba layers); the group size is the smallest
type's layer count (the largest when max < 1.5 x min); each type splits into ceil(n / size)
groups, the last one padded. Every group gives a running request its own block table, so a
request holds at least one block per attention group and, per Mamba group, 1 block (cache mode
"none" / "all") or 2 + prefill-checkpoint blocks ("align": `MambaSpec.max_memory_usage_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class KvCacheGroups:
    group_size: int
    attention_groups: int
    mamba_groups: int
    padding_layers: int
    blocks_pinned_per_request: int

    def to_dict(self) -> dict:
        return {"group_size": self.group_size, "attention_groups": self.attention_groups,
                "mamba_groups": self.mamba_groups, "padding_layers": self.padding_layers,
                "blocks_pinned_per_request": self.blocks_pinned_per_request}


def split_types(counts: list[int]) -> tuple[int, list[int]]:
    """(group size, groups per type) for layer types of these counts: the group size is the smallest
    count, or the largest when the counts are within 1.5x of each other (kv_cache_planning.py:521-532
    @ 0.33.0); each type takes ceil(count / size) groups. Used for any mix of types (full attention,
    sliding window, Mamba)."""
    present = [n for n in counts if n > 0]
    size = min(present)
    if max(present) < size * 1.5:
        size = max(present)
    return size, [math.ceil(n / size) if n else 0 for n in counts]


def kv_cache_groups(attention_layers: int, mamba_layers: int, mode: str, checkpoint_blocks: int = 0) -> KvCacheGroups:
    counts = [n for n in (attention_layers, mamba_layers) if n > 0]
    size, (attention_groups, mamba_groups) = split_types([attention_layers, mamba_layers])
    padding = sum((size - n % size) % size for n in counts)
    per_mamba_group = 2 + checkpoint_blocks if mode == "align" else 1
    return KvCacheGroups(size, attention_groups, mamba_groups, padding,
                         attention_groups + mamba_groups * per_mamba_group)
