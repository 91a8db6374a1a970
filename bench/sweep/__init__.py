"""Running a tune plan: one worker process per backend, lanes per GPU, rows appended as they arrive."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.bench.sweep.multi_gpu import gpu_ordinals
    from attnsel.bench.sweep.results import STATUS_OK, STATUSES
    from attnsel.bench.sweep.run import (
        CHECK_POLICIES,
        SweepOptions,
        SweepProgress,
        items_for,
        probe_device,
        run_sweep,
        skipped_rows,
    )

__all__ = [
    "CHECK_POLICIES",
    "STATUSES",
    "STATUS_OK",
    "SweepOptions",
    "SweepProgress",
    "gpu_ordinals",
    "items_for",
    "probe_device",
    "run_sweep",
    "skipped_rows",
]
__getattr__ = lazy_door(__name__, {
    "CHECK_POLICIES": "run",
    "STATUSES": "results",
    "STATUS_OK": "results",
    "SweepOptions": "run",
    "SweepProgress": "run",
    "gpu_ordinals": "multi_gpu",
    "items_for": "run",
    "probe_device": "run",
    "run_sweep": "run",
    "skipped_rows": "run",
})
