"""`attnsel tune` end to end, between the CLI (arguments) and the renderers (output).

    request -> shape (flags or --model, same derivation as `explain`) -> device (worker probe)
    -> plan (vLLM's rules filter the grid) -> sweep (workers, JSONL) -> recommendation
    -> one JSON document (tune.json) that the renderers and `--json` print.
The request, shape and plan are bench/tune/request.py; the document bench/tune/document.py; its
time breakdown bench/tune/phases.py. Torch-free: everything that touches CUDA happens in worker
processes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnsel.bench.plan import build as P
from attnsel.bench.sweep import SweepOptions, SweepProgress, probe_device, run_sweep
from attnsel.bench.sweep import results as R
from attnsel.bench.timing import stats as T
from attnsel.bench.tune import env_info
from attnsel.bench.tune.document import (
    build_document,
    prespawn_warnings,
    write_document,
)
from attnsel.bench.tune.phases import phase_breakdown
from attnsel.bench.tune.records import TuneDocument
from attnsel.bench.tune.request import (
    TuneRequest,
    make_plan,
    refused_grid_message,
)
from attnsel.errors import CheckFailed, EnvironmentProblem, UserInputError

SUMMARY_FILE = "summary.txt"


@dataclass
class TuneOutcome:
    document: TuneDocument
    output_dir: Path

    @property
    def timed_rows(self) -> int:
        return sum(1 for r in self.document.rows if r.status == R.STATUS_OK)


@dataclass
class MeasuredSweep:
    """What one sweep measured, with the GPU's environment and its clocks before and after."""

    rows: list[dict]
    worker_info: dict
    outcomes: dict  # backend -> the sweep's per-backend outcome (workers, rows, wall time)
    facts: dict  # --gpus: the calibration between the GPUs
    gpu_env: dict
    clocks: dict
    elapsed_s: float


def _enricher(peak: float | None) -> Callable[[dict], dict]:
    def enrich(row: dict) -> dict:
        row["peak_memory_bandwidth_bytes_per_s"] = peak
        row["pct_of_peak_bandwidth"] = T.percent_of_peak(row.get("bandwidth_bytes_per_s"), peak)
        return row

    return enrich


def run_tune(
    req: TuneRequest,
    output_dir: Path,
    *,
    progress: SweepProgress | None = None,
    on_plan: Callable[[P.Plan], None] | None = None,
) -> TuneOutcome:
    """The sweep the request describes (its flags checked: bench/tune/flags.py), written to `output_dir`."""
    options = req.options
    output_dir = Path(output_dir)
    results_path = output_dir / R.RESULTS_FILE
    if results_path.exists() and results_path.stat().st_size > 0 and not req.resume:
        raise UserInputError(f"{results_path} already holds results: pass --resume to continue that sweep, "
                             f"or choose another --output")
    run_started = time.time()
    if req.gpus:
        options = dataclasses.replace(options, gpus=selected_gpus(req.gpus))
    device = device_for_plan(options)
    probe_s = time.time() - run_started
    output_dir.mkdir(parents=True, exist_ok=True)
    capability = tuple(device.get("capability") or ())
    if len(capability) != 2:
        raise UserInputError("the GPU probe did not report a compute capability")
    plan = make_plan(req, capability, device.get("name"))
    if not plan.runnable_configs:
        raise CheckFailed(refused_grid_message(plan))
    if on_plan:
        on_plan(plan)
    measured = measure_sweep(plan, options, output_dir, device, resume=req.resume, retry_failed=req.retry_failed,
                             progress=progress)
    document = finish_document(req, plan, options, device, measured, probe_s=probe_s, run_started=run_started)
    write_document(document, output_dir)
    return TuneOutcome(document, output_dir)


def measure_sweep(plan: P.Plan, options: SweepOptions, output_dir: Path, device: dict, *, resume: bool,
                  retry_failed: bool, progress: SweepProgress | None) -> MeasuredSweep:
    """The sweep between two NVML clock snapshots of the timed GPU; rows carry its peak bandwidth."""
    nvml = env_info.NvmlReader()
    try:
        index = nvml.index_for(device.get("uuid"))
        gpu_env = nvml.environment(index)
        peak = gpu_env.get("peak_memory_bandwidth_bytes_per_s")
        if peak is None:
            peak, source = env_info.peak_from_worker_info(device)
            gpu_env["peak_memory_bandwidth_bytes_per_s"], gpu_env["peak_bandwidth_source"] = peak, source
        before = nvml.snapshot(index)
        started = time.time()
        outcomes: dict = {}
        facts: dict = {}
        rows, infos = run_sweep(plan, options, output_dir, resume=resume, retry_failed=retry_failed,
                                progress=progress, enrich=_enricher(peak), outcomes=outcomes, facts=facts)
        elapsed = time.time() - started
        after = nvml.snapshot(index)
    finally:
        nvml.close()
    return MeasuredSweep(rows, infos, outcomes, facts, gpu_env, {"before": before, "after": after}, elapsed)


def finish_document(req: TuneRequest, plan: P.Plan, options: SweepOptions, device: dict, measured: MeasuredSweep, *,
                    probe_s: float, run_started: float) -> TuneDocument:
    """tune.json for this run: the planned rows only, the device and sweep warnings first, the phases."""
    device_warnings = []
    if device.get("source") == "nvml":
        first = next((info for info in measured.worker_info.values() if info), None)
        device_warnings = env_info.merge_worker_info(device, first)
    keys = {k for group in _planned_keys(plan, options) for k in group}
    rows = [r for r in measured.rows if r["key"] in keys]
    document = build_document(plan, options, rows, req.weights, min_gain=req.min_gain, device=device,
                              gpu_env=measured.gpu_env, clocks=measured.clocks, worker_info=measured.worker_info,
                              elapsed_s=measured.elapsed_s)
    adapters = [note] if (note := vllm_adapter_note()) else []
    document.warnings = adapters + device_warnings + prespawn_warnings(measured.outcomes) + (document.warnings or [])
    document.phases = phase_breakdown(measured.outcomes, probe_s=probe_s, total_s=time.time() - run_started,
                                         probe_source=device.get("source", "worker"))
    if options.gpus:
        _add_gpus_section(document, options.gpus, measured.facts)
    return document


def vllm_adapter_note() -> str | None:
    """One line when the installed vLLM's release has no adapter facts that the CPU check drove its
    classes through (attention/versions/adapter_facts.py); None without vLLM or when it has."""
    from attnsel.attention.versions import installed_adapter_facts

    return installed_adapter_facts()[2]


def _add_gpus_section(document: TuneDocument, gpus: list[str], facts: dict) -> None:
    document.gpus = {"requested": gpus, **facts}
    calibration = facts.get("calibration")
    if calibration and not calibration["agree"]:
        document.warnings = document.warnings or []
        document.warnings.insert(0, f"--gpus {','.join(gpus)}: the GPUs did not time the same row alike "
                                       f"({'; '.join(calibration['comparisons'])}), so the sweep ran on GPU "
                                       f"{gpus[0]} alone")


def selected_gpus(value: str) -> list[str] | None:
    """--gpus resolved against the GPUs NVML sees for this process; one GPU model required."""
    from attnsel.bench.sweep import multi_gpu

    reader = env_info.NvmlReader()
    try:
        visible = env_info.visible_gpus_from_nvml(reader)
    finally:
        reader.close()
    if not visible:
        # the flag is fine; this machine cannot answer it (no driver, no NVML): an environment problem, exit 3
        raise EnvironmentProblem("--gpus needs NVML to see this machine's GPUs (plain indices or UUIDs in "
                             "CUDA_VISIBLE_DEVICES); run without --gpus to use GPU 0")
    chosen = multi_gpu.parse_gpus(value, len(visible))
    reason = multi_gpu.same_model_reason([g for g in visible if g["ordinal"] in (chosen or ())])
    if reason:
        raise UserInputError(reason)
    return chosen


def device_for_plan(options: SweepOptions) -> dict:
    """Name + capability for the plan: from NVML when it answers for sure (no extra process:
    a torch probe costs a torch import + a CUDA context, ~5-10 s), else from a probe worker."""
    reader = env_info.NvmlReader()
    try:
        if options.gpus:  # --gpus: the first chosen GPU (selected_gpus made sure they are one model)
            chosen = [g for g in env_info.visible_gpus_from_nvml(reader) or [] if g["ordinal"] == options.gpus[0]]
            device = dict(chosen[0], source="nvml") if chosen else None
        else:
            device = env_info.device_from_nvml(reader)
    finally:
        reader.close()
    if device is not None:
        return device
    device = probe_device(options.toolkit, options.startup_timeout_s)
    device["source"] = "worker"
    return device


def _planned_keys(plan: P.Plan, options: SweepOptions) -> list[list[str]]:
    from attnsel.bench.sweep import items_for, skipped_rows

    timed = [item["key"] for items in items_for(plan, options).values() for item in items]
    return [timed, [row["key"] for row in skipped_rows(plan, options)]]


def default_output_dir() -> Path:
    return Path(f"attnsel-tune-{time.strftime('%Y%m%d-%H%M%S')}")
