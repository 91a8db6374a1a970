"""The hybrid (attention + Mamba / linear attention) section of `explain`: what vLLM computes to
size the KV block (attention/hybrid). Render only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from attnsel.attention.explain.explicit_block_sizes import ExplicitBlockSize
    from attnsel.attention.hybrid.pages import HybridAnswer
    from attnsel.attention.rules import Explanation

STATE_NAMES = {"mamba1": "Mamba-1 state", "mamba2": "Mamba-2 state", "gdn": "Gated DeltaNet state",
               "kda": "Kimi Delta Attention state"}


def hybrid_to_dict(answer: HybridAnswer | None) -> dict | None:
    return None if answer is None else answer.to_dict()


def _kib(size: int) -> str:
    return f"{size:,} B ({size / 1024:,.1f} KiB)"


def hybrid_lines(answer: HybridAnswer, user_block_size: int | None) -> list[str]:
    groups = answer.groups
    shapes = " + ".join(f"{'x'.join(map(str, s))} {d}" for s, d in zip(answer.state_shapes, answer.state_dtypes))
    padding = "none (pages equal)" if answer.padding_pct is None else f"{answer.padding_pct:.2f}%"
    lines = [
        f"{STATE_NAMES.get(answer.kind, answer.kind)} page per layer: {_kib(answer.state_page_bytes)} = {shapes}",
        f"Attention page per token per layer: {answer.attention_page_bytes_per_token:,} B; "
        f"block {answer.block_size} tokens (alignment {answer.alignment}) = {_kib(answer.attention_page_bytes)}",
        f"Mamba page padding: {padding}",
        f"Prefix caching: {'on' if answer.prefix_caching else 'off'}, mamba cache mode '{answer.mamba_cache_mode}'"
        + (f", mamba block size {answer.mamba_block_size}" if answer.mamba_block_size else ""),
        f"KV-cache groups: {groups.attention_groups} attention + {groups.mamba_groups} state "
        f"(group size {groups.group_size} layers" + (f", {groups.padding_layers} padding" if groups.padding_layers else "")
        + ")",
        f"Per running request at least {groups.blocks_pinned_per_request} blocks = "
        f"{groups.blocks_pinned_per_request * answer.block_size:,} tokens of KV-cache capacity",
    ]
    if user_block_size is not None and user_block_size != answer.block_size:
        lines.append(f"vLLM overrides your --block-size {user_block_size} with {answer.block_size}")
    return lines


def render_hybrid(answer: HybridAnswer | None, user_block_size: int | None, console: Console) -> None:
    if answer is None:
        return
    console.print("Hybrid model (what vLLM computes for the KV block):")
    for line in hybrid_lines(answer, user_block_size):
        console.print(f"  {line}", markup=False)


def block_size_advice_lines(expl: Explanation) -> list[str]:
    """Under the flags line of a hybrid model: why no --block-size, and what one would do."""
    if expl.hybrid is None or not expl.explicit_block_sizes:
        return []
    lines = [f"No --block-size: vLLM computes a hybrid model's KV block from its Mamba state ({expl.block_size} here); "
             "a pinned size does not follow a later dtype, TP or release change (vllm#53142, vllm#38979)."]
    lines.append(f"An explicit --block-size on vLLM {expl.vllm_version}:")
    for row in expl.explicit_block_sizes:
        lines.append(f"  {row.block_size}: {_explicit_outcome(row)}")
    return lines


def _explicit_outcome(row: ExplicitBlockSize) -> str:
    if row.error is not None:
        return f"vLLM raises {row.error_type}: {row.error}"
    if row.ends_with != row.block_size:
        return f"raised to {row.ends_with} (one Mamba state per attention page)"
    padding = "pages equal" if row.padding_pct is None else f"Mamba page padded {row.padding_pct:.2f}%"
    return f"kept ({padding})"


def explicit_to_dict(expl: Explanation) -> list[dict]:
    return [row.to_dict() for row in expl.explicit_block_sizes]
