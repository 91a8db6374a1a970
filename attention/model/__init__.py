"""A model's config.json as vLLM reads it: where it comes from, validation, dtype, heads, kind, per-version model rules."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.attention.model.config import (
        derive_model_facts,
        list_catalog,
        load_model_config,
    )
    from attnsel.attention.model.heads import kv_heads_split_assertion
    from attnsel.attention.model.kind import attention_layer_count, with_text_defaults
    from attnsel.attention.model.rules import model_rules_from_data
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

__all__ = [
    "attention_layer_count",
    "check_heads",
    "check_hybrid_flags",
    "check_names",
    "check_parallel",
    "check_positive_number",
    "check_request",
    "check_size",
    "check_tune_flags",
    "derive_model_facts",
    "kind_of",
    "kv_heads_split_assertion",
    "list_catalog",
    "load_model_config",
    "model_rules_from_data",
    "with_text_defaults",
]
__getattr__ = lazy_door(__name__, {
    "kv_heads_split_assertion": "heads",
    "attention_layer_count": "kind",
    "check_heads": "validation",
    "check_hybrid_flags": "validation",
    "check_names": "validation",
    "check_parallel": "validation",
    "check_positive_number": "validation",
    "check_request": "validation",
    "check_size": "validation",
    "check_tune_flags": "validation",
    "derive_model_facts": "config",
    "list_catalog": "config",
    "kind_of": "validation",
    "load_model_config": "config",
    "model_rules_from_data": "rules",
    "with_text_defaults": "kind",
})
