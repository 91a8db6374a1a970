"""Rules that are code in vLLM 0.20.0: what differs from 0.21 (this profile's base, the release after).
Read in the release's own source (bench/tools/selection_source.py), checked with
bench/tools/parity_live.py; each method names the file of vllm/ it follows (restated, not copied).
"""

from __future__ import annotations

from attnsel.attention.versions import vllm_0_21


class Rules(vllm_0_21.Rules):
    # --- vllm/v1/attention/backends/fa_utils.py get_flash_attn_version ---------------------------
    @staticmethod
    def _fa3_upgrades_to_fa4(head_size: int | None, head_size_v: int | None, has_sinks: bool) -> bool:
        # only "Diff-KV with sinks" upgrades FA3 to FA4 on SM90 (0.21 adds head_size > 256)
        return has_sinks and head_size is not None and head_size_v is not None and head_size != head_size_v
