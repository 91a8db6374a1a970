"""The tune worker child: its toolkit (torch, the kernel adapters, the timers), pre-build, and the items it measures."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.bench.worker.kernel_toolkit import KernelToolkit
    from attnsel.bench.worker.prebuild import error_text
    from attnsel.bench.worker.toolkit import DEFAULT_TOOLKIT

__getattr__ = lazy_door(__name__)
