"""Plain dataclasses the probe returns. Everything downstream (explain, tune, reports) reads these;
nothing downstream talks to NVML or CUDA itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional


@dataclass(frozen=True)
class GpuInfo:
    index: int  # logical CUDA ordinal, as the process sees it after CUDA_VISIBLE_DEVICES
    physical_index: Optional[int]  # NVML index (NVML ignores CUDA_VISIBLE_DEVICES)
    name: str
    uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    compute_capability: Optional[tuple[int, int]] = None
    memory_total_bytes: Optional[int] = None
    memory_free_bytes: Optional[int] = None
    memory_bus_width_bits: Optional[int] = None
    max_memory_clock_mhz: Optional[int] = None
    is_mig: bool = False
    parent_uuid: Optional[str] = None  # for MIG slices
    error: Optional[str] = None  # set when this GPU could only be partly read (e.g. "GPU is lost")

    @property
    def capability_str(self) -> Optional[str]:
        if self.compute_capability is None:
            return None
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def peak_memory_bandwidth_bytes_per_s(self) -> Optional[float]:
        """Bus width x max memory clock x 2 (DDR), the way nvbench prints its bus peak."""
        if not self.memory_bus_width_bits or not self.max_memory_clock_mhz:
            return None
        return self.memory_bus_width_bits / 8 * self.max_memory_clock_mhz * 1e6 * 2

    def to_dict(self) -> dict:
        d = asdict(self)
        d["compute_capability"] = self.capability_str
        d["peak_memory_bandwidth_bytes_per_s"] = self.peak_memory_bandwidth_bytes_per_s
        return d


@dataclass(frozen=True)
class P2PPair:
    a: int  # logical indices
    b: int
    nvlink: Optional[bool]  # NVML_P2P_CAPS_INDEX_NVLINK == OK; None when the query failed
    pcie_read: Optional[bool] = None
    pcie_write: Optional[bool] = None
    topology: Optional[str] = None  # like `nvidia-smi topo -m`: NV#, PIX, PXB, PHB, NODE, SYS
    measured_gbps: Optional[float] = None
    error: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NvlinkVerdict:
    fully_connected: Optional[bool]  # vLLM's is_fully_connected over the visible GPUs; None: unknown
    reason: str
    custom_allreduce: str  # what this means for vLLM's custom all-reduce
    pairs: tuple[P2PPair, ...] = ()

    def to_dict(self) -> dict:
        return {
            "fully_connected": self.fully_connected,
            "reason": self.reason,
            "custom_allreduce": self.custom_allreduce,
            "pairs": [p.to_dict() for p in self.pairs],
        }


@dataclass(frozen=True)
class ProbeReport:
    source: str  # "nvml" | "torch" | "none"
    driver_version: Optional[str]
    cuda_driver_version: Optional[str]
    gpus: tuple[GpuInfo, ...]
    nvlink: NvlinkVerdict
    mixed_gpus: bool
    cuda_visible_devices: Optional[str] = None
    cuda_device_order: Optional[str] = None
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "cuda_visible_devices": self.cuda_visible_devices,
            "cuda_device_order": self.cuda_device_order,
            "gpus": [g.to_dict() for g in self.gpus],
            "nvlink": self.nvlink.to_dict(),
            "mixed_gpus": self.mixed_gpus,
            "warnings": list(self.warnings),
            "errors": list(self.errors),
            "notes": list(self.notes),
        }
