"""How many CPU cores this process may run on.

`os.cpu_count()` counts the host's cores; a process pinned by `taskset`, a container's cpuset or a
batch scheduler may use fewer, and sizing compile jobs or import workers by the host's count
oversubscribes the cores it has (64 ninja jobs on 16 cores). The affinity mask is the truth where
the platform has one (Linux); elsewhere the host's count.
"""

from __future__ import annotations

import os


def usable_cpu_count() -> int:
    """Cores this process may run on (at least 1).

    >>> usable_cpu_count() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)
