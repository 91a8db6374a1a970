"""The environment a tune sweep ran in: GPU, driver, peak bandwidth, and NVML clock /
temperature / throttle snapshots taken before and after the sweep (docs/measuring.md §4:
record clocks rather than lock them -- locking needs root -- and warn when they drift).

All NVML access goes through the probe's facade (attnsel.probe.nvml.session), so tests replay scenarios
and a failing query becomes "unknown" for that query only. Torch-free.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from attnsel.errors import UserInputError
from attnsel.probe.nvml import (
    CLOCK_MEM,
    CLOCK_SM,
    NvmlCallError,
    NvmlSession,
    facades_from_env,
)

TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
# nvmlClocksEventReasons bits (nvml.h); the first two are benign.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
BENIGN_REASONS = {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}
SM_CLOCK_DRIFT = 0.05  # warn when the SM clock moved by more than 5% across the sweep
TEMPERATURE_RISE_C = 15


def throttle_names(mask: int | None) -> list[str] | None:
    """
    >>> throttle_names(0x4 | 0x40)
    ['sw_power_cap', 'hw_thermal_slowdown']
    """
    if mask is None:
        return None
    return [name for bit, name in THROTTLE_REASONS.items() if int(mask) & bit]


def _uuid_matches(nvml_uuid: str | None, wanted: str) -> bool:
    if not nvml_uuid:
        return False
    a = nvml_uuid.lower().removeprefix("gpu-")
    b = wanted.lower().removeprefix("gpu-")
    return a == b or a.startswith(b)


def nvml_index_for(session: NvmlSession, uuid: str | None, env: Mapping[str, str] = os.environ) -> int | None:
    """The NVML index of the GPU the worker used: by UUID when torch reported one, else the
    first CUDA_VISIBLE_DEVICES integer, else 0 when there is only one GPU."""
    count = session.get("nvmlDeviceGetCount")
    if not count:
        return None
    if uuid:
        for index in range(int(count)):
            if _uuid_matches(session.get("nvmlDeviceGetUUID", index), uuid):
                return index
    first = (env.get("CUDA_VISIBLE_DEVICES") or "").split(",")[0].strip()
    if first.isdigit() and int(first) < int(count):
        return int(first)
    return 0 if int(count) == 1 or not first else None


def clock_snapshot(session: NvmlSession, index: int) -> dict:
    """Clocks (MHz), temperature (C), power (W) and throttle reasons right now."""
    mask = session.get("nvmlDeviceGetCurrentClocksEventReasons", index)
    if mask is None:
        mask = session.get("nvmlDeviceGetCurrentClocksThrottleReasons", index)
    power_mw = session.get("nvmlDeviceGetPowerUsage", index)
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sm_clock_mhz": session.get("nvmlDeviceGetClockInfo", index, CLOCK_SM),
        "mem_clock_mhz": session.get("nvmlDeviceGetClockInfo", index, CLOCK_MEM),
        "max_sm_clock_mhz": session.get("nvmlDeviceGetMaxClockInfo", index, CLOCK_SM),
        "temperature_c": session.get("nvmlDeviceGetTemperature", index, TEMPERATURE_GPU),
        "power_w": (power_mw / 1000.0) if isinstance(power_mw, (int, float)) else None,
        "throttle_reasons": throttle_names(mask),
    }


def gpu_environment(session: NvmlSession, index: int) -> dict:
    """Static facts: name, driver, memory, and the peak bandwidth % of peak is measured against."""
    name = session.get("nvmlDeviceGetName", index)
    memory = session.get("nvmlDeviceGetMemoryInfo", index)
    total = memory.get("total") if isinstance(memory, dict) else None
    bus = session.get("nvmlDeviceGetMemoryBusWidth", index)
    max_mem_clock = session.get("nvmlDeviceGetMaxClockInfo", index, CLOCK_MEM)
    peak, source = peak_bandwidth(name, total, bus, max_mem_clock)
    cuda_driver = session.get("nvmlSystemGetCudaDriverVersion")
    return {
        "nvml_index": index,
        "name": name,
        "uuid": session.get("nvmlDeviceGetUUID", index),
        "driver_version": session.get("nvmlSystemGetDriverVersion"),
        "cuda_driver_version": f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}" if isinstance(cuda_driver, int) else None,
        "memory_total_bytes": total,
        "memory_bus_width_bits": bus,
        "max_memory_clock_mhz": max_mem_clock,
        "peak_memory_bandwidth_bytes_per_s": peak,
        "peak_bandwidth_source": source,
    }


def peak_bandwidth(name: str | None, memory_total: int | None, bus_width_bits: int | None,
                   max_memory_clock_mhz: int | None) -> tuple[float | None, str | None]:
    """Bus width x max memory clock x 2 from the device (docs/measuring.md §5: "take the peak
    from the device, not the name"), else the GPU table by NVML name and memory size."""
    if bus_width_bits and max_memory_clock_mhz:
        return bus_width_bits / 8 * max_memory_clock_mhz * 1e6 * 2, "nvml (bus width x max memory clock x 2)"
    if name:
        from attnsel.probe import match_device_name

        spec = match_device_name(name, memory_total)
        if spec is not None:
            return spec.peak_memory_bandwidth_bytes_per_s, f"gpu table ({spec.name} datasheet)"
    return None, None


def drift_warnings(before: dict | None, after: dict | None) -> list[str]:
    """Warnings when the GPU's state changed during the sweep enough to bias a comparison."""
    if not before or not after:
        return []
    out = []
    b, a = before.get("sm_clock_mhz"), after.get("sm_clock_mhz")
    # An idle GPU parks its SM clock (345 MHz on our H200) and boosts as soon as work arrives:
    # idle -> boost is not drift (seen on every sweep, 2026-11-21). Only compare loaded clocks.
    idle_boost = "gpu_idle" in (before.get("throttle_reasons") or []) and isinstance(a, (int, float)) \
        and isinstance(b, (int, float)) and a >= b
    if (not idle_boost and isinstance(b, (int, float)) and isinstance(a, (int, float)) and b > 0
            and abs(a - b) / b > SM_CLOCK_DRIFT):
        out.append(f"SM clock moved from {b} to {a} MHz during the sweep: timings taken late may not compare with early ones")
    tb, ta = before.get("temperature_c"), after.get("temperature_c")
    if isinstance(tb, (int, float)) and isinstance(ta, (int, float)) and ta - tb >= TEMPERATURE_RISE_C:
        out.append(f"GPU temperature rose from {tb} C to {ta} C during the sweep")
    new = [r for r in (after.get("throttle_reasons") or []) if r not in BENIGN_REASONS
           and r not in (before.get("throttle_reasons") or [])]
    if new:
        out.append(f"the GPU started throttling during the sweep ({', '.join(new)}): rerun on an idle, cool GPU")
    elif any(r not in BENIGN_REASONS for r in (before.get("throttle_reasons") or [])):
        held = [r for r in before["throttle_reasons"] if r not in BENIGN_REASONS]
        out.append(f"the GPU was already throttling before the sweep ({', '.join(held)})")
    return out


class NvmlReader:
    """Opens NVML once for the sweep; every method answers None/{} when NVML is unusable."""

    def __init__(self, env: Mapping[str, str] = os.environ):
        self.env = env
        self.session: NvmlSession | None = None
        self.error: str | None = None
        try:
            facade, _torch, _scenario = facades_from_env(env)
            facade.init()
            self.session = NvmlSession(facade)
        except NvmlCallError as exc:
            self.error = str(exc)
        except UserInputError:  # an unreadable ATTNSEL_NVML_SCENARIO: refused as `probe` refuses it (exit 2)
            raise
        except Exception as exc:  # noqa: BLE001 -- no NVML: the sweep still runs, without clocks
            self.error = f"{type(exc).__name__}: {exc}"

    def index_for(self, uuid: str | None) -> int | None:
        return nvml_index_for(self.session, uuid, self.env) if self.session else None

    def snapshot(self, index: int | None) -> dict | None:
        return clock_snapshot(self.session, index) if self.session and index is not None else None

    def environment(self, index: int | None) -> dict:
        if not self.session or index is None:
            return {"nvml_error": self.error or "GPU not found in NVML"}
        return gpu_environment(self.session, index)

    def close(self) -> None:
        if self.session is not None:
            self.session.facade.shutdown()
            self.session = None


def peak_from_worker_info(info: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """Fallback when NVML is unusable: the GPU table by the name torch reported."""
    return peak_bandwidth(info.get("name"), info.get("total_memory_bytes"), None, None)


def visible_gpus_from_nvml(reader: NvmlReader, env: Mapping[str, str] = os.environ) -> list[dict] | None:
    """The GPUs this process's CUDA numbers 0, 1, ..., from NVML: CUDA ordinal, name, compute
    capability, UUID, memory, NVML index. None when NVML cannot tell for sure (no NVML, a
    CUDA_VISIBLE_DEVICES entry that is not an index or a UUID (MIG))."""
    session = reader.session
    if session is None:
        return None
    count = session.get("nvmlDeviceGetCount")
    if not isinstance(count, int) or count < 1:
        return None
    indices = _visible_nvml_indices(session, int(count), env.get("CUDA_VISIBLE_DEVICES"))
    if not indices:
        return None
    gpus = []
    for ordinal, index in enumerate(indices):
        cc = session.get("nvmlDeviceGetCudaComputeCapability", index)
        name = session.get("nvmlDeviceGetName", index)
        if not cc or not name:
            return None
        memory = session.get("nvmlDeviceGetMemoryInfo", index)
        gpus.append({"ordinal": str(ordinal), "name": str(name), "capability": [int(cc[0]), int(cc[1])],
                     "uuid": session.get("nvmlDeviceGetUUID", index),
                     "total_memory_bytes": memory.get("total") if isinstance(memory, dict) else None,
                     "nvml_index": index})
    return gpus


def device_from_nvml(reader: NvmlReader, env: Mapping[str, str] = os.environ) -> dict | None:
    """Name + compute capability of the GPU the workers will use (CUDA device 0), from NVML,
    so the plan needs no torch probe process. None when NVML cannot tell for sure: no NVML, a
    CUDA_VISIBLE_DEVICES entry that is not an index or a UUID (MIG), or several visible GPUs of
    different kinds (CUDA's default FASTEST_FIRST order need not match NVML's PCI order).
    L2 size, SM count and library versions come later, from the first worker's "ready"."""
    gpus = visible_gpus_from_nvml(reader, env)
    if not gpus or len({(g["name"], tuple(g["capability"])) for g in gpus}) != 1:
        return None
    first = gpus[0]
    return {"name": first["name"], "capability": first["capability"], "uuid": first["uuid"],
            "total_memory_bytes": first["total_memory_bytes"], "nvml_index": first["nvml_index"], "source": "nvml"}


def _visible_nvml_indices(session: NvmlSession, count: int, visible: str | None) -> list[int] | None:
    if visible is None:
        return list(range(count))
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    out = []
    for entry in entries:
        if entry.isdigit():
            if int(entry) >= count:
                break  # CUDA stops at the first invalid entry
            out.append(int(entry))
        elif entry.lower().startswith("gpu-"):
            match = [i for i in range(count) if _uuid_matches(session.get("nvmlDeviceGetUUID", i), entry)]
            if not match:
                return None
            out.append(match[0])
        else:
            return None  # MIG slices and other forms: let torch say what it sees
    return out or None


def merge_worker_info(device: dict, info: Mapping[str, Any] | None) -> list[str]:
    """Adds what only torch knows (L2, SMs, versions) to an NVML-made device dict, in place;
    returns warnings when the worker saw a different GPU than the plan was made for."""
    if not info:
        return []
    warnings = []
    for key, value in info.items():
        if key in ("name", "capability") and device.get(key) is not None:
            continue
        if device.get(key) is None:
            device[key] = value
    if info.get("capability") and list(info["capability"]) != list(device.get("capability") or []):
        warnings.append(f"the plan used compute capability {device.get('capability')} from NVML, but the worker's "
                        f"torch saw {list(info['capability'])} ({info.get('name')}): rerun with CUDA_DEVICE_ORDER=PCI_BUS_ID")
    return warnings
