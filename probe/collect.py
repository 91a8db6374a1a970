"""`collect_probe`: the one entry point that turns NVML (or torch.cuda) into a `ProbeReport`.

NVML first: it answers without creating a CUDA context and without importing torch. If
`nvmlInit` fails (library not found, driver not loaded, version mismatch), torch.cuda is asked
instead (imported only then); if neither sees a GPU the report says so with source "none".
Set ATTNSEL_NVML_SCENARIO=path.json to replay a recorded scenario instead of the real driver.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence

from attnsel.files import shown_path
from attnsel.probe.capability import capability_facts  # noqa: F401 -- re-exported for explain
from attnsel.probe.facts import GpuInfo, P2PPair, ProbeReport
from attnsel.probe.gpu_table import match_device_name
from attnsel.probe.nvml import (
    CLOCK_MEM,
    CLOCK_SM,
    NvmlFacade,
    NvmlInitError,
    NvmlSession,
    QueryFailure,
    ReplayFacade,
    ReplayTorch,
    TorchFacade,
    facades_from_env,
)
from attnsel.probe.p2p import collect_pairs, nvlink_verdict, unknown_verdict
from attnsel.probe.visible_devices import (
    PCI_BUS_ID,
    MigChild,
    PhysicalGpu,
    describe_order,
    resolve_visible_devices,
)

__all__ = ["collect_probe", "collect_from_scenario", "capability_facts", "same_model", "VLLM_MIXED_GPU_WARNING"]

# vllm-rules §5g, NvmlCudaPlatform.log_warnings, verbatim (%s = device names joined by ", ").
VLLM_MIXED_GPU_WARNING = (
    "Detected different devices in the system: %s. Please make sure to set `CUDA_DEVICE_ORDER=PCI_BUS_ID` "
    "to avoid unexpected behavior."
)

TORCH_NOT_ASKED = "torch.cuda not asked: "  # the error line when the caller forbids the torch fallback

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
class _RawGpu:
    """What NVML answered for one physical GPU (None where a query failed)."""

    index: int
    name: Optional[str] = None
    uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    pci_device_id: Optional[int] = None
    cc: Optional[tuple[int, int]] = None
    memory_total: Optional[int] = None
    memory_free: Optional[int] = None
    bus_width: Optional[int] = None
    mem_clock: Optional[int] = None
    sm_clock: Optional[int] = None
    cores: Optional[int] = None
    mig_enabled: bool = False
    migs: list[dict] = field(default_factory=list)
    error: Optional[str] = None

    def physical(self) -> PhysicalGpu:
        speed = float(self.cores * self.sm_clock) if self.cores and self.sm_clock else None
        children = tuple(
            MigChild(m["mig_index"], m.get("uuid"), m.get("gpu_instance_id"), m.get("compute_instance_id"))
            for m in self.migs
        )
        return PhysicalGpu(
            self.index, self.uuid, self.pci_bus_id, self.name or "", self.cc, speed, self.mig_enabled, children
        )


# ---------------------------------------------------------------------------------------------
# Entry points


def collect_probe(
    env: Optional[Mapping[str, str]] = None,
    nvml: Optional[NvmlFacade] = None,
    measure_p2p: bool = False,
    torch: Optional[TorchFacade] = None,
    no_torch_reason: Optional[str] = None,
) -> ProbeReport:
    """Probe the GPUs this process would see under `env` (default: os.environ).

    `nvml` / `torch` replace the real facades (tests, replays); without them,
    ATTNSEL_NVML_SCENARIO in `env` selects a replay, else the real NVML and torch.cuda are used.
    `no_torch_reason`: never fall back to torch.cuda (it would initialise CUDA), and say why.
    """
    env = dict(os.environ if env is None else env)
    if nvml is None:
        nvml, env_torch, _ = facades_from_env(env)
        torch = torch or env_torch
    if no_torch_reason is not None:
        torch = _NotAsked(no_torch_reason)
    elif torch is None:
        from attnsel.probe.nvml import RealTorch

        torch = RealTorch()
    try:
        nvml.init()
    except NvmlInitError as exc:
        reason = f"NVML unavailable: {exc}" + (f" -- {exc.hint}" if exc.hint else "")
        return _from_torch(torch, env, reason, measure_p2p)
    except Exception as exc:  # noqa: BLE001 -- any other init failure is just as fatal for NVML
        return _from_torch(torch, env, f"NVML unavailable: {type(exc).__name__}: {exc}", measure_p2p)
    try:
        return _from_nvml(NvmlSession(nvml), torch, env, measure_p2p)
    finally:
        nvml.shutdown()


def collect_from_scenario(scenario: Mapping[str, Any], env: Optional[Mapping[str, str]] = None, measure_p2p: bool = False) -> ProbeReport:
    """collect_probe over a replayed scenario (the NVML and the torch side both come from it)."""
    return collect_probe(env or {}, nvml=ReplayFacade(scenario), measure_p2p=measure_p2p, torch=ReplayTorch(scenario))


# ---------------------------------------------------------------------------------------------
# NVML path


def _cuda_version_str(value: Optional[int]) -> Optional[str]:
    """12040 -> '12.4', 13000 -> '13.0' (nvmlSystemGetCudaDriverVersion's encoding)."""
    if not isinstance(value, int) or value <= 0:
        return None
    major, minor, patch = value // 1000, (value % 1000) // 10, value % 10
    return f"{major}.{minor}" + (f".{patch}" if patch else "")


def _read_gpu(session: NvmlSession, i: int) -> _RawGpu:
    raw = _RawGpu(i)
    before = len(session.failures)
    raw.name = session.get("nvmlDeviceGetName", i)
    raw.uuid = session.get("nvmlDeviceGetUUID", i)
    pci = session.get("nvmlDeviceGetPciInfo", i)
    if isinstance(pci, dict):
        raw.pci_bus_id = pci.get("busId") or pci.get("busIdLegacy")
        raw.pci_device_id = pci.get("pciDeviceId")
    cc = session.get("nvmlDeviceGetCudaComputeCapability", i)
    if isinstance(cc, (list, tuple)) and len(cc) == 2:
        raw.cc = (int(cc[0]), int(cc[1]))
    raw.memory_total, raw.memory_free = _memory(session.get("nvmlDeviceGetMemoryInfo", i))
    raw.bus_width = session.get("nvmlDeviceGetMemoryBusWidth", i)
    raw.mem_clock = session.get("nvmlDeviceGetMaxClockInfo", i, CLOCK_MEM)
    raw.sm_clock = session.get("nvmlDeviceGetMaxClockInfo", i, CLOCK_SM)
    raw.cores = session.get("nvmlDeviceGetNumGpuCores", i)
    mig_mode = session.get("nvmlDeviceGetMigMode", i, quiet=True)
    raw.mig_enabled = isinstance(mig_mode, (list, tuple)) and bool(mig_mode) and mig_mode[0] == 1
    if raw.mig_enabled:
        raw.migs = _read_migs(session, i)
    raw.error = _gpu_error(session.failures[before:])
    return raw


def _memory(info: Any) -> tuple[Optional[int], Optional[int]]:
    if isinstance(info, dict):
        return info.get("total"), info.get("free")
    return None, None


def _read_migs(session: NvmlSession, i: int) -> list[dict]:
    migs = []
    slots = session.get("nvmlDeviceGetMaxMigDeviceCount", i) or 0
    for j in range(int(slots)):
        ref = session.get("nvmlDeviceGetMigDeviceHandleByIndex", i, j, quiet=True)
        if ref is None:
            continue  # an empty MIG slot answers NOT_FOUND
        total, free = _memory(session.get("nvmlDeviceGetMemoryInfo", ref))
        migs.append(
            {
                "mig_index": j,
                "uuid": session.get("nvmlDeviceGetUUID", ref),
                "name": session.get("nvmlDeviceGetName", ref),
                "memory_total": total,
                "memory_free": free,
                "gpu_instance_id": session.get("nvmlDeviceGetGpuInstanceId", ref),
                "compute_instance_id": session.get("nvmlDeviceGetComputeInstanceId", ref),
            }
        )
    return migs


def _gpu_error(failures: Sequence[QueryFailure]) -> Optional[str]:
    fatal = [f for f in failures if f.error in _GPU_FATAL]
    if fatal:
        return f"{fatal[0].message} ({fatal[0].error})"
    essential = [f for f in failures if f.function in _ESSENTIAL]
    if essential:
        return "; ".join(f"{f.function}: {f.message} ({f.error})" for f in essential)
    return None


def _table_peak(name: Optional[str], memory_total: Optional[int]) -> Optional[float]:
    spec = match_device_name(name, memory_total) if name else None
    return spec.peak_memory_bandwidth_bytes_per_s if spec else None


def _gpu_info(logical: int, raw: _RawGpu, mig: Optional[dict]) -> GpuInfo:
    if mig is not None:
        # A MIG slice is reported as itself: its own UUID and memory, not its parent's (vllm PR#41776).
        return GpuInfo(
            index=logical,
            physical_index=raw.index,
            name=mig.get("name") or f"{raw.name or 'GPU'} MIG",
            uuid=mig.get("uuid"),
            pci_bus_id=raw.pci_bus_id,
            compute_capability=raw.cc,
            memory_total_bytes=mig.get("memory_total"),
            memory_free_bytes=mig.get("memory_free"),
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
        table_peak_memory_bandwidth_bytes_per_s=_table_peak(raw.name, raw.memory_total),
    )


def _hex(value: Optional[int]) -> Optional[str]:
    """NVML's pciDeviceId as hex; 0 means NVML did not say (some VMs and containers), so None."""
    return f"0x{int(value):08X}" if isinstance(value, int) and value else None


MAX_NVML_DEVICES = 64  # GPUs one host's NVML can show; beyond this the answer is not a real machine


def _from_nvml(session: NvmlSession, torch: TorchFacade, env: Mapping[str, str], measure_p2p: bool) -> ProbeReport:
    driver = session.get("nvmlSystemGetDriverVersion")
    cuda = _cuda_version_str(session.get("nvmlSystemGetCudaDriverVersion"))
    count = session.get("nvmlDeviceGetCount")
    if not isinstance(count, int) or isinstance(count, bool):
        failure = session.last_failure()
        why = failure.describe() if failure else "no answer"
        return _from_torch(torch, env, f"NVML could not count the GPUs ({why})", measure_p2p)
    if not 0 <= count <= MAX_NVML_DEVICES:  # the probe's work grows with the count squared (GPU pairs)
        return _from_torch(torch, env, f"NVML answered a GPU count of {count}, which no host has "
                                       f"(at most {MAX_NVML_DEVICES}): a broken driver answer", measure_p2p)

    raws = [_read_gpu(session, i) for i in range(count)]
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    order = env.get("CUDA_DEVICE_ORDER")
    physical = [r.physical() for r in raws]
    resolution = resolve_visible_devices(physical, cvd, order)

    gpus = []
    for dev in resolution.devices:
        raw = raws[dev.physical_index]
        mig = next((m for m in raw.migs if dev.mig and m["mig_index"] == dev.mig.mig_index), None)
        gpus.append(_gpu_info(dev.logical_index, raw, mig))

    pair_inputs = [(g.index, g.physical_index) for g in gpus if not g.is_mig and g.physical_index is not None]
    pairs = collect_pairs(session, pair_inputs) if len(pair_inputs) > 1 else []
    if measure_p2p:
        pairs = _measure(torch, pairs, len(gpus))
    verdict = nvlink_verdict(pairs, len(gpus), [p for _, p in pair_inputs])

    warnings: list[str] = list(resolution.problems)
    errors: list[str] = []
    notes: list[str] = list(resolution.notes) + describe_order(resolution, physical)
    _gpu_problems(raws, gpus, errors, notes)
    _query_problems(session, raws, warnings, notes)
    notes.extend(_vllm_visible_device_notes(cvd))

    mixed, mixed_warning = mixed_gpu_warning(gpus, order)
    if mixed_warning:
        warnings.append(mixed_warning)
    names = [r.name or "unknown" for r in raws]
    # vLLM's log_warnings asks every GPU's name; with one unreadable it raises instead of warning.
    vllm_warning = vllm_log_warnings(names, order) if all(r.name for r in raws) else None
    if vllm_warning and not mixed_warning:
        notes.append(_why_vllm_warns(vllm_warning, names, gpus))
    if not gpus:
        notes.append(_no_visible_gpu_note(count, cvd))
    return ProbeReport(
        source="nvml",
        driver_version=driver,
        cuda_driver_version=cuda,
        gpus=tuple(gpus),
        nvlink=verdict,
        mixed_gpus=mixed,
        cuda_visible_devices=cvd,
        cuda_device_order=order,
        warnings=tuple(warnings),
        errors=tuple(errors),
        notes=tuple(notes),
        device_order=resolution.device_order,
        invalid_visible_entry=resolution.invalid_entry,
        physical_gpu_count=count,
        physical_gpu_names=tuple(names),
        vllm_device_warning=vllm_warning,
    )


def _gpu_problems(raws: Sequence[_RawGpu], gpus: Sequence[GpuInfo], errors: list[str], notes: list[str]) -> None:
    visible = {g.physical_index: g.index for g in gpus}
    for raw in raws:
        if raw.error is None:
            continue
        if raw.index in visible:
            errors.append(f"GPU {visible[raw.index]} (NVML {raw.index}): {raw.error}")
        else:
            notes.append(f"NVML GPU {raw.index} (not visible to this process): {raw.error}")


def _query_problems(session: NvmlSession, raws: Sequence[_RawGpu], warnings: list[str], notes: list[str]) -> None:
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


def _vllm_visible_device_notes(cvd: Optional[str]) -> list[str]:
    if not cvd or all(e.strip().lstrip("+-").isdigit() for e in cvd.split(",") if e.strip()):
        return []
    return [
        "CUDA_VISIBLE_DEVICES holds UUID/MIG entries: vLLM versions that int() each entry raise ValueError on "
        "them (vllm#41848, vllm#6551); short GPU UUIDs fail NVML lookups (PR#51716) and a MIG slice is mapped "
        "to its parent GPU (PR#41776). attnsel resolved them the way CUDA does."
    ]


def _no_visible_gpu_note(count: int, cvd: Optional[str]) -> str:
    if count == 0:
        return "NVML works but reports no GPU"
    return f"NVML sees {count} GPU(s) but none is visible to CUDA with CUDA_VISIBLE_DEVICES={shown_path(cvd or '')}"


# ---------------------------------------------------------------------------------------------
# Mixed GPUs


def _table_key(gpu: GpuInfo) -> Optional[str]:
    spec = match_device_name(gpu.name, gpu.memory_total_bytes)
    return spec.key if spec else None


def _known_pci_id(gpu: GpuInfo) -> Optional[str]:
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


def mixed_gpu_warning(gpus: Sequence[GpuInfo], cuda_device_order: Optional[str]) -> tuple[bool, Optional[str]]:
    """(visible models differ, vLLM's warning text or None): only visible GPUs, only real differences
    (unlike vLLM, vllm#19045 and #16740), and only when CUDA_DEVICE_ORDER is not PCI_BUS_ID."""
    mixed = not same_model(gpus)
    if mixed and cuda_device_order != PCI_BUS_ID:
        return True, VLLM_MIXED_GPU_WARNING % ", ".join(g.name for g in gpus)
    return mixed, None


def vllm_log_warnings(all_names: Sequence[str], cuda_device_order: Optional[str]) -> Optional[str]:
    """What vLLM's own log_warnings logs: raw names of every GPU in the machine, visible or not."""
    if len(all_names) > 1 and len(set(all_names)) > 1 and cuda_device_order != PCI_BUS_ID:
        return VLLM_MIXED_GPU_WARNING % ", ".join(all_names)
    return None


def _why_vllm_warns(warning: str, all_names: Sequence[str], gpus: Sequence[GpuInfo]) -> str:
    return (
        f"vLLM itself would still log \"{warning}\": it compares the raw names of all {len(all_names)} GPUs in the machine, including ones "
        "CUDA_VISIBLE_DEVICES hides (vllm#19045), and treats name variants as different models (vllm#16740). "
        f"The {len(gpus)} visible GPU(s) are one model, so that warning can be ignored here."
    )


# ---------------------------------------------------------------------------------------------
# torch fallback


class _NotAsked:
    """The torch side when the caller forbids the fallback: the reason becomes the report's error."""

    def __init__(self, reason: str):
        self.reason = reason

    def inventory(self) -> Optional[dict]:
        raise _FallbackNotAsked(self.reason)


class _FallbackNotAsked(Exception):
    pass


def _from_torch(torch: TorchFacade, env: Mapping[str, str], reason: str, measure_p2p: bool) -> ProbeReport:
    errors = [reason]
    notes: list[str] = []
    try:
        inventory = torch.inventory()
    except _FallbackNotAsked as exc:
        inventory = None
        errors.append(f"{TORCH_NOT_ASKED}{exc}")
    except Exception as exc:  # noqa: BLE001 -- a broken CUDA install must not crash the probe
        inventory = None
        errors.append(f"torch.cuda failed too: {type(exc).__name__}: {exc}")
    else:
        if inventory is None:
            errors.append("torch is not installed, so there is no fallback")
    devices = (inventory or {}).get("devices") or []
    if inventory is not None and not devices:
        notes.append(f"torch {inventory.get('version')} sees no CUDA GPU")
    gpus = tuple(_torch_gpu(i, d) for i, d in enumerate(devices))
    source = "torch" if gpus else "none"
    if not gpus:
        not_asked = isinstance(torch, _NotAsked)
        notes.append("No GPU found through NVML." if not_asked else "No GPU found: neither NVML nor torch.cuda sees one.")
    else:
        notes.append(
            "GPUs read through torch.cuda (NVML unavailable): CUDA applied CUDA_VISIBLE_DEVICES itself, "
            "so physical (NVML) indices, free memory and NVLink status are unknown"
        )
    pairs: list[P2PPair] = []
    if measure_p2p and len(gpus) > 1:
        pairs = [P2PPair(a=a.index, b=b.index, nvlink=None) for k, a in enumerate(gpus) for b in gpus[k + 1:]]
        pairs = _measure(torch, pairs, len(gpus))
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


def _torch_gpu(index: int, d: Mapping[str, Any]) -> GpuInfo:
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
        table_peak_memory_bandwidth_bytes_per_s=_table_peak(d.get("name"), d.get("total_memory")),
    )


# ---------------------------------------------------------------------------------------------
# --measure-p2p


def _measure(torch: TorchFacade, pairs: list[P2PPair], visible: int) -> list[P2PPair]:
    if visible < 2:
        return pairs
    measure = getattr(torch, "measure_copy_gbps", None)
    if measure is None:
        return [replace(p, measure_note="this torch facade cannot measure") for p in pairs]
    results = measure([(p.a, p.b) for p in pairs])
    out = []
    for p in pairs:
        value = results.get((p.a, p.b))
        if isinstance(value, (int, float)):
            out.append(replace(p, measured_gbps=round(float(value), 1)))
        else:
            out.append(replace(p, measure_note=str(value or "not measured")))
    return out

