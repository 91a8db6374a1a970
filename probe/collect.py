"""`collect_probe`: the one entry point that turns NVML (or torch.cuda) into a `ProbeReport`.

NVML first: it answers without creating a CUDA context and without importing torch. If
`nvmlInit` fails (library not found, driver not loaded, version mismatch), torch.cuda is asked
instead (imported only then); if neither sees a GPU the report says so with source "none".
Set ATTNSEL_NVML_SCENARIO=path.json to replay a recorded scenario instead of the real driver.

The parts: probe/nvml/gpus.py reads each GPU, probe/visible_devices.py applies
CUDA_VISIBLE_DEVICES, probe/links/p2p.py the links, probe/mixed_gpus.py compares the models,
probe/torch_fallback.py builds the report when NVML is unavailable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from attnsel.files import shown_path
from attnsel.probe.facts import GpuInfo, NvlinkVerdict, ProbeReport
from attnsel.probe.links import (
    collect_pairs,
    nvlink_verdict,
    pair_calls,
    with_measured_bandwidth,
)
from attnsel.probe.mixed_gpus import (
    mixed_gpu_warning,
    vllm_log_warnings,
    why_vllm_warns,
)
from attnsel.probe.nvml import (
    NvmlFacade,
    NvmlInitError,
    NvmlSession,
    RawGpu,
    RealTorch,
    ReplayFacade,
    ReplayTorch,
    TorchFacade,
    cuda_driver_missing,
    cuda_version_str,
    facades_from_env,
    gpu_calls,
    gpu_info,
    gpu_problems,
    probe_threads,
    query_problems,
    read_gpu,
)
from attnsel.probe.torch_fallback import NotAsked, from_torch
from attnsel.probe.visible_devices import (
    VisibleResolution,
    describe_order,
    resolve_visible_devices,
)

__all__ = ["collect_from_scenario", "collect_probe"]

MAX_NVML_DEVICES = 64  # GPUs one host's NVML can show; beyond this the answer is not a real machine


# ---------------------------------------------------------------------------------------------
# Entry points


def collect_probe(
    env: Mapping[str, str] | None = None,
    nvml: NvmlFacade | None = None,
    measure_p2p: bool = False,
    torch: TorchFacade | None = None,
    no_torch_reason: str | None = None,
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
        torch = NotAsked(no_torch_reason)
    elif torch is None:
        torch = RealTorch()
    try:
        nvml.init()
    except NvmlInitError as exc:
        reason = f"NVML unavailable: {exc}" + (f" -- {exc.hint}" if exc.hint else "")
        return from_torch(_torch_if_driver(torch), env, reason, measure_p2p)
    except Exception as exc:  # noqa: BLE001 -- any other init failure is just as fatal for NVML
        return from_torch(_torch_if_driver(torch), env, f"NVML unavailable: {type(exc).__name__}: {exc}", measure_p2p)
    session = NvmlSession(nvml, threads=probe_threads(env))  # ATTNSEL_PROBE_THREADS (probe/nvml/prefetch.py)
    try:
        return _from_nvml(session, torch, env, measure_p2p)
    finally:
        session.close()
        nvml.shutdown()


def _torch_if_driver(torch: TorchFacade) -> TorchFacade:
    """The real torch.cuda only where a CUDA driver can be loaded: importing torch to hear "no GPU"
    costs ~2 s (docs/probe.md, "Speed"). Replayed and injected facades are asked as given."""
    if isinstance(torch, RealTorch):
        missing = cuda_driver_missing()
        if missing is not None:
            return NotAsked(missing)
    return torch


def collect_from_scenario(scenario: Mapping[str, Any], env: Mapping[str, str] | None = None, measure_p2p: bool = False) -> ProbeReport:
    """collect_probe over a replayed scenario (the NVML and the torch side both come from it)."""
    return collect_probe(env or {}, nvml=ReplayFacade(scenario), measure_p2p=measure_p2p, torch=ReplayTorch(scenario))


# ---------------------------------------------------------------------------------------------
# NVML path


def _from_nvml(session: NvmlSession, torch: TorchFacade, env: Mapping[str, str], measure_p2p: bool) -> ProbeReport:
    driver = session.get("nvmlSystemGetDriverVersion")
    cuda = cuda_version_str(session.get("nvmlSystemGetCudaDriverVersion"))
    count = session.get("nvmlDeviceGetCount")
    unusable = _unusable_count(session, count)
    if unusable:
        return from_torch(torch, env, unusable, measure_p2p)

    session.prefetch(gpu_calls(count))  # the pairs are known only once the GPUs are read (CUDA's order)
    raws = [read_gpu(session, i) for i in range(count)]
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    order = env.get("CUDA_DEVICE_ORDER")
    physical = [r.physical() for r in raws]
    resolution = resolve_visible_devices(physical, cvd, order)
    gpus = _visible_gpus(raws, resolution)
    verdict = _links(session, torch, gpus, measure_p2p)

    warnings: list[str] = list(resolution.problems)
    errors: list[str] = []
    notes: list[str] = list(resolution.notes) + describe_order(resolution, physical)
    gpu_problems(raws, gpus, errors, notes)
    query_problems(session, raws, warnings, notes)
    notes.extend(_vllm_visible_device_notes(cvd))
    mixed, vllm_warning = _model_warnings(raws, gpus, order, warnings, notes)
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
        physical_gpu_names=tuple(r.name or "unknown" for r in raws),
        vllm_device_warning=vllm_warning,
    )


def _unusable_count(session: NvmlSession, count: object) -> str | None:
    """Why NVML's GPU count cannot be used (the probe then asks torch.cuda), or None."""
    if not isinstance(count, int) or isinstance(count, bool):
        failure = session.last_failure()
        why = failure.describe() if failure else "no answer"
        return f"NVML could not count the GPUs ({why})"
    if not 0 <= count <= MAX_NVML_DEVICES:  # the probe's work grows with the count squared (GPU pairs)
        return (f"NVML answered a GPU count of {count}, which no host has "
                f"(at most {MAX_NVML_DEVICES}): a broken driver answer")
    return None


def _visible_gpus(raws: Sequence[RawGpu], resolution: VisibleResolution) -> list[GpuInfo]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves, in CUDA's order: whole GPUs or MIG slices."""
    gpus = []
    for dev in resolution.devices:
        raw = raws[dev.physical_index]
        mig = next((m for m in raw.migs if dev.mig and m.mig_index == dev.mig.mig_index), None)
        gpus.append(gpu_info(dev.logical_index, raw, mig))
    return gpus


def _links(session: NvmlSession, torch: TorchFacade, gpus: Sequence[GpuInfo], measure_p2p: bool) -> NvlinkVerdict:
    """NVML's answer for every pair of visible whole GPUs (MIG slices have no links), and vLLM's verdict."""
    pair_inputs = [(g.index, g.physical_index) for g in gpus if not g.is_mig and g.physical_index is not None]
    session.prefetch(pair_calls(pair_inputs))
    pairs = collect_pairs(session, pair_inputs) if len(pair_inputs) > 1 else []
    if measure_p2p:
        pairs = with_measured_bandwidth(torch, pairs, len(gpus))
    return nvlink_verdict(pairs, len(gpus), [p for _, p in pair_inputs])


def _model_warnings(raws: Sequence[RawGpu], gpus: Sequence[GpuInfo], order: str | None,
                    warnings: list[str], notes: list[str]) -> tuple[bool, str | None]:
    """(visible models differ, what vLLM's own log_warnings would log); adds the warning or the note."""
    mixed, mixed_warning = mixed_gpu_warning(gpus, order)
    if mixed_warning:
        warnings.append(mixed_warning)
    names = [r.name or "unknown" for r in raws]
    # vLLM's log_warnings asks every GPU's name; with one unreadable it raises instead of warning.
    vllm_warning = vllm_log_warnings(names, order) if all(r.name for r in raws) else None
    if vllm_warning and not mixed_warning:
        notes.append(why_vllm_warns(vllm_warning, names, gpus))
    return mixed, vllm_warning


def _vllm_visible_device_notes(cvd: str | None) -> list[str]:
    if not cvd or all(e.strip().lstrip("+-").isdigit() for e in cvd.split(",") if e.strip()):
        return []
    return [
        "CUDA_VISIBLE_DEVICES holds UUID/MIG entries: vLLM versions that int() each entry raise ValueError on "
        "them (vllm#41848, vllm#6551); short GPU UUIDs fail NVML lookups (PR#51716) and a MIG slice is mapped "
        "to its parent GPU (PR#41776). attnsel resolved them the way CUDA does."
    ]


def _no_visible_gpu_note(count: int, cvd: str | None) -> str:
    if count == 0:
        return "NVML works but reports no GPU"
    return f"NVML sees {count} GPU(s) but none is visible to CUDA with CUDA_VISIBLE_DEVICES={shown_path(cvd or '')}"

