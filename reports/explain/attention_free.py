"""`explain` for a model without attention layers (pure Mamba: mamba, mamba2, falcon_mamba...):
there is no backend to pick, so the answer says that instead of a table of head-size verdicts.

vLLM marks these model classes `IsAttentionFree` (docs/vllm-rules.md §6 "hybrid / attention-free"); no
layer calls the attention selector, and the KV cache holds Mamba states, whose block size
`MambaModelConfig.verify_and_update_config` sets (vllm/model_executor/models/config.py):
max_model_len without prefix caching (one state per request), --block-size with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console

from attnsel.reports.explain.table import EXPLAIN_SCHEMA, model_line

if TYPE_CHECKING:
    from attnsel.attention.explain.document import (
        AttentionFreeAnswer,
        ModelRef,
        ModelSection,
    )
    from attnsel.attention.rules import Explanation

NO_BACKEND = "vLLM picks no attention backend (no layer asks the attention selector for one)"
MAMBA_BLOCK = ("the KV-cache block size follows the Mamba state, not an attention backend: vLLM sets "
               "mamba_block_size to max_model_len (one state per request) without prefix caching, or to "
               "--block-size with prefix caching (mamba_cache_mode 'align' or 'all'); "
               "MambaModelConfig.verify_and_update_config")


def attention_free_line(model: ModelSection | ModelRef | None) -> str:
    """One line for the `--gpu all` matrix and the single-GPU answer."""
    name = (model["name"] if model else None) or "this model"
    model_type = model["model_type"] if model else None
    kind = f" (model_type {model_type})" if model_type else ""
    return f"{name}{kind} has no attention layers: {NO_BACKEND}; {MAMBA_BLOCK}"


def attention_free_to_dict(expl: Explanation, model: ModelSection, ignored_flags: Sequence[str]) -> AttentionFreeAnswer:
    """The `explain --json` document for an attention-free model: the usual keys, with no backends."""
    return {
        "schema": EXPLAIN_SCHEMA,
        "profile": expl.profile,
        "profile_vllm_version": expl.vllm_version,
        "profile_reason": expl.profile_reason,
        "gpu": {"name": expl.gpu_name, "capability": f"{expl.capability[0]}.{expl.capability[1]}"},
        "attention_free": True,
        "answer": attention_free_line(model),
        "inputs": None,
        "backends": [],
        "selected": None,
        "block_size": None,
        "block_size_rule": MAMBA_BLOCK,
        "ignored_flags": list(ignored_flags),
        "warnings": [],
        "logs": [],
        "error": None,
        "error_type": None,
        "vllm_args": [],
        "notes": list(model["notes"] or []),
        "model": model,
        "exit_code": 0,
    }


def render_attention_free(expl: Explanation, model: ModelSection, ignored_flags: Sequence[str],
                          console: Console) -> None:
    """The single-GPU answer: the model line, then what there is instead of a backend table."""
    console.print(model_line(model), markup=False)
    gpu = f"{expl.gpu_name} " if expl.gpu_name else ""
    console.print(f"attnsel explain · rule profile {expl.profile} (vLLM {expl.vllm_version}) · GPU {gpu}"
                  f"(compute capability {expl.capability[0]}.{expl.capability[1]})", markup=False)
    console.print(attention_free_line(model), markup=False)
    for flag in ignored_flags:
        console.print(f"Note: {flag} has nothing to act on here (vLLM builds no attention layer)", markup=False)
    for line in model["warnings"] or []:
        console.print(f"  vLLM: {line}", markup=False)
