"""What NVML says about each physical GPU, read through the session funnel and turned into `GpuInfo`.

A failed query leaves its field unknown; which failures make the whole GPU unusable, which are
expected "no such thing" answers and which are worth a warning is decided here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from attnsel.probe.facts import GpuInfo
from attnsel.probe.gpu_table import table_peak_bandwidth
from attnsel.probe.nvml.protocol import CLOCK_MEM, CLOCK_SM
from attnsel.probe.nvml.session import NvmlSession, QueryFailure
from attnsel.probe.visible_devices import MigChild, PhysicalGpu

# A failure with one of these codes means the whole GPU is unusable (gpustat's InvalidGPU idea).
_GPU_FATAL = {
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_UNKNOWN",
    "NVML_ERROR_RESET_REQUIRED",
    "NVML_ERROR_GPU_NOT_FOUND",
    "NVML_ERROR_CORRUPTED_INFOROM",
}
# Expected "this GPU/driver has no such thing" answers: the field is simply unknown.
_BENIGN = {"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT"}
_ESSENTIAL = (
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMemoryInfo",
)


@dataclass
class RawGpu:
    """What NVML answered for one physical GPU (None where a query failed)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    pci_device_id: int | None = None
    cc: tuple[int, int] | None = None
    memory_total: int | None = None
    memory_free: int | None = None
    bus_width: int | None = None
    mem_clock: int | None = None
    sm_clock: int | None = None
    cores: int | None = None
    mig_enabled: bool = False
    migs: list[MigSlice] = field(default_factory=list)
    error: str | None = None

    def physical(self) -> PhysicalGpu:
        speed = float(self.cores * self.sm_clock) if self.cores and self.sm_clock else None
        children = tuple(
            MigChild(m.mig_index, m.uuid, m.gpu_instance_id, m.compute_instance_id)
            for m in self.migs
        )
        return PhysicalGpu(
            self.index, self.uuid, self.pci_bus_id, self.name or "", self.cc, speed, self.mig_enabled, children
        )


def cuda_version_str(value: int | None) -> str | None:
    """12040 -> '12.4', 13000 -> '13.0' (nvmlSystemGetCudaDriverVersion's encoding)."""
    if not isinstance(value, int) or value <= 0:
        return None
    major, minor, patch = value // 1000, (value % 1000) // 10, value % 10
    return f"{major}.{minor}" + (f".{patch}" if patch else "")


# What `read_gpu` asks every GPU, in its order: (field, NVML function, arguments after the GPU). One
# list for the reader and for `gpu_calls`, so what is asked ahead is what the reader asks.
_GPU_QUERIES: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("name", "nvmlDeviceGetName", ()),
    ("uuid", "nvmlDeviceGetUUID", ()),
    ("pci", "nvmlDeviceGetPciInfo", ()),
    ("cc", "nvmlDeviceGetCudaComputeCapability", ()),
    ("memory", "nvmlDeviceGetMemoryInfo", ()),
    ("bus_width", "nvmlDeviceGetMemoryBusWidth", ()),
    ("mem_clock", "nvmlDeviceGetMaxClockInfo", (CLOCK_MEM,)),
    ("sm_clock", "nvmlDeviceGetMaxClockInfo", (CLOCK_SM,)),
    ("cores", "nvmlDeviceGetNumGpuCores", ()),
    ("mig_mode", "nvmlDeviceGetMigMode", ()),
)
_QUIET = {"nvmlDeviceGetMigMode"}  # asked to learn whether MIG is on; "not supported" is an answer


def gpu_calls(count: int) -> list[tuple[str, tuple[int, ...]]]:
    """The calls `read_gpu` makes unconditionally for GPUs 0..count-1, as (function, args): the first
    question of every GPU first, since the first call on a GPU is the slow one (probe/nvml/prefetch.py)."""
    return [(function, (i, *extra)) for _, function, extra in _GPU_QUERIES for i in range(count)]


def read_gpu(session: NvmlSession, i: int) -> RawGpu:
    """Every field of NVML GPU `i`; `error` says why the GPU is unusable, if it is."""
    raw = RawGpu(i)
    before = len(session.failures)
    answers = {field: session.get(function, i, *extra, quiet=function in _QUIET)
               for field, function, extra in _GPU_QUERIES}
    raw.name = answers["name"]
    raw.uuid = answers["uuid"]
    pci = answers["pci"]
    if isinstance(pci, dict):
        raw.pci_bus_id = pci.get("busId") or pci.get("busIdLegacy")
        raw.pci_device_id = pci.get("pciDeviceId")
    cc = answers["cc"]
    if isinstance(cc, (list, tuple)) and len(cc) == 2:
        raw.cc = (int(cc[0]), int(cc[1]))
    raw.memory_total, raw.memory_free = _memory(answers["memory"])
    raw.bus_width = answers["bus_width"]
    raw.mem_clock = answers["mem_clock"]
    raw.sm_clock = answers["sm_clock"]
    raw.cores = answers["cores"]
    mig_mode = answers["mig_mode"]
    raw.mig_enabled = isinstance(mig_mode, (list, tuple)) and bool(mig_mode) and mig_mode[0] == 1
    if raw.mig_enabled:
        raw.migs = _read_migs(session, i)
    raw.error = _gpu_error(session.failures[before:])
    return raw


def _memory(info: object) -> tuple[int | None, int | None]:
    if isinstance(info, dict):
        return info.get("total"), info.get("free")
    return None, None


@dataclass(frozen=True)
class MigSlice:
    """One MIG device of a GPU, as NVML answers for it (None where a query failed)."""

    mig_index: int
    uuid: str | None
    name: str | None
    memory_total: int | None
    memory_free: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


def _read_migs(session: NvmlSession, i: int) -> list[MigSlice]:
    migs = []
    slots = session.get("nvmlDeviceGetMaxMigDeviceCount", i) or 0
    for j in range(int(slots)):
        ref = session.get("nvmlDeviceGetMigDeviceHandleByIndex", i, j, quiet=True)
        if ref is None:
            continue  # an empty MIG slot answers NOT_FOUND
        total, free = _memory(session.get("nvmlDeviceGetMemoryInfo", ref))
        migs.append(
            MigSlice(
                mig_index=j,
                uuid=session.get("nvmlDeviceGetUUID", ref),
                name=session.get("nvmlDeviceGetName", ref),
                memory_total=total,
                memory_free=free,
                gpu_instance_id=session.get("nvmlDeviceGetGpuInstanceId", ref),
                compute_instance_id=session.get("nvmlDeviceGetComputeInstanceId", ref),
            )
        )
    return migs


def _gpu_error(failures: Sequence[QueryFailure]) -> str | None:
    fatal = [f for f in failures if f.error in _GPU_FATAL]
    if fatal:
        return f"{fatal[0].message} ({fatal[0].error})"
    essential = [f for f in failures if f.function in _ESSENTIAL]
    if essential:
        return "; ".join(f"{f.function}: {f.message} ({f.error})" for f in essential)
    return None


def gpu_info(logical: int, raw: RawGpu, mig: MigSlice | None) -> GpuInfo:
    """The visible GPU `logical`: the physical GPU `raw`, or its MIG slice `mig`."""
    if mig is not None:
        # A MIG slice is reported as itself: its own UUID and memory, not its parent's (vllm PR#41776).
        return GpuInfo(
            index=logical,
            physical_index=raw.index,
            name=mig.name or f"{raw.name or 'GPU'} MIG",
            uuid=mig.uuid,
            pci_bus_id=raw.pci_bus_id,
            compute_capability=raw.cc,
            memory_total_bytes=mig.memory_total,
            memory_free_bytes=mig.memory_free,
            is_mig=True,
            parent_uuid=raw.uuid,
            error=raw.error,
            pci_device_id=_hex(raw.pci_device_id),
        )
    return GpuInfo(
        index=logical,
        physical_index=raw.index,
        name=raw.name or "unknown",
        uuid=raw.uuid,
        pci_bus_id=raw.pci_bus_id,
        compute_capability=raw.cc,
        memory_total_bytes=raw.memory_total,
        memory_free_bytes=raw.memory_free,
        memory_bus_width_bits=raw.bus_width,
        max_memory_clock_mhz=raw.mem_clock,
        error=raw.error,
        pci_device_id=_hex(raw.pci_device_id),
        cuda_cores=raw.cores,
        max_sm_clock_mhz=raw.sm_clock,
        table_peak_memory_bandwidth_bytes_per_s=table_peak_bandwidth(raw.name, raw.memory_total),
    )


def _hex(value: int | None) -> str | None:
    """NVML's pciDeviceId as hex; 0 means NVML did not say (some VMs and containers), so None."""
    return f"0x{int(value):08X}" if isinstance(value, int) and value else None


def gpu_problems(raws: Sequence[RawGpu], gpus: Sequence[GpuInfo], errors: list[str], notes: list[str]) -> None:
    """An unusable visible GPU is an error; an unusable hidden one only a note."""
    visible = {g.physical_index: g.index for g in gpus}
    for raw in raws:
        if raw.error is None:
            continue
        if raw.index in visible:
            errors.append(f"GPU {visible[raw.index]} (NVML {raw.index}): {raw.error}")
        else:
            notes.append(f"NVML GPU {raw.index} (not visible to this process): {raw.error}")


def query_problems(session: NvmlSession, raws: Sequence[RawGpu], warnings: list[str], notes: list[str]) -> None:
    """The other failed queries, once per (function, error): expected ones are skipped, a function the
    driver lacks is a note, the rest are warnings."""
    broken = {str(r.index) for r in raws if r.error}
    seen: set[tuple[str, str]] = set()
    for failure in session.failures:
        devices = set(failure.key.split(",")[:2]) if failure.key else set()
        if (failure.function, failure.error) in seen or devices & broken or failure.error in _BENIGN:
            continue
        seen.add((failure.function, failure.error))
        if failure.error == "NVML_ERROR_FUNCTION_NOT_FOUND":
            notes.append(
                f"this driver's NVML has no {failure.function} (Function Not Found: the driver is older than "
                "nvidia-ml-py); that field is reported as unknown"
            )
        else:
            warnings.append(f"NVML query failed, treated as unknown: {failure.describe()}")

