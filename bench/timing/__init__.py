"""Timing GPU work: statistics, the GPU timers (CUDA graphs, cold L2, CUPTI), the launch-mode label."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.bench.timing.gpu import measure_first_call
    from attnsel.bench.timing.launch_mode import choose_launch, mode_label

__getattr__ = lazy_door(__name__)
