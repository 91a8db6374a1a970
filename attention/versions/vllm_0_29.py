"""Rules that are code in vLLM 0.29.0 (98dff2a81), written as what it does differently from 0.30
(the profiles of 0.26-0.32 are derived downward from 0.33, each module subclasses the next
release's `Rules`). Read in the release's wheel, checked with bench/tools/parity_live.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.versions import vllm_0_24, vllm_0_30

if TYPE_CHECKING:
    from attnsel.attention.rules import NamedRule, SelectionContext, SelectorInputs


class Rules(vllm_0_30.Rules):
    # --- vllm/platforms/cuda.py _get_backend_priorities: no head-size or mm-prefix lists yet ------
    _mla_other_priorities = vllm_0_24.Rules._mla_other_priorities

    def _dense_priorities(self, inputs: SelectorInputs, ctx: SelectionContext) -> list[str]:
        prio = self.profile.data["priorities"]
        blackwell = ctx.capability[0] == 10 and not inputs.use_non_causal
        return list(prio["blackwell"] if blackwell else prio["other"])

    # --- flashinfer.py FlashInferBackend.supports_sink: SM12x XQA and SM100 only (not SM90) -------
    def _sink_flashinfer(self, rule: NamedRule, ctx: SelectionContext) -> bool:
        return tuple(ctx.capability) != (9, 0) and super()._sink_flashinfer(rule, ctx)

    # --- mla/flashinfer_mla_sparse.py: no PCP+DCP or no-rope checks yet -------------------------
    def _combination_flashinfer_mla_sparse(self, inputs: SelectorInputs, ctx: SelectionContext,
                                           name: str = "FLASHINFER_MLA_SPARSE") -> str | None:
        return vllm_0_24.Rules._combination_flashinfer_mla_sparse(self, inputs, ctx)
