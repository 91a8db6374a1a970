"""The tune plan: which (backend, block size, workload) rows to time, asked of the explain rules."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.bench.plan.build import Plan
    from attnsel.bench.plan.rules import (
        hybrid_block_size,
        rule_profile_choice,
        selector_inputs,
        vllm_default_choice,
        vllm_verdict,
    )
    from attnsel.bench.plan.shape import (
        TuneShape,
        check_kv_cache_dtype,
        default_head_layout,
        make_shape,
        shape_from_model,
    )
    from attnsel.bench.plan.workloads import (
        WORKLOAD_KINDS,
        WorkloadSpec,
        parse_workloads,
    )

__all__ = [
    "WORKLOAD_KINDS",
    "Plan",
    "TuneShape",
    "WorkloadSpec",
    "check_kv_cache_dtype",
    "default_head_layout",
    "hybrid_block_size",
    "make_shape",
    "parse_workloads",
    "rule_profile_choice",
    "selector_inputs",
    "shape_from_model",
    "vllm_default_choice",
    "vllm_verdict",
]
__getattr__ = lazy_door(__name__, {
    "Plan": "build",
    "TuneShape": "shape",
    "WORKLOAD_KINDS": "workloads",
    "WorkloadSpec": "workloads",
    "check_kv_cache_dtype": "shape",
    "default_head_layout": "shape",
    "hybrid_block_size": "rules",
    "make_shape": "shape",
    "parse_workloads": "workloads",
    "rule_profile_choice": "rules",
    "selector_inputs": "rules",
    "shape_from_model": "shape",
    "vllm_default_choice": "rules",
    "vllm_verdict": "rules",
})
