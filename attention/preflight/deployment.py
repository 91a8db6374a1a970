"""Preflight checks for one vLLM deployment: GPUs, device order, interconnect, dtype, attention.

Pure functions: a `ProbeReport` (from `probe/`, or built from `--gpu NAME --num-gpus N` for a
target machine) plus the deployment's flags in, a list of `Check(name, status, message, hint)`
out. vLLM's own words are kept verbatim in `vllm_message`. Nothing here talks to NVML or CUDA.

What vLLM does with a tensor-parallel group of N on one host: it uses logical GPUs 0..N-1, reads
the compute capability of GPU 0 (`current_platform.get_device_capability()`), warns about
different device names unless `CUDA_DEVICE_ORDER=PCI_BUS_ID` (docs/vllm-rules.md §5g), and turns its
custom all-reduce off (falling back to NCCL, slower but working) when the GPUs lack P2P (TP=2) or
a full NVLink mesh (TP>2) or the world size is not one it supports (docs/probe.md, "Custom all-reduce").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

from attnsel.attention.rules import parse_dtype
from attnsel.errors import CheckFailed
from attnsel.probe import GpuInfo, ProbeReport, bf16_error, same_model
from attnsel.probe.links import VLLM_CAR_NO_P2P, VLLM_CAR_PCIE_ONLY, unknown_verdict, vllm_fully_connected
from attnsel.attention.selector import SelectionRequest, build_selection, explain_selection
from attnsel.attention.model import derive_model_facts
from attnsel.attention.preflight.memory_check import memory_check_fields, not_planned, plan_for_group
from attnsel.attention.preflight.status import FAIL, PASS, STATUSES, WARN
PCI_BUS_ID = "PCI_BUS_ID"

# vLLM custom_all_reduce.py: CustomAllreduce._SUPPORTED_WORLD_SIZES and its warning, verbatim.
CUSTOM_ALLREDUCE_WORLD_SIZES = (2, 4, 6, 8)
VLLM_CAR_WORLD_SIZE = (
    "Custom allreduce is disabled due to an unsupported world size: {n}. Supported world sizes: {sizes}. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly."
)
# docs/vllm-rules.md §5g, NvmlCudaPlatform.log_warnings (the probe keeps the same text).
VLLM_MIXED_GPU_WARNING = (
    "Detected different devices in the system: {names}. Please make sure to set `CUDA_DEVICE_ORDER=PCI_BUS_ID` "
    "to avoid unexpected behavior."
)

TARGET_SOURCE = "target"  # ProbeReport.source for a machine described by --gpu/--num-gpus


@dataclass(frozen=True)
class Check:
    name: str  # short id: gpu-count, same-model, interconnect, model-config, dtype, attention
    status: str  # pass | warn | fail
    message: str
    hint: Optional[str] = None  # what to do next, one line
    vllm_message: Optional[str] = None  # vLLM's own text (error or log line), verbatim

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Deployment:
    """The `vllm serve` flags preflight checks."""

    tensor_parallel_size: int
    attention_backend: Optional[str] = None
    block_size: Optional[int] = None
    kv_cache_dtype: Optional[str] = None
    dtype: str = "auto"
    strict: bool = False  # mixed GPU models without PCI_BUS_ID: fail instead of warn
    # the memory check's flags (attention/memory): None means vLLM's default
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    quantization: Optional[str] = None
    enforce_eager: bool = False

    def vllm_flags(self) -> list[str]:
        flags = ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size > 1:
            flags += ["--pipeline-parallel-size", str(self.pipeline_parallel_size)]
        dtype = parse_dtype(self.dtype)  # vLLM's spelling: its CLI refuses attnsel's bf16 / fp16 / fp32
        if dtype != "auto":
            flags += ["--dtype", dtype]
        if self.attention_backend:
            flags += ["--attention-backend", self.attention_backend]
        if self.block_size is not None:
            flags += ["--block-size", str(self.block_size)]
        if self.kv_cache_dtype:
            flags += ["--kv-cache-dtype", self.kv_cache_dtype]
        for name in ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "quantization"):
            if getattr(self, name) is not None:
                flags += ["--" + name.replace("_", "-"), str(getattr(self, name))]
        return flags + (["--enforce-eager"] if self.enforce_eager else [])


@dataclass(frozen=True)
class PreflightResult:
    deployment: Deployment
    model: Optional[str]
    checks: tuple[Check, ...]
    gpus: tuple[GpuInfo, ...]  # the GPUs the TP group uses
    probe_source: str
    explanation: Any = None  # attention.selector.Explanation, when the attention step ran
    model_facts: Any = None  # attention.model_facts.ModelFacts
    profile_reason: Optional[str] = None  # which vLLM rule profile answered, and why
    memory: Any = None  # attention.memory.MemoryPlan of the group's smallest GPU, when the memory step ran

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


# ---------------------------------------------------------------------------------------------
# A target machine without GPUs here


def target_report(gpu_name: str, num_gpus: int) -> ProbeReport:
    """A ProbeReport for `--gpu NAME --num-gpus N`: N identical GPUs from the built-in table;
    links between them unknown (nothing was probed)."""
    from attnsel.probe import find_gpu

    spec = find_gpu(gpu_name, capability_flag=False)  # preflight has no --capability
    gpus = tuple(
        GpuInfo(
            index=i,
            physical_index=None,
            name=spec.name,
            compute_capability=spec.compute_capability,
            memory_total_bytes=int(spec.memory_gib * 2**30),
            table_peak_memory_bandwidth_bytes_per_s=spec.peak_memory_bandwidth_bytes_per_s,
        )
        for i in range(num_gpus)
    )
    verdict = unknown_verdict(f"not probed: --gpu {gpu_name} describes a target machine", num_gpus)
    return ProbeReport(
        source=TARGET_SOURCE, driver_version=None, cuda_driver_version=None, gpus=gpus,
        nvlink=verdict, mixed_gpus=False, device_order=PCI_BUS_ID,
    )


# ---------------------------------------------------------------------------------------------
# The checks


def _usable(report: ProbeReport) -> list[GpuInfo]:
    return [g for g in report.gpus if g.error is None and g.compute_capability is not None]


def group_gpus(report: ProbeReport, tp: int) -> list[GpuInfo]:
    """The GPUs a TP group of `tp` runs on: logical 0..tp-1 (vLLM's local ranks)."""
    return sorted(report.gpus, key=lambda g: g.index)[:tp]


def check_gpu_count(report: ProbeReport, tp: int, parallel: Optional[str] = None) -> Check:
    """Enough usable GPUs for `tp` (with pipeline parallelism: TP x PP, named by `parallel`)."""
    needs = parallel or f"--tensor-parallel-size {tp}"
    lower = "--tensor-parallel-size" if parallel is None else "--tensor-parallel-size or --pipeline-parallel-size"
    usable = _usable(report)
    usable_ids = {id(g) for g in usable}  # identity, not ==: linear in the GPU count
    broken = [g for g in report.gpus if id(g) not in usable_ids]
    if not report.gpus:
        # the probe's note names CUDA_VISIBLE_DEVICES when it hides every GPU NVML sees (probe/collect.py)
        hidden = next((note for note in report.notes if "CUDA_VISIBLE_DEVICES=" in note), None)
        why = report.fallback_reason or hidden or "NVML and torch.cuda see no GPU"
        return Check(
            "gpu-count", FAIL, f"no GPU visible ({why}); {needs} needs {tp}",
            hint="run preflight on the GPU machine, or pass --gpu NAME --num-gpus N to check a target machine",
        )
    if len(usable) < tp:
        extra = f" ({len(broken)} more visible but failing: {broken[0].error})" if broken else ""
        return Check(
            "gpu-count", FAIL,
            f"{len(usable)} usable GPU(s) visible{extra}, {needs} needs {tp}",
            hint=f"make {tp} GPUs visible (CUDA_VISIBLE_DEVICES={report.cuda_visible_devices or 'unset'}) "
                 f"or lower {lower}" + (f" to {max(1, len(usable))}" if parallel is None else ""),
        )
    if any(g.index < tp for g in broken):
        bad = next(g for g in broken if g.index < tp)
        return Check("gpu-count", FAIL, f"GPU {bad.index} of the tensor-parallel group cannot be used: {bad.error}",
                     hint="check `nvidia-smi`; hide the GPU with CUDA_VISIBLE_DEVICES")
    used = "GPU 0" if tp == 1 else f"GPUs 0-{tp - 1}"
    seen = "on the target machine" if report.source == TARGET_SOURCE else "visible"
    return Check("gpu-count", PASS, f"{len(usable)} GPU(s) {seen}; {parallel or f'TP={tp}'} uses {used}")


def _model_names(gpus: Sequence[GpuInfo]) -> list[str]:
    return list(dict.fromkeys(g.name for g in gpus))


def check_same_model(report: ProbeReport, tp: int, strict: bool = False) -> Check:
    group = group_gpus(report, tp)
    order_set = report.cuda_device_order == PCI_BUS_ID or report.device_order == PCI_BUS_ID
    names = ", ".join(_model_names(group))
    if not group:
        return Check("same-model", WARN, "not checked: no GPU visible (see gpu-count)")
    if len(group) < 2 and not report.vllm_device_warning:
        return Check("same-model", PASS, f"one GPU in the group ({names})")
    if not same_model(group):
        if order_set:
            return Check("same-model", PASS, f"different models in the group ({names}); CUDA_DEVICE_ORDER=PCI_BUS_ID is set")
        # vLLM's own line names every GPU of the machine (the probe keeps it); else the visible ones
        text = report.vllm_device_warning or VLLM_MIXED_GPU_WARNING.format(names=", ".join(g.name for g in report.gpus))
        return Check(
            "same-model", FAIL if strict else WARN,
            f"different GPU models in the tensor-parallel group ({names}) and CUDA_DEVICE_ORDER is not PCI_BUS_ID: "
            "CUDA numbers GPUs fastest first, so GPU k may not be the one nvidia-smi calls k",
            hint="export CUDA_DEVICE_ORDER=PCI_BUS_ID and choose one model with CUDA_VISIBLE_DEVICES",
            vllm_message=text,
        )
    if report.vllm_device_warning:
        # vllm#19045, #16740: vLLM compares the raw names of every GPU in the machine.
        return Check(
            "same-model", PASS,
            f"the group is one model ({names}); vLLM will still log its mixed-device warning because it also "
            "looks at GPUs hidden by CUDA_VISIBLE_DEVICES (vllm#19045): harmless here",
            hint="export CUDA_DEVICE_ORDER=PCI_BUS_ID to silence it",
            vllm_message=report.vllm_device_warning,
        )
    return Check("same-model", PASS, f"one model: {names}")


def check_interconnect(report: ProbeReport, tp: int) -> Check:
    """vLLM's custom all-reduce for a TP group of `tp` (custom_all_reduce.py; vllm#56128, PR#4159)."""
    if tp == 1:
        return Check("interconnect", PASS, "TP=1: no all-reduce, no GPU-to-GPU link needed")
    if tp not in CUSTOM_ALLREDUCE_WORLD_SIZES:
        text = VLLM_CAR_WORLD_SIZE.format(n=tp, sizes=str(list(CUSTOM_ALLREDUCE_WORLD_SIZES)))
        return Check(
            "interconnect", WARN, f"TP={tp}: vLLM's custom all-reduce does not support this size and uses NCCL (slower, works)",
            hint=f"prefer --tensor-parallel-size in {', '.join(map(str, CUSTOM_ALLREDUCE_WORLD_SIZES))}",
            vllm_message=text,
        )
    if report.source == TARGET_SOURCE:
        return Check(
            "interconnect", WARN, f"TP={tp}: NVLink/P2P not checked for a --gpu target machine",
            hint="run `attnsel preflight` (or `attnsel probe`) on the machine itself",
        )
    group = group_gpus(report, tp)
    if len(group) < tp:
        return Check("interconnect", WARN, f"TP={tp}: not checked, only {len(group)} GPU(s) visible (see gpu-count)")
    ids = {g.index for g in group}
    pairs = [p for p in report.nvlink.pairs if p.a in ids and p.b in ids]
    if report.source != "nvml" or len(pairs) < tp * (tp - 1) // 2:
        return Check(
            "interconnect", WARN, f"TP={tp}: NVLink/P2P unknown ({report.nvlink.reason})",
            hint="run where NVML works (`nvidia-smi` must work) to check vLLM's custom all-reduce",
        )
    fully, reason = vllm_fully_connected(pairs, tp)
    if fully:
        return Check("interconnect", PASS, f"TP={tp}: {reason}; vLLM's custom all-reduce can run")
    if tp == 2:
        pair = pairs[0]
        if pair.pcie_read and pair.pcie_write:
            return Check(
                "interconnect", PASS,
                f"TP=2 without NVLink ({pair.topology or pair.pcie_topology or 'PCIe'}): NVML reports PCIe P2P read/write OK, "
                "so custom all-reduce runs if vLLM's own P2P test passes",
            )
        return Check(
            "interconnect", WARN, f"TP=2: no P2P between GPU {pair.a} and GPU {pair.b}: custom all-reduce falls back to NCCL (slower, works)",
            hint="check the PCIe topology (`nvidia-smi topo -m`); IOMMU/ACS settings can block P2P",
            vllm_message=VLLM_CAR_NO_P2P,
        )
    return Check(
        "interconnect", WARN,
        f"TP={tp}: {reason}; vLLM disables custom all-reduce on more than two GPUs without a full NVLink mesh and uses NCCL "
        "(slower, works)",
        hint="use GPUs with a full NVLink mesh (`nvidia-smi topo -m` shows NV# between every pair) or a smaller TP",
        vllm_message=VLLM_CAR_PCIE_ONLY,
    )


def check_dtype(group: Sequence[GpuInfo], dtype: str, dtype_source: Optional[str] = None) -> Check:
    """vLLM's check_if_supports_dtype looks at GPU 0 only (docs/vllm-rules.md §5g); other GPUs of the group
    with a lower capability fail later, inside the kernels."""
    where = f" ({dtype_source})" if dtype_source else ""
    if not group:
        return Check("dtype", WARN, f"dtype {dtype}{where}: not checked, no GPU visible (see gpu-count)")
    if dtype != "bfloat16":
        return Check("dtype", PASS, f"dtype {dtype}{where}")
    first = group[0]
    error = bf16_error(first.name, first.compute_capability)
    if error:
        return Check("dtype", FAIL, f"bfloat16 needs compute capability 8.0; GPU 0 ({first.name}) has {first.capability_str}",
                     hint="pass --dtype half (float16)", vllm_message=error)
    weaker = [g for g in group[1:] if bf16_error(g.name, g.compute_capability)]
    if weaker:
        g = weaker[0]
        return Check(
            "dtype", FAIL,
            f"bfloat16: GPU {g.index} ({g.name}, CC {g.capability_str}) of the group cannot run it; vLLM checks only GPU 0, "
            "so this fails later inside the kernels",
            hint="use one GPU model (CUDA_VISIBLE_DEVICES) or --dtype half",
        )
    return Check("dtype", PASS, f"dtype bfloat16{where}: supported by every GPU of the group")


def check_attention(explanation: Any) -> Check:
    """explain's answer: vLLM's error -> fail; vLLM's warning lines -> warn; else pass."""
    e = explanation
    if e.error is not None:
        if e.error_phase == "model_config":
            return Check("attention", FAIL, "not reached: vLLM stops at the dtype check above",
                         hint="fix the dtype first", vllm_message=e.error)
        return Check(
            "attention", FAIL, f"vLLM would raise {e.error_type}",
            hint=_attention_hint(e), vllm_message=e.error,
        )
    picked = f"vLLM selects {e.selected}" if e.selected else "no attention layer asks for a backend"
    block = f", KV block size {e.block_size}" if e.block_size is not None else ""
    warnings = [line.message for line in e.logs if line.level == "warning"]
    if warnings:
        return Check("attention", WARN, f"{picked}{block}; vLLM logs {len(warnings)} warning(s)",
                     hint="see vLLM's message; `attnsel explain` shows every backend's reasons",
                     vllm_message=" | ".join(warnings))
    return Check("attention", PASS, f"{picked}{block}")


def _attention_hint(e: Any) -> str:
    if e.inputs.block_size is not None and "block" in (e.error or "").lower():
        return "remove --block-size to let vLLM pick, or choose one the backend lists"
    if e.context.user_backend:
        return "remove --attention-backend to let vLLM pick, or run `attnsel explain` to see which backends are valid"
    return "run `attnsel explain` with the same flags to see every backend's reasons"


# ---------------------------------------------------------------------------------------------
# Attention: the explain rules on the deployment's model and GPU 0


def explain_deployment(profile: Any, facts: Any, deployment: Deployment, capability: tuple[int, int], gpu_name: Optional[str]) -> Any:
    """`explain` for the model's derived facts (attention/model/config.py) and the deployment's flags:
    the same inputs `attnsel explain --model` builds (attention/selector/request.py)."""
    request = SelectionRequest(
        kv_cache_dtype=deployment.kv_cache_dtype or None,
        block_size=deployment.block_size,
        attention_backend=deployment.attention_backend,
    )
    inputs, ctx, notes = build_selection(profile, request, model_facts=facts, capability=capability, gpu_name=gpu_name)
    return explain_selection(profile, inputs, ctx, notes)


@dataclass
class _Steps:
    checks: list[Check] = field(default_factory=list)
    facts: Any = None
    explanation: Any = None
    memory: Any = None


def run_preflight(report: ProbeReport, hf_config: dict, deployment: Deployment, *, profile: Any,
                  model: Optional[str] = None, profile_reason: Optional[str] = None) -> PreflightResult:
    """Every check, in the order a user fixes them. `hf_config`: the model's config.json dict.
    Bad input (unknown dtype, bad config) raises UserInputError; vLLM refusals become `fail` checks."""
    tp = deployment.tensor_parallel_size
    steps = _Steps()
    if deployment.pipeline_parallel_size > 1:
        steps.checks += _pipeline_checks(report, hf_config, deployment)
    else:
        steps.checks += [check_gpu_count(report, tp), check_same_model(report, tp, deployment.strict),
                         check_interconnect(report, tp)]
    group = [g for g in group_gpus(report, tp) if g.compute_capability is not None]
    first = group[0] if group else None
    capability = first.compute_capability if first else None
    try:
        steps.facts = derive_model_facts(
            hf_config, capability=capability, dtype=deployment.dtype, tensor_parallel_size=tp,
            gpu_name=first.name if first else None, profile=profile.model_rules,
        )
    except CheckFailed as exc:  # vLLM's verify_with_parallel_config, fp16-unsupported models
        steps.checks.append(Check("model-config", FAIL, "vLLM would refuse the model configuration",
                                  hint=_model_hint(exc.message, tp), vllm_message=exc.message))
    else:
        steps.checks.append(_model_check(steps.facts, tp))
        steps.checks.append(check_dtype(group, steps.facts.dtype, steps.facts.dtype_source))
        if first is None:
            steps.checks.append(Check("attention", WARN, "not checked: no GPU compute capability known (see gpu-count)"))
        else:
            steps.explanation = explain_deployment(profile, steps.facts, deployment, capability, first.name)
            steps.checks.append(check_attention(steps.explanation))
        steps.memory = plan_for_group(profile, hf_config, steps.facts, steps.explanation, deployment, group,
                                      probed=report.source != TARGET_SOURCE)
        why_not = "" if steps.memory else not_planned(profile, steps.facts, group)
        steps.checks.append(Check("memory", *memory_check_fields(steps.memory, why_not)))
    world = tp * deployment.pipeline_parallel_size
    return PreflightResult(deployment, model, tuple(steps.checks), tuple(group_gpus(report, world)), report.source,
                           steps.explanation, steps.facts, profile_reason, steps.memory)


def _pipeline_checks(report: ProbeReport, hf_config: dict, deployment: Deployment) -> list[Check]:
    """Pipeline parallelism on one machine: TP x PP GPUs, one model among them all, each stage's
    TP group (GPUs [k*TP, (k+1)*TP), vLLM's rank order) checked for custom all-reduce, the layer split."""
    from attnsel.attention.preflight.fleet import pipeline_check

    tp, pp = deployment.tensor_parallel_size, deployment.pipeline_parallel_size
    world = tp * pp
    count = check_gpu_count(report, world, parallel=f"TP={tp} x PP={pp}")
    gpus = sorted(report.gpus, key=lambda g: g.index)
    stages = [gpus[k * tp:(k + 1) * tp] for k in range(pp)]
    links = [check_interconnect(replace(report, gpus=tuple(stage)), tp) for stage in stages if len(stage) == tp]
    worst = max(links, key=lambda c: STATUSES.index(c.status)) if links else \
        Check("interconnect", WARN, f"TP={tp}: not checked, only {len(gpus)} GPU(s) visible (see gpu-count)")
    if links and tp > 1:
        worst = replace(worst, message=f"each of the {pp} stages: {worst.message}" if len(set(links)) == 1 else
                        f"stage {links.index(worst)} (the worst of {pp}): {worst.message}")
    return [count, check_same_model(report, world, deployment.strict), worst, pipeline_check(hf_config, pp)]


def _model_check(facts: Any, tp: int) -> Check:
    heads = f"{facts.num_attention_heads} attention heads / TP {tp} = {facts.num_heads_per_gpu} per GPU"
    message = f"{facts.model_type}: head size {facts.head_size}, {heads}"
    if facts.is_attention_free:  # pure Mamba: no head size to speak of (docs/vllm-rules.md §6 attention-free)
        message = f"{facts.model_type}: no attention layers (attention-free: the KV cache holds Mamba states)"
    if facts.warnings:
        return Check("model-config", WARN, message, hint="see vLLM's message", vllm_message=" | ".join(facts.warnings))
    return Check("model-config", PASS, message)


def _model_hint(message: str, tp: int) -> str:
    if "divisible by tensor parallel size" in message:
        return f"choose a --tensor-parallel-size that divides the number of attention heads (not {tp})"
    return "change --dtype (see vLLM's message)"
