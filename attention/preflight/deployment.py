"""Preflight checks for one vLLM deployment: GPUs, device order, interconnect, dtype, attention, memory.

Pure functions: a `ProbeReport` (from `probe/`, or built from `--gpu NAME --num-gpus N` for a
target machine) plus the deployment's flags in, a list of `Check(name, status, message, hint)`
out. vLLM's own words are kept verbatim in `vllm_message`. Nothing here talks to NVML or CUDA.

What vLLM does with a tensor-parallel group of N on one host: it uses logical GPUs 0..N-1 and reads
the compute capability of GPU 0 (`current_platform.get_device_capability()`); the checks of those
GPUs (count, one model, links, dtype) are in gpu_checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from attnsel.attention.model import derive_model_facts
from attnsel.attention.preflight.gpu_checks import (
    TARGET_SOURCE,
    check_dtype,
    check_gpu_count,
    check_interconnect,
    check_same_model,
    group_gpus,
    pipeline_check,
)
from attnsel.attention.preflight.memory_check import (
    memory_check_fields,
    not_planned,
    plan_for_group,
)
from attnsel.attention.preflight.status import (
    FAIL,
    PASS,
    STATUSES,
    WARN,
    Check,
    failing_statuses,
)
from attnsel.attention.rules import parse_dtype
from attnsel.attention.selector import (
    SelectionRequest,
    build_selection,
    explain_selection,
)
from attnsel.errors import CheckFailed
from attnsel.probe import GpuInfo, ProbeReport

if TYPE_CHECKING:
    from attnsel.attention.memory import MemoryPlan
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.rules import Explanation
    from attnsel.attention.versions import RuleProfile


@dataclass(frozen=True)
class Deployment:
    """The `vllm serve` flags preflight checks."""

    tensor_parallel_size: int
    attention_backend: str | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    dtype: str = "auto"
    strict: bool = False  # --strict: a warning fails the run too (and mixed GPU models fail their check)
    # the memory check's flags (attention/memory): None means vLLM's default
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    quantization: str | None = None
    allow_deprecated_quantization: bool = False
    enforce_eager: bool = False
    # read by the attention check only: the GPU layout and memory of context parallelism are not modelled
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    not_checked: tuple[str, ...] = ()  # what the flags said that no check reads (--attention-config keys)
    serve_line_note: str | None = None  # a pasted serve line's flags no check reads (--port, ...)

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
                value = getattr(self, name)
                flags += ["--" + name.replace("_", "-"), "auto" if name == "max_model_len" and value == -1 else str(value)]
        for name in ("decode_context_parallel_size", "prefill_context_parallel_size"):
            if getattr(self, name) > 1:
                flags += ["--" + name.replace("_", "-"), str(getattr(self, name))]
        flags += ["--allow-deprecated-quantization"] if self.allow_deprecated_quantization else []
        return flags + (["--enforce-eager"] if self.enforce_eager else [])


@dataclass(frozen=True)
class PreflightResult:
    deployment: Deployment
    model: str | None
    checks: tuple[Check, ...]
    gpus: tuple[GpuInfo, ...]  # the GPUs the TP group uses
    probe_source: str
    explanation: Explanation | None = None  # when the attention step ran
    model_facts: ModelFacts | None = None
    profile_reason: str | None = None  # which vLLM rule profile answered, and why
    memory: MemoryPlan | None = None  # the plan of the group's smallest GPU, when the memory step ran

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    @property
    def ok(self) -> bool:
        """No check failed; with --strict, no check warned either (README: `--strict` fails on warnings too)."""
        return not any(c.status in failing_statuses(self.deployment.strict) for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def check_attention(explanation: Explanation) -> Check:
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


def _attention_hint(e: Explanation) -> str:
    if e.inputs.block_size is not None and "block" in (e.error or "").lower():
        return "remove --block-size to let vLLM pick, or choose one the backend lists"
    if e.context.user_backend:
        return "remove --attention-backend to let vLLM pick, or run `attnsel explain` to see which backends are valid"
    return "run `attnsel explain` with the same flags to see every backend's reasons"


# ---------------------------------------------------------------------------------------------
# Attention: the explain rules on the deployment's model and GPU 0


def explain_deployment(profile: RuleProfile, facts: ModelFacts, deployment: Deployment, capability: tuple[int, int],
                       gpu_name: str | None) -> Explanation:
    """`explain` for the model's derived facts (attention/model/config.py) and the deployment's flags:
    the same inputs `attnsel explain --model` builds (attention/selector/request.py)."""
    request = SelectionRequest(
        kv_cache_dtype=deployment.kv_cache_dtype or None,
        block_size=deployment.block_size,
        attention_backend=deployment.attention_backend,
        dcp=deployment.decode_context_parallel_size,
        pcp=deployment.prefill_context_parallel_size,
    )
    inputs, ctx, notes = build_selection(profile, request, model_facts=facts, capability=capability, gpu_name=gpu_name)
    return explain_selection(profile, inputs, ctx, notes)


@dataclass
class _Steps:
    checks: list[Check] = field(default_factory=list)
    facts: ModelFacts | None = None
    explanation: Explanation | None = None
    memory: MemoryPlan | None = None


def run_preflight(report: ProbeReport, hf_config: dict, deployment: Deployment, *, profile: RuleProfile,
                  model: str | None = None, profile_reason: str | None = None) -> PreflightResult:
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
        if first is None or first.compute_capability is None:  # the group holds GPUs with a capability only
            steps.checks.append(Check("attention", WARN, "not checked: no GPU compute capability known (see gpu-count)"))
        else:
            steps.explanation = explain_deployment(profile, steps.facts, deployment, first.compute_capability,
                                                   first.name)
            steps.checks.append(check_attention(steps.explanation))
        steps.memory = plan_for_group(profile, hf_config, steps.facts, steps.explanation, deployment, group,
                                      probed=report.source != TARGET_SOURCE, model=model)
        why_not = "" if steps.memory else not_planned(profile, steps.facts, group)
        steps.checks.append(Check("memory", *memory_check_fields(steps.memory, why_not)))
    unchecked = not_checked(deployment)
    if unchecked:  # flags that bear on what preflight checks (GPUs, memory, attention): a warning
        steps.checks.append(Check("flags", WARN, "not checked: " + "; ".join(unchecked), hint=deployment.serve_line_note))
    elif deployment.serve_line_note:  # --port and the like: listed, no bearing on the checks above
        steps.checks.append(Check("flags", PASS, deployment.serve_line_note))
    world = tp * deployment.pipeline_parallel_size
    return PreflightResult(deployment, model, tuple(steps.checks), tuple(group_gpus(report, world)), report.source,
                           steps.explanation, steps.facts, profile_reason, steps.memory)


def not_checked(deployment: Deployment) -> list[str]:
    """Flags vLLM reads that no check models: context parallelism's GPUs and memory, unmodelled keys."""
    parts = [f"--{name.replace('_', '-')} {getattr(deployment, name)}: GPU count and memory per GPU are checked "
             "without it (the attention check reads it)"
             for name in ("decode_context_parallel_size", "prefill_context_parallel_size") if getattr(deployment, name) > 1]
    return parts + [note.removeprefix("not checked: ") for note in deployment.not_checked]


def _pipeline_checks(report: ProbeReport, hf_config: dict, deployment: Deployment) -> list[Check]:
    """Pipeline parallelism on one machine: TP x PP GPUs, one model among them all, each stage's
    TP group (GPUs [k*TP, (k+1)*TP), vLLM's rank order) checked for custom all-reduce, the layer split."""
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


def _model_check(facts: ModelFacts, tp: int) -> Check:
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
