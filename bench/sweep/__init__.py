"""Running a tune plan: one worker process per backend, lanes per GPU, rows appended as they arrive."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
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

__getattr__ = lazy_door(__name__)
