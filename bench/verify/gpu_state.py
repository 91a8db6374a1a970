"""The GPU verify's engines will run on, read over NVML: what it is, what memory it has now, and,
before each engine, whether the previous engine's memory has come back (bench/verify/run.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attnsel.bench.verify import plan as VP
from attnsel.errors import EnvironmentProblem

if TYPE_CHECKING:
    from attnsel.bench.tune.env_info import NvmlReader

MEMORY_RELEASE_WAIT_S = 90.0  # how long to wait for the previous engine's memory to come back


def read_gpu(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """GPU 0 as the engines will see it, with its memory now (NVML); no GPU -> exit 3."""
    from attnsel.bench.tune import env_info

    reader = env_info.NvmlReader(env)
    try:
        device = env_info.device_from_nvml(reader, env)
        if device is None:
            why = reader.error or "NVML sees no GPU this process may use"
            raise EnvironmentProblem(f"attnsel verify needs an NVIDIA GPU: {why}")
        device.update(gpu_memory(reader, device["nvml_index"]))
        return device
    finally:
        reader.close()


def gpu_memory(reader: NvmlReader, index: int) -> dict[str, Any]:
    memory = reader.session.get("nvmlDeviceGetMemoryInfo", index) if reader.session else None
    out: dict[str, Any] = {}
    if isinstance(memory, dict):
        out = {"memory_total_bytes": memory.get("total"), "memory_free_bytes": memory.get("free"),
               "memory_used_bytes": memory.get("used")}
    processes = reader.session.get("nvmlDeviceGetComputeRunningProcesses", index, quiet=True) if reader.session else None
    if isinstance(processes, list):
        out["processes"] = [{"pid": p.get("pid"), "used_bytes": p.get("usedGpuMemory")}
                            for p in processes if isinstance(p, dict)]
    return out


def wait_for_memory(baseline_free: int | None, env: Mapping[str, str] = os.environ,
                    wait_s: float | None = None) -> dict[str, Any]:
    """GPU memory before the next engine: wait (up to wait_s, MEMORY_RELEASE_WAIT_S by default)
    until the previous engine's is back."""
    deadline = time.monotonic() + (MEMORY_RELEASE_WAIT_S if wait_s is None else wait_s)
    while True:
        gpu = read_gpu(env)
        free = gpu.get("memory_free_bytes")
        if baseline_free is None or free is None or free >= baseline_free - VP.GIB or time.monotonic() > deadline:
            return gpu
        time.sleep(2.0)
