"""What an explicit --block-size does to a hybrid model, per vLLM version: the size vLLM ends with
(raised to fit one Mamba state, or kept with the Mamba page padded) or the error it raises (the
argument parser's, the backend's "User-specified --block-size", 0.33's "Aligned KV cache block size
... is not supported"). `explain` shows this instead of advising a --block-size for a hybrid model:
vLLM computes that size itself (interface.py `_align_hybrid_block_size`), and a pinned one does not
follow a later dtype, TP or release change (vllm#53142, vllm#38979)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnsel.attention.selector import explain_selection

if TYPE_CHECKING:
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.versions import RuleProfile

SIZES = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class ExplicitBlockSize:
    block_size: int  # the --block-size given
    ends_with: int | None  # the size vLLM uses, None when it raises
    padding_pct: float | None
    error: str | None
    error_type: str | None

    def to_dict(self) -> dict:
        return {"block_size": self.block_size, "ends_with": self.ends_with, "padding_pct": self.padding_pct,
                "error": self.error, "error_type": self.error_type}


def explicit_block_sizes(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext, computed: int | None) -> tuple[ExplicitBlockSize, ...]:
    """The answer for each of SIZES and vLLM's own size (`computed`), as if given as --block-size."""
    out = []
    for size in sorted({*SIZES, *((computed,) if computed else ())}):
        expl = explain_selection(profile, inputs.replace(block_size=size), ctx)
        hybrid = expl.hybrid
        out.append(ExplicitBlockSize(size, None if expl.error else expl.block_size,
                                     hybrid.padding_pct if hybrid is not None and not expl.error else None,
                                     expl.error, expl.error_type))
    return tuple(out)
