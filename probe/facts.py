"""Plain dataclasses the probe returns. Everything downstream (explain, tune, reports) reads these;
nothing downstream talks to NVML or CUDA itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import DataclassInstance

_Built = TypeVar("_Built", bound="DataclassInstance")


@dataclass(frozen=True)
class GpuInfo:
    index: int  # logical CUDA ordinal, as the process sees it after CUDA_VISIBLE_DEVICES
    physical_index: int | None  # NVML index (NVML ignores CUDA_VISIBLE_DEVICES)
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    compute_capability: tuple[int, int] | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    is_mig: bool = False
    parent_uuid: str | None = None  # for MIG slices
    error: str | None = None  # set when this GPU could only be partly read (e.g. "GPU is lost")
    pci_device_id: str | None = None  # NVML pciDeviceId as hex, e.g. "0x233510DE" (same chip & board)
    multiprocessor_count: int | None = None  # torch fallback only (NVML has no SM count)
    cuda_cores: int | None = None  # nvmlDeviceGetNumGpuCores, where the driver has it
    max_sm_clock_mhz: int | None = None
    # Datasheet peak from probe/gpu_table.py, used when NVML cannot give bus width x clock.
    table_peak_memory_bandwidth_bytes_per_s: float | None = None

    @property
    def capability_str(self) -> str | None:
        if self.compute_capability is None:
            return None
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def peak_memory_bandwidth_bytes_per_s(self) -> float | None:
        """Bus width x max memory clock x 2 (DDR), the way nvbench prints its bus peak."""
        if not self.memory_bus_width_bits or not self.max_memory_clock_mhz:
            return self.table_peak_memory_bandwidth_bytes_per_s
        return self.memory_bus_width_bits / 8 * self.max_memory_clock_mhz * 1e6 * 2

    @property
    def peak_memory_bandwidth_source(self) -> str | None:
        """"nvml" (bus width x clock), "table" (datasheet, probe/gpu_table.py) or None."""
        if self.memory_bus_width_bits and self.max_memory_clock_mhz:
            return "nvml"
        return "table" if self.table_peak_memory_bandwidth_bytes_per_s else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["compute_capability"] = self.capability_str
        d["peak_memory_bandwidth_bytes_per_s"] = self.peak_memory_bandwidth_bytes_per_s
        d["peak_memory_bandwidth_source"] = self.peak_memory_bandwidth_source
        return d


@dataclass(frozen=True)
class P2PPair:
    a: int  # logical indices
    b: int
    nvlink: bool | None  # NVML_P2P_CAPS_INDEX_NVLINK == OK; None when the query failed
    pcie_read: bool | None = None
    pcie_write: bool | None = None
    topology: str | None = None  # like `nvidia-smi topo -m`: NV#, PIX, PXB, PHB, NODE, SYS
    measured_gbps: float | None = None
    error: str | None = None
    physical_a: int | None = None  # NVML indices of the pair
    physical_b: int | None = None
    nvlink_status: str | None = None  # NVML_P2P_STATUS_* name for NVML_P2P_CAPS_INDEX_NVLINK ("OK", ...)
    read_status: str | None = None
    write_status: str | None = None
    atomics: bool | None = None
    pcie_topology: str | None = None  # nvmlDeviceGetTopologyCommonAncestor as PIX/PXB/PHB/NODE/SYS
    nvlink_count: int | None = None  # active NVLinks (the smaller of the two GPUs' counts)
    measure_note: str | None = None  # why measured_gbps is missing, when --measure-p2p was asked

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NvlinkVerdict:
    fully_connected: bool | None  # vLLM's is_fully_connected over the visible GPUs; None: unknown
    reason: str
    custom_allreduce: str  # what this means for vLLM's custom all-reduce
    pairs: tuple[P2PPair, ...] = ()
    world_size: int = 0  # visible GPUs taken as one tensor-parallel group
    custom_allreduce_on: bool | None = None  # None: not used (1 GPU) or unknown
    physical_ids: tuple[int, ...] = ()  # what vLLM's is_fully_connected would be given (NVML indices)

    def to_dict(self) -> dict:
        return {
            "fully_connected": self.fully_connected,
            "reason": self.reason,
            "world_size": self.world_size,
            "physical_ids": list(self.physical_ids),
            "custom_allreduce": self.custom_allreduce,
            "custom_allreduce_on": self.custom_allreduce_on,
            "pairs": [p.to_dict() for p in self.pairs],
        }


@dataclass(frozen=True)
class ProbeReport:
    source: str  # "nvml" | "torch" | "none"
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[GpuInfo, ...]
    nvlink: NvlinkVerdict
    mixed_gpus: bool
    cuda_visible_devices: str | None = None
    cuda_device_order: str | None = None
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    device_order: str | None = None  # the order CUDA uses: FASTEST_FIRST (default) or PCI_BUS_ID
    invalid_visible_entry: str | None = None  # CUDA_VISIBLE_DEVICES entry where CUDA stopped reading
    physical_gpu_count: int | None = None  # every GPU NVML sees, visible or not
    physical_gpu_names: tuple[str, ...] = ()
    vllm_device_warning: str | None = None  # what vLLM's own log_warnings would log (all GPUs)
    fallback_reason: str | None = None  # why the source is not NVML

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "fallback_reason": self.fallback_reason,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "cuda_visible_devices": self.cuda_visible_devices,
            "cuda_device_order": self.cuda_device_order,
            "device_order": self.device_order,
            "invalid_visible_entry": self.invalid_visible_entry,
            "physical_gpu_count": self.physical_gpu_count,
            "physical_gpu_names": list(self.physical_gpu_names),
            "vllm_device_warning": self.vllm_device_warning,
            "gpus": [g.to_dict() for g in self.gpus],
            "nvlink": self.nvlink.to_dict(),
            "mixed_gpus": self.mixed_gpus,
            "warnings": list(self.warnings),
            "errors": list(self.errors),
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------
# A ProbeReport as plain fields and back: how a report travels from a Ray node to the driver.
# Plain JSON-able values (not a pickled dataclass), so that a node running another attnsel
# release still answers: unknown fields are dropped and missing ones take their defaults.


def report_fields(report: ProbeReport) -> dict:
    """The report as nested plain values (dataclasses.asdict: tuples become lists)."""
    return asdict(report)


def report_from_fields(data: dict) -> ProbeReport:
    """Inverse of `report_fields`. Raises TypeError/KeyError/ValueError on a malformed dict."""
    nvlink = dict(data["nvlink"])
    nvlink["pairs"] = [_build(P2PPair, p) for p in nvlink.get("pairs") or ()]
    fields = dict(data)
    fields["gpus"] = [_build(GpuInfo, g) for g in data.get("gpus") or ()]
    fields["nvlink"] = _build(NvlinkVerdict, nvlink)
    return _build(ProbeReport, fields)


def _build(cls: type[_Built], data: dict[str, object]) -> _Built:
    """`cls` from a dict of its JSON fields (lists back to tuples), ignoring keys it does not have."""
    known = {f.name for f in dataclass_fields(cls)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known})
