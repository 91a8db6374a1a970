"""The state shapes and dtypes of one Mamba / linear-attention layer (mamba_utils.py
`MambaStateShapeCalculator`, `MambaStateDtypeCalculator`; no speculative tokens). Shapes are per
GPU: vLLM's `divide` asserts that TP splits them evenly."""

from __future__ import annotations

from attnsel.attention.hybrid.layout import HybridLayout
from attnsel.attention.rules import VllmRaises


def _divide(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise VllmRaises(f"{value} is not divisible by {tp}", exc_type="AssertionError", phase="model")
    return value // tp


def _extra_groups(n_groups: int, tp: int) -> int:
    # extra_groups_for_head_shards: groups are replicated so each head shard keeps its group
    return 0 if n_groups % tp == 0 else tp - n_groups


def state_shapes(layout: HybridLayout, tp: int) -> tuple[tuple[int, ...], ...]:
    s = layout.size
    if layout.kind == "mamba1":
        width = _divide(s("intermediate_size"), tp, "intermediate_size")
        return (s("conv_kernel") - 1, width), (width, s("state_size"))
    if layout.kind == "mamba2":
        groups = s("n_groups") + _extra_groups(s("n_groups"), tp)
        conv_dim = s("intermediate_size") + 2 * groups * s("state_size")
        return ((s("conv_kernel") - 1, _divide(conv_dim, tp, "conv_dim")),
                (_divide(s("num_heads"), tp, "num_heads"), s("head_dim"), s("state_size")))
    if layout.kind == "gdn":
        conv_dim = s("head_k_dim") * s("num_k_heads") * 2 + s("head_v_dim") * s("num_v_heads")
        return ((s("conv_kernel") - 1, _divide(conv_dim, tp, "conv_dim")),
                (_divide(s("num_v_heads"), tp, "num_v_heads"), s("head_v_dim"), s("head_k_dim")))
    conv_dim = 3 * s("num_heads") * s("head_dim")  # kda: q, k and v projections
    return ((s("conv_kernel") - 1, _divide(conv_dim, tp, "conv_dim")),
            (_divide(s("num_heads"), tp, "num_heads"), s("head_dim"), s("head_dim")))


def state_dtypes(rules: dict, kind: str, model_dtype: str, conv_flag: str, ssm_flag: str) -> tuple[str, str]:
    """`get_kv_cache_torch_dtype`: "auto" is the model dtype; the SSM / temporal state follows the
    conv state unless --mamba-ssm-cache-dtype says otherwise. KDA's recurrent state is float32
    ("kda_recurrent": "float32" before 0.33; 0.33 also takes float32 / bfloat16 from the flag)."""
    conv = model_dtype if conv_flag == "auto" else conv_flag
    if kind == "kda":
        if rules.get("kda_recurrent") == "float32" or ssm_flag == "auto":
            return conv, "float32"
        if ssm_flag not in ("float32", "bfloat16"):
            raise VllmRaises(f"KDA recurrent state supports only auto, float32, and bfloat16; got {ssm_flag}")
        return conv, ssm_flag
    return conv, (conv if ssm_flag == "auto" else ssm_flag)
