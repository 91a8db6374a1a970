"""The torch.cuda side of the probe: asked only when NVML failed (probe/collect.py)."""

from __future__ import annotations

import ctypes
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch._C import _CudaDeviceProperties

    from attnsel.probe.nvml.protocol import TorchDevice, TorchInventory

# The CUDA driver library every CUDA program, torch's included, loads first (cudart dlopens it).
CUDA_DRIVER_LIBRARY = "libcuda.so.1"


def cuda_driver_missing() -> str | None:
    """Why torch.cuda cannot see a GPU here without importing torch (~2 s), or None when it may.

    Linux only: a machine whose libcuda.so.1 cannot be loaded has no NVIDIA driver (or a container
    started without the NVIDIA runtime), and torch.cuda would find no GPU either. Loading it creates no
    CUDA context (that takes cuInit); elsewhere (WSL included: its libcuda.so.1 is on the loader path,
    Windows, macOS) torch is asked as before.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        ctypes.CDLL(CUDA_DRIVER_LIBRARY)
    except OSError:
        return f"no NVIDIA driver: {CUDA_DRIVER_LIBRARY} cannot be loaded, and torch.cuda needs it"
    return None


class RealTorch:
    """torch.cuda, imported only when NVML failed. Reads properties only (no mem_get_info), so it
    initialises CUDA but allocates nothing."""

    def inventory(self) -> TorchInventory | None:
        try:
            import torch
        except Exception:  # noqa: BLE001 -- any import failure means "no torch"
            return None
        devices: list[TorchDevice] = []
        info: TorchInventory = {"version": torch.__version__, "cuda": torch.version.cuda, "devices": devices}
        if not torch.cuda.is_available():
            return info
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append(_torch_props_to_dict(props))
        return info

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float | str]:
        from attnsel.probe.links import measure_pairs

        return measure_pairs(pairs)


def _torch_props_to_dict(props: _CudaDeviceProperties) -> TorchDevice:
    uuid = getattr(props, "uuid", None)
    uuid_str = str(uuid) if uuid is not None else None
    if uuid_str and not uuid_str.startswith(("GPU-", "MIG-")):
        uuid_str = "GPU-" + uuid_str
    bus = getattr(props, "pci_bus_id", None)
    pci = None
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0) or 0
        slot = getattr(props, "pci_device_id", 0) or 0
        pci = f"{domain:08X}:{bus:02X}:{slot:02X}.0"
    return {
        "name": props.name,
        "major": props.major,
        "minor": props.minor,
        "total_memory": int(props.total_memory),
        "multi_processor_count": getattr(props, "multi_processor_count", None),
        "uuid": uuid_str,
        "pci_bus_id": pci,
    }

