"""The tune worker child: its toolkit (torch, the kernel adapters, the timers), pre-build, and the items it measures."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.bench.worker.kernel_toolkit import KernelToolkit
    from attnsel.bench.worker.prebuild import error_text
    from attnsel.bench.worker.toolkit import DEFAULT_TOOLKIT

__all__ = [
    "DEFAULT_TOOLKIT",
    "KernelToolkit",
    "error_text",
]
__getattr__ = lazy_door(__name__, {
    "DEFAULT_TOOLKIT": "toolkit",
    "KernelToolkit": "kernel_toolkit",
    "error_text": "prebuild",
})
