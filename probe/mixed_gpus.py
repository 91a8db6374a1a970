"""Are the visible GPUs one model? And vLLM's own mixed-GPU warning, which asks a different question.

vLLM (NvmlCudaPlatform.log_warnings, docs/vllm-rules.md §5g) compares the raw names of every GPU in the
machine; attnsel compares only the visible GPUs and only real differences (vllm#19045, #16740).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from attnsel.probe.facts import GpuInfo
from attnsel.probe.gpu_table import match_device_name
from attnsel.probe.visible_devices import PCI_BUS_ID

# docs/vllm-rules.md §5g, NvmlCudaPlatform.log_warnings, verbatim (%s = device names joined by ", ").
VLLM_MIXED_GPU_WARNING = (
    "Detected different devices in the system: %s. Please make sure to set `CUDA_DEVICE_ORDER=PCI_BUS_ID` "
    "to avoid unexpected behavior."
)


def _table_key(gpu: GpuInfo) -> str | None:
    spec = match_device_name(gpu.name, gpu.memory_total_bytes)
    return spec.key if spec else None


def _known_pci_id(gpu: GpuInfo) -> str | None:
    """The PCI device id, or None where unknown: NVML answers 0 when it cannot read it."""
    text = gpu.pci_device_id
    if not text:
        return None
    try:
        return None if int(text, 16) == 0 else text
    except ValueError:
        return text


def same_model(gpus: Sequence[GpuInfo]) -> bool:
    """Are these GPUs one model? Known differences first: GPUs with different compute capabilities
    or different GPU-table entries are never one model, whatever else matches. Then the PCI device
    id (0 or missing: unknown), then the table entry, then the name.

    vllm#16740: "NVIDIA H100 80GB HBM3" and "NVIDIA H100" are one model, which a name check misses.

    >>> a = GpuInfo(0, 0, "NVIDIA H100 80GB HBM3", compute_capability=(9, 0), memory_total_bytes=85520809984)
    >>> b = GpuInfo(1, 1, "NVIDIA H100", compute_capability=(9, 0), memory_total_bytes=85520809984)
    >>> same_model([a, b])
    True
    >>> same_model([a, GpuInfo(2, 2, "NVIDIA GeForce RTX 3090", compute_capability=(8, 6))])
    False
    >>> same_model([GpuInfo(0, 0, "NVIDIA H100 80GB HBM3", pci_device_id="0x00000000", compute_capability=(9, 0)),
    ...             GpuInfo(1, 1, "NVIDIA A100-SXM4-80GB", pci_device_id="0x00000000", compute_capability=(8, 0))])
    False
    """
    known = [g for g in gpus if g.name and g.name != "unknown"]
    if len(known) < 2:
        return True
    if len({g.compute_capability for g in known if g.compute_capability is not None}) > 1:
        return False
    table_keys = [_table_key(g) for g in known]
    if len({k for k in table_keys if k}) > 1:
        return False
    pci_ids = [_known_pci_id(g) for g in known]
    if all(pci_ids):
        return len(set(pci_ids)) == 1
    if all(table_keys):
        return True  # one table entry and one capability
    return len({re.sub(r"^nvidia\s+", "", g.name.strip().lower()) for g in known}) == 1


def mixed_gpu_warning(gpus: Sequence[GpuInfo], cuda_device_order: str | None) -> tuple[bool, str | None]:
    """(visible models differ, vLLM's warning text or None): only visible GPUs, only real differences
    (unlike vLLM, vllm#19045 and #16740), and only when CUDA_DEVICE_ORDER is not PCI_BUS_ID."""
    mixed = not same_model(gpus)
    if mixed and cuda_device_order != PCI_BUS_ID:
        return True, VLLM_MIXED_GPU_WARNING % ", ".join(g.name for g in gpus)
    return mixed, None


def vllm_log_warnings(all_names: Sequence[str], cuda_device_order: str | None) -> str | None:
    """What vLLM's own log_warnings logs: raw names of every GPU in the machine, visible or not."""
    if len(all_names) > 1 and len(set(all_names)) > 1 and cuda_device_order != PCI_BUS_ID:
        return VLLM_MIXED_GPU_WARNING % ", ".join(all_names)
    return None


def why_vllm_warns(warning: str, all_names: Sequence[str], gpus: Sequence[GpuInfo]) -> str:
    """The note for a machine whose visible GPUs are one model but where vLLM would still warn."""
    return (
        f"vLLM itself would still log \"{warning}\": it compares the raw names of all {len(all_names)} GPUs in the machine, including ones "
        "CUDA_VISIBLE_DEVICES hides (vllm#19045), and treats name variants as different models (vllm#16740). "
        f"The {len(gpus)} visible GPU(s) are one model, so that warning can be ignored here."
    )
