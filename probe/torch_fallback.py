"""The probe's report when NVML is unavailable: what torch.cuda sees, or why nothing does.

CUDA applies CUDA_VISIBLE_DEVICES itself here, so physical (NVML) indices, free memory and
NVLink status are unknown; `collect_probe(no_torch_reason=...)` forbids this path (it would
initialise CUDA) and the reason becomes the report's error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from attnsel.probe.facts import GpuInfo, P2PPair, ProbeReport
from attnsel.probe.gpu_table import table_peak_bandwidth
from attnsel.probe.links import unknown_verdict, with_measured_bandwidth
from attnsel.probe.mixed_gpus import mixed_gpu_warning
from attnsel.probe.nvml import TorchFacade
from attnsel.probe.visible_devices import PCI_BUS_ID

if TYPE_CHECKING:
    from attnsel.probe.nvml.protocol import TorchDevice, TorchInventory

TORCH_NOT_ASKED = "torch.cuda not asked: "  # the error line when the caller forbids the torch fallback


class NotAsked:
    """The torch side when the caller forbids the fallback: the reason becomes the report's error."""

    def __init__(self, reason: str):
        self.reason = reason

    def inventory(self) -> TorchInventory | None:
        raise _FallbackNotAsked(self.reason)

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float | str]:
        return {pair: f"not measured: {TORCH_NOT_ASKED}{self.reason}" for pair in pairs}


class _FallbackNotAsked(Exception):
    pass


def _read_inventory(torch: TorchFacade, errors: list[str]) -> TorchInventory | None:
    """torch's inventory, or None with the reason added to `errors`."""
    try:
        inventory = torch.inventory()
    except _FallbackNotAsked as exc:
        errors.append(f"{TORCH_NOT_ASKED}{exc}")
        return None
    except Exception as exc:  # noqa: BLE001 -- a broken CUDA install must not crash the probe
        errors.append(f"torch.cuda failed too: {type(exc).__name__}: {exc}")
        return None
    if inventory is None:
        errors.append("torch is not installed, so there is no fallback")
    return inventory


def from_torch(torch: TorchFacade, env: Mapping[str, str], reason: str, measure_p2p: bool) -> ProbeReport:
    """The report from torch.cuda; `reason` says why NVML could not be used."""
    errors = [reason]
    notes: list[str] = []
    inventory = _read_inventory(torch, errors)
    devices = (inventory or {}).get("devices") or []
    if inventory is not None and not devices:
        notes.append(f"torch {inventory.get('version')} sees no CUDA GPU")
    gpus = tuple(_torch_gpu(i, d) for i, d in enumerate(devices))
    source = "torch" if gpus else "none"
    if not gpus:
        not_asked = isinstance(torch, NotAsked)
        notes.append("No GPU found through NVML." if not_asked else "No GPU found: neither NVML nor torch.cuda sees one.")
    else:
        notes.append(
            "GPUs read through torch.cuda (NVML unavailable): CUDA applied CUDA_VISIBLE_DEVICES itself, "
            "so physical (NVML) indices, free memory and NVLink status are unknown"
        )
    pairs: list[P2PPair] = []
    if measure_p2p and len(gpus) > 1:
        pairs = [P2PPair(a=a.index, b=b.index, nvlink=None) for k, a in enumerate(gpus) for b in gpus[k + 1:]]
        pairs = with_measured_bandwidth(torch, pairs, len(gpus))
    verdict = unknown_verdict("vLLM's is_fully_connected needs NVML, which is unavailable", len(gpus), pairs)
    order = env.get("CUDA_DEVICE_ORDER")
    mixed, mixed_warning = mixed_gpu_warning(gpus, order)
    return ProbeReport(
        source=source,
        driver_version=None,
        cuda_driver_version=(inventory or {}).get("cuda") if gpus else None,
        gpus=gpus,
        nvlink=verdict,
        mixed_gpus=mixed,
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        cuda_device_order=order,
        warnings=(mixed_warning,) if mixed_warning else (),
        errors=tuple(errors),
        notes=tuple(notes),
        device_order=PCI_BUS_ID if order == PCI_BUS_ID else "FASTEST_FIRST",
        fallback_reason=reason,
    )


def _torch_gpu(index: int, d: TorchDevice) -> GpuInfo:
    cc = (int(d["major"]), int(d["minor"])) if d.get("major") is not None else None
    uuid = d.get("uuid")
    return GpuInfo(
        index=index,
        physical_index=None,
        name=d.get("name") or "unknown",
        uuid=uuid,
        pci_bus_id=d.get("pci_bus_id"),
        compute_capability=cc,
        memory_total_bytes=d.get("total_memory"),
        is_mig=bool(uuid and uuid.startswith("MIG-")),
        multiprocessor_count=d.get("multi_processor_count"),
        table_peak_memory_bandwidth_bytes_per_s=table_peak_bandwidth(d.get("name"), d.get("total_memory")),
    )
