"""Hybrid attention + Mamba / linear-attention models: the KV block size vLLM really uses.

vLLM raises the attention block size of a hybrid model until one attention page holds at least
one Mamba (or GDN / KDA) state page, then pads the state page to the attention page
(docs/vllm-rules.md §10; `HybridAttentionMambaModelConfig` in 0.17-0.19,
`Platform._align_hybrid_block_size` from 0.20 on). This package answers that per vLLM version:

- `layout.py`: from a config.json to the state kind, its sizes and the layer counts (version-free);
- `pages.py`: state and attention page bytes, the aligned block size and the padding (per version,
  its rules in the version data's `hybrid` section);
- `groups.py`: the KV-cache groups and what one running request pins.
"""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.hybrid.layout import HybridLayout, hybrid_layout
    from attnsel.attention.hybrid.pages import (
        SOURCE,
        HybridAnswer,
        HybridSetup,
        align_hybrid_block_size,
    )

__getattr__ = lazy_door(__name__)
