"""The torch.cuda side of the probe: asked only when NVML failed (probe/collect.py)."""

from __future__ import annotations

from typing import Any, Optional, Union


class RealTorch:
    """torch.cuda, imported only when NVML failed. Reads properties only (no mem_get_info), so it
    initialises CUDA but allocates nothing."""

    def inventory(self) -> Optional[dict]:
        try:
            import torch
        except Exception:  # noqa: BLE001 -- any import failure means "no torch"
            return None
        info: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda, "devices": []}
        if not torch.cuda.is_available():
            return info
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            info["devices"].append(_torch_props_to_dict(props))
        return info

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], Union[float, str]]:
        from attnsel.probe.links import measure_pairs

        return measure_pairs(pairs)


def _torch_props_to_dict(props: Any) -> dict:
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

