"""Compile jobs and import workers are sized by the cores this process may run on, not the host's:
a tune pinned to 16 of 64 cores (taskset, a container's cpuset) must not start 64 ninja jobs."""

import os
import subprocess
import sys

import pytest

from attnsel.bench.sweep.run import import_slots
from attnsel.probe import usable_cpu_count


def test_usable_cores_are_the_affinity_mask():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    assert usable_cpu_count() == len(os.sched_getaffinity(0))


def test_a_process_pinned_to_one_core_imports_one_worker_at_a_time():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    one_core = sorted(os.sched_getaffinity(0))[0]
    code = (f"import os; os.sched_setaffinity(0, {{{one_core}}}); "
            "from attnsel.probe import usable_cpu_count; from attnsel.bench.sweep.run import import_slots; "
            "print(usable_cpu_count(), import_slots())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "1"]


def test_import_slots_follow_the_cores_given():
    assert import_slots(16) == 4 and import_slots(64) == 16 and import_slots(3) == 1
