"""The tune plan: which (backend, block size, workload) rows to time, asked of the explain rules."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
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

__getattr__ = lazy_door(__name__)
