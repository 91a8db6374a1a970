"""A model's config.json as vLLM reads it: where it comes from, validation, dtype, heads, kind, per-version model rules."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.model.config import (
        derive_model_facts,
        list_catalog,
        load_model_config,
    )
    from attnsel.attention.model.heads import kv_heads_split_assertion
    from attnsel.attention.model.kind import attention_layer_count, with_text_defaults
    from attnsel.attention.model.validation import (
        check_heads,
        check_hybrid_flags,
        check_names,
        check_parallel,
        check_positive_number,
        check_request,
        check_size,
        check_tune_flags,
        kind_of,
    )

__getattr__ = lazy_door(__name__)
