"""Which physical GPUs a CUDA process sees, in which order: `CUDA_VISIBLE_DEVICES` and
`CUDA_DEVICE_ORDER` resolved the way CUDA resolves them, from NVML's list of physical devices.

The rules, with their sources:
  * unset -> every device; "" -> none (CUDA programming guide, "CUDA Environment Variables").
  * entries are integers, `GPU-<uuid>` (a unique prefix is enough), `MIG-<uuid>` or the legacy
    `MIG-GPU-<uuid>/<GI>/<CI>` (MIG user guide, "CUDA Device Enumeration").
  * "If one of the indices is invalid, only the devices whose index precedes the invalid index are
    visible" (CUDA guide: `0,2,-1,1` shows 0 and 2).
  * integers count in CUDA's own order: FASTEST_FIRST (the default, a heuristic) or PCI_BUS_ID.
    NVML and nvidia-smi always number GPUs in PCI bus order.
  * a repeated device makes the whole list invalid, and integers and UUIDs cannot be mixed
    (nvitop `parse_cuda_visible_devices` doctests: `'0,0'` -> `[]`).
  * a process enumerates at most one MIG device; a GPU in MIG mode is seen only through its first
    MIG device (MIG user guide; nvitop models the same).
vLLM instead does `int(CUDA_VISIBLE_DEVICES.split(",")[i])`, which crashes on UUIDs (vllm#41848,
PR#51716) and maps a MIG slice to its parent GPU (PR#41776).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from attnsel.files import shown_path

PCI_BUS_ID = "PCI_BUS_ID"
FASTEST_FIRST = "FASTEST_FIRST"


@dataclass(frozen=True)
class MigChild:
    mig_index: int  # j in NVML's nvmlDeviceGetMigDeviceHandleByIndex(parent, j)
    uuid: str | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class PhysicalGpu:
    index: int  # NVML index (PCI bus order)
    uuid: str | None
    pci_bus_id: str | None = None
    name: str = ""
    compute_capability: tuple[int, int] | None = None
    speed: float | None = None  # larger is faster; only used to estimate FASTEST_FIRST
    mig_enabled: bool = False
    mig_children: tuple[MigChild, ...] = ()


@dataclass(frozen=True)
class VisibleDevice:
    logical_index: int  # the CUDA ordinal the process sees
    physical_index: int  # NVML index (of the parent GPU for a MIG device)
    uuid: str | None
    mig: MigChild | None = None

    @property
    def ref(self) -> str:
        """'3' for a GPU, '3:1' for MIG device 1 of GPU 3 (the facade's device refs)."""
        return f"{self.physical_index}:{self.mig.mig_index}" if self.mig else str(self.physical_index)


_Picked = tuple[PhysicalGpu, "MigChild | None"]  # a listed GPU, and the MIG device of it the entry named


@dataclass(frozen=True)
class VisibleResolution:
    devices: tuple[VisibleDevice, ...]
    device_order: str  # the order CUDA uses: FASTEST_FIRST or PCI_BUS_ID
    cuda_order: tuple[int, ...]  # NVML indices in CUDA's enumeration order (before CVD)
    invalid_entry: str | None = None  # the entry where CUDA stopped reading the list
    problems: tuple[str, ...] = ()  # things the user got wrong (shown as warnings)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def refs(self) -> list[str]:
        return [d.ref for d in self.devices]

    @property
    def physical_indices(self) -> list[int]:
        return [d.physical_index for d in self.devices]


def _pci_key(gpu: PhysicalGpu) -> tuple:
    return (gpu.pci_bus_id.upper() if gpu.pci_bus_id else "~", gpu.index)


def _by_pci(gpus: Sequence[PhysicalGpu]) -> list[PhysicalGpu]:
    # NVML numbers GPUs in PCI bus order already; sort by bus id only when every one is known.
    if all(g.pci_bus_id for g in gpus):
        return sorted(gpus, key=_pci_key)
    return sorted(gpus, key=lambda g: g.index)


def cuda_enumeration_order(gpus: Sequence[PhysicalGpu], device_order: str) -> list[PhysicalGpu]:
    """Physical GPUs in the order CUDA numbers them.

    PCI_BUS_ID sorts by bus id. FASTEST_FIRST is "a simple heuristic" (CUDA guide) that NVIDIA does
    not publish: we estimate it by compute capability, then `speed`, ties in PCI order.

    >>> a = PhysicalGpu(0, "GPU-a", "00000000:03:00.0", "GTX 1080 Ti", (6, 1))
    >>> b = PhysicalGpu(1, "GPU-b", "00000000:04:00.0", "RTX 3090", (8, 6))
    >>> [g.index for g in cuda_enumeration_order([a, b], "FASTEST_FIRST")]
    [1, 0]
    >>> [g.index for g in cuda_enumeration_order([a, b], "PCI_BUS_ID")]
    [0, 1]
    """
    by_pci = _by_pci(gpus)
    if device_order == PCI_BUS_ID or any(g.compute_capability is None for g in gpus):
        return by_pci  # without every GPU's capability (e.g. a lost GPU) there is nothing to estimate with
    return sorted(by_pci, key=lambda g: (g.compute_capability or (0, 0), g.speed or 0.0), reverse=True)


def _strip_entry(entry: str) -> str:
    # CUDA reads an integer entry like strtol: leading digits (with a sign) count, the rest is ignored.
    entry = entry.strip()
    body = entry[1:] if entry[:1] in "+-" else entry
    if body[:1].isdigit():
        digits = len(body) - len(body.lstrip("0123456789"))
        return entry[: len(entry) - len(body) + digits]
    return entry


def _unique(matches: list) -> object | None:
    return matches[0] if len(matches) == 1 else None


def _match_gpu_uuid(prefix: str, gpus: Sequence[PhysicalGpu]) -> PhysicalGpu | None:
    prefix = prefix.lower()
    return _unique([g for g in gpus if g.uuid and g.uuid.lower().startswith(prefix)])  # type: ignore[return-value]


def _match_mig_uuid(prefix: str, gpus: Sequence[PhysicalGpu]) -> tuple[PhysicalGpu, MigChild] | None:
    prefix = prefix.lower()
    found = [(g, c) for g in gpus for c in g.mig_children if c.uuid and c.uuid.lower().startswith(prefix)]
    return _unique(found)  # type: ignore[return-value]


def _match_legacy_mig(entry: str, gpus: Sequence[PhysicalGpu]) -> tuple[PhysicalGpu, MigChild] | None:
    # MIG-GPU-<uuid or prefix>/<GPU instance id>/<compute instance id>
    parts = entry[len("MIG-"):].split("/")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 9 for p in parts[1:]):
        return None
    parent = _match_gpu_uuid(parts[0], gpus)
    if parent is None:
        return None
    gi, ci = int(parts[1]), int(parts[2])
    child = _unique([c for c in parent.mig_children if (c.gpu_instance_id, c.compute_instance_id) == (gi, ci)])
    return (parent, child) if child is not None else None  # type: ignore[return-value]


def _resolve_entry(entry: str, ordered: Sequence[PhysicalGpu]) -> tuple[PhysicalGpu | None, MigChild | None, str]:
    """One CVD entry -> (gpu, mig child, kind) with kind 'int' | 'uuid'; gpu None when invalid."""
    if entry.lstrip("+-")[:1].isdigit():
        # strtol saturates a number too long for a long (an invalid index, as here); int() of
        # thousands of digits would raise instead
        number = int(entry) if len(entry) <= 18 else -1
        if 0 <= number < len(ordered):
            return ordered[number], None, "int"
        return None, None, "int"
    if entry.startswith("GPU-"):
        return _match_gpu_uuid(entry, ordered), None, "uuid"
    if entry.startswith("MIG-GPU-"):
        found = _match_legacy_mig(entry, ordered)
    elif entry.startswith("MIG-"):
        found = _match_mig_uuid(entry, ordered)
    else:
        return None, None, "uuid"
    return (found[0], found[1], "uuid") if found else (None, None, "uuid")


def _apply_mig_rule(picked: list[tuple[PhysicalGpu, MigChild | None]]) -> tuple[list, list[str]]:
    notes: list[str] = []
    migs = [(g, c) for g, c in picked if c is not None]
    if migs:
        if len(migs) > 1:
            notes.append("CUDA enumerates at most one MIG device per process: only the first MIG entry is visible")
        return migs[:1], notes
    result: list[tuple[PhysicalGpu, MigChild | None]] = []
    for gpu, _ in picked:
        if not gpu.mig_enabled:
            result.append((gpu, None))
            continue
        if gpu.mig_children:
            notes.append(
                f"GPU {gpu.index} is in MIG mode: CUDA sees only its first MIG device "
                f"({gpu.mig_children[0].uuid}) and no other GPU"
            )
            return [(gpu, gpu.mig_children[0])], notes
        notes.append(f"GPU {gpu.index} is in MIG mode with no MIG device created: CUDA cannot use it")
    return result, notes


def resolve_visible_devices(
    gpus: Sequence[PhysicalGpu],
    cuda_visible_devices: str | None = None,
    cuda_device_order: str | None = None,
) -> VisibleResolution:
    """Resolve CUDA_VISIBLE_DEVICES against the physical GPUs NVML reports.

    >>> gpus = [PhysicalGpu(i, f"GPU-{u}", f"00000000:{18 + i:02X}:00.0", "NVIDIA H100 80GB HBM3", (9, 0))
    ...         for i, u in enumerate(["3eb79704-1571-707c-aee8-f43ce747313d",
    ...                                "18ef14e9-dec6-1d7e-1284-3010c6ce98b1",
    ...                                "849d5a8d-610e-eeea-1fd4-81ff44a23794",
    ...                                "18ef5b01-0000-4000-8000-000000000003"])]
    >>> resolve_visible_devices(gpus, None).physical_indices          # unset: all
    [0, 1, 2, 3]
    >>> resolve_visible_devices(gpus, "").physical_indices            # empty: none
    []
    >>> resolve_visible_devices(gpus, "2,1").physical_indices         # order as written
    [2, 1]
    >>> r = resolve_visible_devices(gpus, "0,2,-1,1")                 # stops at the first invalid entry
    >>> r.physical_indices, r.invalid_entry
    ([0, 2], '-1')
    >>> resolve_visible_devices(gpus, "3,7,0").physical_indices       # out of range ends the list too
    [3]
    >>> resolve_visible_devices(gpus, "GPU-849d,GPU-3eb79704-1571-707c-aee8-f43ce747313d").physical_indices
    [2, 0]
    >>> resolve_visible_devices(gpus, "GPU-18ef").physical_indices    # ambiguous prefix: invalid
    []
    >>> resolve_visible_devices(gpus, "0,0").physical_indices         # duplicate: nothing visible
    []
    >>> resolve_visible_devices(gpus, "1,GPU-849d").physical_indices  # no mixing ints and UUIDs
    [1]
    >>> resolve_visible_devices(gpus, " 1 , 2 ").physical_indices     # blanks around entries are fine
    [1, 2]
    """
    device_order, problems = _read_device_order(cuda_device_order)
    ordered = cuda_enumeration_order(gpus, device_order)
    picked, invalid, list_problems = _pick_listed(cuda_visible_devices, ordered)
    picked, notes = _apply_mig_rule(picked)
    devices = tuple(
        VisibleDevice(k, gpu.index, child.uuid if child else gpu.uuid, child) for k, (gpu, child) in enumerate(picked)
    )
    cuda_order = tuple(g.index for g in ordered)
    return VisibleResolution(devices, device_order, cuda_order, invalid, tuple(problems + list_problems), tuple(notes))


def _read_device_order(cuda_device_order: str | None) -> tuple[str, list[str]]:
    """(the order CUDA uses, problems): any value but PCI_BUS_ID means FASTEST_FIRST."""
    order_value = (cuda_device_order or "").strip()
    device_order = PCI_BUS_ID if order_value == PCI_BUS_ID else FASTEST_FIRST
    if order_value and order_value not in (PCI_BUS_ID, FASTEST_FIRST):
        return device_order, [
            f"CUDA_DEVICE_ORDER={order_value!r} is neither FASTEST_FIRST nor PCI_BUS_ID; CUDA uses FASTEST_FIRST"
        ]
    return device_order, []


def _pick_listed(cuda_visible_devices: str | None,
                 ordered: Sequence[PhysicalGpu]) -> tuple[list[_Picked], str | None, list[str]]:
    """(picked (gpu, mig child) pairs, the invalid entry, problems) for a CUDA_VISIBLE_DEVICES value
    against the GPUs in CUDA's order; unset picks every GPU."""
    if cuda_visible_devices is None:
        return [(g, None) for g in ordered], None, []
    problems: list[str] = []
    picked, invalid, duplicate = _read_list(cuda_visible_devices, ordered)
    if invalid is not None:
        problems.append(
            f"CUDA_VISIBLE_DEVICES entry {shown_path(invalid)} matches no device (or is ambiguous or mixes integers "
            f"and UUIDs): CUDA ignores it and every entry after it"
        )
    if duplicate is not None:
        problems.append(f"CUDA_VISIBLE_DEVICES names device {shown_path(duplicate)} twice: CUDA then sees no device at all")
        picked = []
    return picked, invalid, problems


def _read_list(value: str, ordered: Sequence[PhysicalGpu]) -> tuple[list[_Picked], str | None, str | None]:
    """(picked pairs, the invalid entry, the duplicate entry) for a CUDA_VISIBLE_DEVICES value."""
    picked: list[_Picked] = []
    seen: set[tuple[int, int | None]] = set()
    first_kind: str | None = None
    if value.strip() == "":
        return picked, None, None
    for raw in value.split(","):
        entry = _strip_entry(raw)
        gpu, child, kind = _resolve_entry(entry, ordered)
        first_kind = first_kind or kind
        if gpu is None or kind != first_kind:
            return picked, entry, None
        identity = (gpu.index, child.mig_index if child else None)
        if identity in seen:
            return picked, None, entry
        seen.add(identity)
        picked.append((gpu, child))
    return picked, None, None


def describe_order(resolution: VisibleResolution, gpus: Sequence[PhysicalGpu]) -> list[str]:
    """Notes on how CUDA ordinals relate to NVML indices, for the report."""
    lines: list[str] = []
    pci_order = tuple(g.index for g in _by_pci(gpus))
    names = {g.name for g in gpus if g.name}
    if resolution.device_order == FASTEST_FIRST and len(names) > 1:
        if resolution.cuda_order != pci_order:
            mapping = ", ".join(f"CUDA {k} = NVML {i}" for k, i in enumerate(resolution.cuda_order))
            lines.append(
                "CUDA_DEVICE_ORDER is FASTEST_FIRST (the default) and the GPUs differ: CUDA numbers them "
                f"fastest first (estimated: {mapping}), while NVML and nvidia-smi number them by PCI bus; "
                "integer CUDA_VISIBLE_DEVICES entries count in CUDA's order. Set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                "to make both the same."
            )
        else:
            lines.append(
                "CUDA_DEVICE_ORDER is FASTEST_FIRST (the default) and the GPUs differ: CUDA's order is a "
                "heuristic and may differ from NVML/nvidia-smi's PCI order. Set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                "to be sure."
            )
    return lines
