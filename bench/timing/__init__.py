"""Timing GPU work: statistics, the GPU timers (CUDA graphs, cold L2, CUPTI), the launch-mode label."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.bench.timing.gpu import measure_first_call
    from attnsel.bench.timing.launch_mode import choose_launch, mode_label

__all__ = [
    "choose_launch",
    "measure_first_call",
    "mode_label",
]
__getattr__ = lazy_door(__name__, {
    "choose_launch": "launch_mode",
    "measure_first_call": "gpu",
    "mode_label": "launch_mode",
})
