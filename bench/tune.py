"""`attnsel tune` end to end, between the CLI (arguments) and the renderers (output).

    request -> shape (flags or --model, same derivation as `explain`) -> device (worker probe)
    -> plan (vLLM's rules filter the grid) -> sweep (workers, JSONL) -> recommendation
    -> one JSON document (tune.json) that the renderers and `--json` print.
Torch-free: everything that touches CUDA happens in worker processes.
"""

from __future__ import annotations

import dataclasses
import functools

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from attnsel import __version__
from attnsel.bench import env_info
from attnsel.bench import plan as P
from attnsel.bench.plan_rules import rule_profile_choice, vllm_default_choice, vllm_verdict
from attnsel.bench.tune_shape import TuneShape, default_head_layout, make_shape, shape_from_model
from attnsel.bench.workloads import WORKLOAD_KINDS
from attnsel.bench import plan_mla
from attnsel.bench import recommend as REC
from attnsel.bench import results as R
from attnsel.bench import timing as T
from attnsel.bench.sweep import SweepOptions, SweepProgress, probe_device, run_sweep
from attnsel.errors import CheckFailed, UserInputError

DOCUMENT_SCHEMA = "attnsel-tune/1"
PLAN_SCHEMA = "attnsel-tune-plan/1"
DOCUMENT_FILE = "tune.json"
SUMMARY_FILE = "summary.txt"
CSV_FILE = "results.csv"


@dataclass
class TuneRequest:
    model: Optional[str] = None
    head_size: Optional[int] = None
    num_heads: Optional[int] = None
    num_kv_heads: Optional[int] = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    backends: list[str] = field(default_factory=list)  # empty: the model's grid (dense or MLA backends)
    block_sizes: list[int] = field(default_factory=lambda: list(P.DEFAULT_BLOCK_SIZES))
    block_sizes_given: bool = False  # --block-sizes was passed
    kinds: list[str] = field(default_factory=lambda: list(WORKLOAD_KINDS))
    grid: str = "default"
    weights: dict = field(default_factory=lambda: dict(REC.DEFAULT_WEIGHTS))
    min_gain: float = REC.DEFAULT_MIN_GAIN  # --min-gain: below it a margin is not worth a flag change
    gpu_name: Optional[str] = None  # --gpu (dry run without a GPU)
    capability: Optional[tuple[int, int]] = None  # --capability
    vllm_version: Optional[str] = None  # --vllm-version: which rule profile filters the grid
    gpus: Optional[str] = None  # --gpus all|0,1: spread the sweep over these GPUs (bench/multi_gpu.py)
    options: SweepOptions = field(default_factory=SweepOptions)
    # an MLA layer without a model (--use-mla): bench/plan_mla.py
    use_mla: bool = False
    kv_lora_rank: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    qk_nope_head_dim: Optional[int] = None


MLA_FLAGS = "--use-mla/--kv-lora-rank/--qk-rope-head-dim/--qk-nope-head-dim"


def check_shape_flags(req: TuneRequest) -> None:
    """Bad shape flags fail before anything starts (no GPU probe, no output folder)."""
    mla_flags = req.use_mla or any(v is not None for v in (req.kv_lora_rank, req.qk_rope_head_dim, req.qk_nope_head_dim))
    if req.model:
        if req.head_size or req.num_heads or req.num_kv_heads or mla_flags:
            raise UserInputError(f"pass either --model or --head-size/--num-heads/--num-kv-heads ({MLA_FLAGS}), not both")
        return
    if mla_flags:
        mla_shape(req, "bfloat16")
        return
    if req.head_size is None:
        raise UserInputError("pass --head-size (and optionally --num-heads/--num-kv-heads), or --model CONFIG")
    heads, kv_heads, _ = explicit_heads(req)
    make_shape(req.head_size, heads, kv_heads, "bfloat16", req.kv_cache_dtype, req.tensor_parallel_size)


def explicit_heads(req: TuneRequest) -> tuple[int, Optional[int], Optional[str]]:
    """(heads, KV heads, what was assumed): --num-heads/--num-kv-heads, or with only --head-size the
    representative layout for that head size (`attnsel tune --head-size 128 --dtype bf16`). Heads
    are model totals (divided by TP in make_shape), so the default layout is scaled by TP."""
    if req.num_heads is not None:
        return req.num_heads, req.num_kv_heads, None
    q, kv, note = default_head_layout(int(req.head_size))
    tp = max(1, int(req.tensor_parallel_size or 1))
    if req.num_kv_heads is not None:
        return req.num_kv_heads * (q // kv), req.num_kv_heads, note
    return q * tp, kv * tp, note


def mla_shape(req: TuneRequest, dtype: str) -> TuneShape:
    """`--use-mla --kv-lora-rank R --qk-rope-head-dim P --num-heads H` (an MLA layer, one latent cache)."""
    missing = [flag for flag, value in (("--use-mla", req.use_mla or None), ("--kv-lora-rank", req.kv_lora_rank),
                                        ("--qk-rope-head-dim", req.qk_rope_head_dim), ("--num-heads", req.num_heads))
               if value is None]
    if missing:
        raise UserInputError(f"an MLA layer needs --use-mla --kv-lora-rank --qk-rope-head-dim --num-heads "
                             f"(missing {', '.join(missing)}), e.g. DeepSeek-V3: --use-mla --kv-lora-rank 512 "
                             f"--qk-rope-head-dim 64 --num-heads 128")
    if req.num_kv_heads is not None:
        raise UserInputError("--num-kv-heads does not apply to MLA: its layers have one latent KV head")
    shape = plan_mla.make_mla_shape(req.kv_lora_rank, req.qk_rope_head_dim, req.num_heads, dtype, req.kv_cache_dtype,
                                    req.tensor_parallel_size, req.qk_nope_head_dim)
    if req.head_size is not None and req.head_size != shape.head_size:
        raise UserInputError(f"--head-size {req.head_size} contradicts the MLA head size --kv-lora-rank + "
                             f"--qk-rope-head-dim = {shape.head_size}")
    return shape


def resolve_shape(req: TuneRequest, capability: Optional[tuple[int, int]]) -> TuneShape:
    check_shape_flags(req)
    if req.model:
        return shape_from_model(req.model, capability=capability, dtype=req.dtype,
                                kv_cache_dtype=req.kv_cache_dtype, tensor_parallel_size=req.tensor_parallel_size)
    dtype = req.dtype
    if dtype == "auto":
        # vLLM's auto for a non-model input: bf16 on CC >= 8.0, else fp16 (vllm-rules §5g/§6)
        dtype = "bfloat16" if capability is None or tuple(capability) >= (8, 0) else "float16"
    if req.use_mla or req.kv_lora_rank is not None:
        return mla_shape(req, dtype)
    heads, kv_heads, assumed = explicit_heads(req)
    shape = make_shape(req.head_size, heads, kv_heads, dtype, req.kv_cache_dtype, req.tensor_parallel_size)
    return dataclasses.replace(shape, assumed=assumed)


def make_plan(req: TuneRequest, capability: tuple[int, int], gpu_name: Optional[str]) -> P.Plan:
    shape = resolve_shape(req, capability)
    version = req.vllm_version
    plan = P.build_plan(shape, capability, backends=req.backends, block_sizes=req.block_sizes, kinds=req.kinds,
                        grid=req.grid, gpu_name=gpu_name, block_sizes_given=req.block_sizes_given,
                        verdict=functools.partial(vllm_verdict, vllm_version=version),
                        default_choice=functools.partial(vllm_default_choice, vllm_version=version))
    choice = rule_profile_choice(version)
    return dataclasses.replace(plan, rule_profile=choice.profile.name, rule_profile_reason=choice.reason)


def refused_grid_message(plan: P.Plan) -> str:
    reasons = "; ".join(sorted({f"{c.backend}: {', '.join(c.reasons)}" for c in plan.skipped_configs}))
    return f"vLLM would refuse every backend x block size in the grid, nothing to time ({reasons})"


def plan_document(plan: P.Plan, options: SweepOptions) -> dict:
    return {"schema": PLAN_SCHEMA, "attnsel_version": __version__, "options": options.to_dict(), **plan.to_dict()}


def capability_without_gpu(req: TuneRequest) -> tuple[tuple[int, int], Optional[str]]:
    """For --dry-run: --capability / --gpu, else what NVML says about GPU 0, else an error."""
    if req.capability:
        return req.capability, req.gpu_name
    if req.gpu_name:
        from attnsel.probe.gpu_table import find_gpu

        spec = find_gpu(req.gpu_name)
        return spec.compute_capability, spec.name
    reader = env_info.NvmlReader()
    try:
        index = reader.index_for(None)
        if reader.session is not None and index is not None:
            cc = reader.session.get("nvmlDeviceGetCudaComputeCapability", index)
            if cc:
                return (int(cc[0]), int(cc[1])), reader.session.get("nvmlDeviceGetName", index)
    finally:
        reader.close()
    raise UserInputError("no GPU found: pass --gpu NAME (e.g. H100) or --capability X.Y for a dry run")


# ---------------------------------------------------------------------------------------------


@dataclass
class TuneOutcome:
    document: dict
    output_dir: Path

    @property
    def timed_rows(self) -> int:
        return sum(1 for r in self.document["rows"] if r.get("status") == R.STATUS_OK)


def _enricher(peak: Optional[float]) -> Callable[[dict], dict]:
    def enrich(row: dict) -> dict:
        row["peak_memory_bandwidth_bytes_per_s"] = peak
        row["pct_of_peak_bandwidth"] = T.percent_of_peak(row.get("bandwidth_bytes_per_s"), peak)
        return row

    return enrich


def workload_labels(plan: P.Plan) -> dict[str, list[str]]:
    labels: dict[str, list[str]] = {}
    for w in plan.workloads:
        labels.setdefault(w.kind, []).append(w.label())
    return labels


def run_tune(
    req: TuneRequest,
    output_dir: Path,
    *,
    resume: bool = False,
    retry_failed: bool = False,
    progress: Optional[SweepProgress] = None,
    on_plan: Optional[Callable[[P.Plan], None]] = None,
) -> TuneOutcome:
    options = req.options
    output_dir = Path(output_dir)
    results_path = output_dir / R.RESULTS_FILE
    if results_path.exists() and results_path.stat().st_size > 0 and not resume:
        raise UserInputError(f"{results_path} already holds results: pass --resume to continue that sweep, "
                             f"or choose another --output")
    check_shape_flags(req)
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
    device_warnings = []
    if device.get("source") == "nvml":
        first = next((info for info in infos.values() if info), None)
        device_warnings = env_info.merge_worker_info(device, first)
    keys = {k for group in _planned_keys(plan, options) for k in group}
    rows = [r for r in rows if r["key"] in keys]
    document = build_document(plan, options, rows, req.weights, min_gain=req.min_gain, device=device, gpu_env=gpu_env,
                              clocks={"before": before, "after": after}, worker_info=infos, elapsed_s=elapsed)
    document["warnings"] = device_warnings + prespawn_warnings(outcomes) + document["warnings"]
    document["phases"] = phase_breakdown(outcomes, probe_s=probe_s, total_s=time.time() - run_started,
                                         probe_source=device.get("source", "worker"))
    if options.gpus:
        document["gpus"] = {"requested": options.gpus, **facts}
        calibration = facts.get("calibration")
        if calibration and not calibration["agree"]:
            document["warnings"].insert(0, f"--gpus {','.join(options.gpus)}: the GPUs did not time the same row alike "
                                           f"({'; '.join(calibration['comparisons'])}), so the sweep ran on GPU "
                                           f"{options.gpus[0]} alone")
    write_document(document, output_dir)
    return TuneOutcome(document, output_dir)


def selected_gpus(value: str) -> list[str]:
    """--gpus resolved against the GPUs NVML sees for this process; one GPU model required."""
    from attnsel.bench import multi_gpu

    reader = env_info.NvmlReader()
    try:
        visible = env_info.visible_gpus_from_nvml(reader)
    finally:
        reader.close()
    if not visible:
        raise UserInputError("--gpus needs NVML to see this machine's GPUs (plain indices or UUIDs in "
                             "CUDA_VISIBLE_DEVICES); run without --gpus to use GPU 0")
    chosen = multi_gpu.parse_gpus(value, len(visible))
    reason = multi_gpu.same_model_reason([g for g in visible if g["ordinal"] in chosen])
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


def prespawn_warnings(outcomes: dict) -> list[str]:
    """A pre-spawned worker whose library import created a CUDA context did so while the previous
    backend was timing: harmless in principle (no kernels run), but say so, so it can be ruled out."""
    out = []
    backends = list(outcomes)
    for i, backend in enumerate(backends):
        early = [w for w in outcomes[backend].workers if w.get("prespawned") and w.get("cuda_initialized_by_import")]
        if early and i > 0:
            # Measured on an H200 (2026-11-21, 256 rows): per-row medians with and without
            # pre-spawning agreed (median ratio 1.0003, p10-p90 0.989-1.011), so this is a note.
            out.append(f"importing {backend}'s kernel library created a CUDA context while an earlier backend "
                       f"was being timed (pre-spawned worker; no effect on medians was measured on an H200); "
                       f"ATTNSEL_TUNE_PRESPAWN=0 rules it out")
    return out


ROW_PHASES = (("batch_s", ("batch_s",)), ("setup_s", ("prepare_s", "first_call_s")), ("check_s", ("check_s",)),
              ("timing_s", ("timing_s",)))


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(float(value), 3)


def backend_phases(outcome) -> dict:
    """Where one backend's wall time went: exposed worker startup, then per-row batch build,
    setup (prepare: plan + JIT + first call, and the extra first call), check, timing, and the
    rest (library import inside the first row, release, protocol, worker exit) as `other_s`."""
    wall = outcome.wall_s or 0.0
    workers = outcome.workers
    startup = sum(w.get("exposed_s") or 0.0 for w in workers)
    out = {"wall_s": wall, "startup_s": startup}
    for name, parts in ROW_PHASES:
        out[name] = sum((r.get("wall_breakdown_s") or {}).get(p, 0.0) or 0.0 for r in outcome.rows for p in parts)
    out["other_s"] = wall - sum(out[k] for k in ("startup_s", "batch_s", "setup_s", "check_s", "timing_s"))
    out["rows"] = len(outcome.rows)
    out["row_wall_s"] = sum(r.get("row_wall_s") or 0.0 for r in outcome.rows)
    detail = {}
    for key in ("interpreter_s", "torch_import_s", "library_import_s", "cuda_init_s", "overlapped_s"):
        values = [w.get(key) for w in workers if isinstance(w.get(key), (int, float))]
        detail[key] = sum(values) if values else None
    out["startup_detail"] = detail
    out["workers"] = len(workers)
    out["prespawn_failures"] = outcome.prespawn_failures
    return {k: (_round(v) if isinstance(v, float) else v) for k, v in out.items()} | {
        "startup_detail": {k: _round(v) for k, v in detail.items()}}


def phase_breakdown(outcomes: dict, *, probe_s: float, total_s: float, probe_source: str) -> dict:
    """tune.json "phases": total = probe + each backend's wall + other (plan, NVML, writing)."""
    backends = {backend: backend_phases(outcome) for backend, outcome in outcomes.items()}
    spent = probe_s + sum(b["wall_s"] or 0.0 for b in backends.values())
    return {"total_s": _round(total_s), "probe_s": _round(probe_s), "probe_source": probe_source,
            "backends": backends, "other_s": _round(total_s - spent)}


def _planned_keys(plan: P.Plan, options: SweepOptions) -> list[list[str]]:
    from attnsel.bench.sweep import items_for, skipped_rows

    timed = [item["key"] for items in items_for(plan, options).values() for item in items]
    return [timed, [row["key"] for row in skipped_rows(plan, options)]]


def stand_in_warnings(rows: list[dict], capability: tuple[int, int]) -> list[str]:
    """Say where a backend was timed with another provider than the kernel vLLM itself would run,
    since the flags we recommend make vLLM run its own kernel."""
    adapters = {(r.get("backend"), str(r.get("adapter") or "")) for r in rows if r.get("status") == "ok"}
    out = []
    # vLLM runs its own FA3 build on Hopper and FA4 on Blackwell (gpu-facts.md, vllm-rules §3c)
    if tuple(capability)[0] == 9 and any(b == "FLASH_ATTN" and "fa4" in a.lower() for b, a in adapters):
        out.append("FLASH_ATTN was timed with FlashAttention 4 (CuTe) as a stand-in for vLLM's own FA3 "
                   "build on Hopper (gpu-facts.md): vLLM's kernel may be faster or slower")
    if ("TRITON_ATTN", "attnsel-triton") in adapters:
        out.append("TRITON_ATTN was timed with attnsel's own Triton paged-attention kernel (vLLM is not installed "
                   "here): `--attention-backend TRITON_ATTN` runs vLLM's Triton kernel, which may be faster or slower")
    if ("FLASHINFER_MLA", "flashinfer-mla-wrapper") in adapters:
        out.append("FLASHINFER_MLA was timed with FlashInfer's BatchMLAPagedAttentionWrapper (vLLM is not installed "
                   "here): vLLM's FLASHINFER_MLA runs FlashInfer's TRT-LLM MLA decode kernel, which may be faster "
                   "or slower")
    return out


def build_document(plan: P.Plan, options: SweepOptions, rows: list[dict], weights: dict, *,
                   min_gain: float = REC.DEFAULT_MIN_GAIN, device: dict,
                   gpu_env: dict, clocks: dict, worker_info: dict, elapsed_s: Optional[float] = None) -> dict:
    """The full results: one row per backend x block size x shape, the environment, the advice."""
    default = None
    if plan.vllm_default_backend and plan.vllm_default_block_size:
        default = (plan.vllm_default_backend, int(plan.vllm_default_block_size))
    recommendation = REC.recommend(rows, workload_labels=workload_labels(plan), vllm_default=default, weights=weights,
                                   min_gain=min_gain)
    warnings = env_info.drift_warnings(clocks.get("before"), clocks.get("after"))
    warnings += _bandwidth_warnings(rows)
    warnings += stand_in_warnings(rows, plan.capability)
    return {
        "schema": DOCUMENT_SCHEMA,
        "attnsel_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "plan": plan.to_dict(),
        "options": options.to_dict(),
        "environment": {"gpu": gpu_env, "device": device, "clocks": clocks, "workers": worker_info,
                        "versions": device.get("versions")},
        "elapsed_s": elapsed_s,
        "rows": sorted(rows, key=_row_order),
        "recommendation": recommendation.to_dict(),
        "warnings": warnings,
    }


def _row_order(row: dict) -> tuple:
    w = row.get("workload") or {}
    order = P.BACKENDS + plan_mla.MLA_BACKENDS
    return (order.index(row["backend"]) if row.get("backend") in order else 99, row.get("block_size", 0),
            WORKLOAD_KINDS.index(row.get("kind")) if row.get("kind") in WORKLOAD_KINDS else 9,
            w.get("batch", 0), w.get("context_len", 0), w.get("query_len", 0))


def _bandwidth_warnings(rows: list[dict]) -> list[str]:
    """Above 100% of peak means a hot L2 or a bytes-counting bug (users-and-measuring §C3)."""
    over = [r for r in rows if (r.get("pct_of_peak_bandwidth") or 0) > 100 and (r.get("timing") or {}).get("l2") != "hot"]
    if not over:
        return []
    worst = max(over, key=lambda r: r["pct_of_peak_bandwidth"])
    return [f"{len(over)} row(s) report more than 100% of peak memory bandwidth (worst: {worst['backend']} "
            f"--block-size {worst['block_size']} {worst['workload_label']}, {worst['pct_of_peak_bandwidth']:.0f}%): "
            f"the data was partly served from L2; treat those rows with care"]


CSV_COLUMNS = (
    "backend", "block_size", "kernel_block_size", "kernel_block_size_used", "kind", "workload_label", "batch",
    "context_len", "query_len", "dtype", "kv_cache_dtype", "mode", "status", "adapter", "provider", "n", "median_ms",
    "p20_ms", "p80_ms", "bandwidth_tb_per_s", "pct_of_peak_bandwidth", "tflops", "setup_s", "rel_error",
    "gpu", "driver", "error",
)


def csv_rows(document: dict) -> list[dict]:
    """One flat line per row, with the GPU and driver on each (for spreadsheets and pandas)."""
    gpu = (document.get("environment") or {}).get("gpu") or {}
    out = []
    for r in document["rows"]:
        t, w = r.get("timing") or {}, r.get("workload") or {}
        bw = r.get("bandwidth_bytes_per_s")
        flat = {**{k: r.get(k) for k in CSV_COLUMNS}, **{k: t.get(k) for k in ("n", "median_ms", "p20_ms", "p80_ms")},
                **{k: w.get(k) for k in ("batch", "context_len", "query_len")}}
        flat.update(bandwidth_tb_per_s=bw / 1e12 if bw else None, gpu=gpu.get("name"), driver=gpu.get("driver_version"))
        out.append(flat)
    return out


def write_document(document: dict, output_dir: Path) -> Path:
    """tune.json (everything) and results.csv (flat rows); written atomically."""
    import csv

    path = Path(output_dir) / DOCUMENT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    csv_path = Path(output_dir) / CSV_FILE
    with open(csv_path.with_suffix(".csv.tmp"), "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS))
        writer.writeheader()
        writer.writerows(csv_rows(document))
    csv_path.with_suffix(".csv.tmp").replace(csv_path)
    return path


def default_output_dir() -> Path:
    return Path(f"attnsel-tune-{time.strftime('%Y%m%d-%H%M%S')}")
