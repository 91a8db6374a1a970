"""Preflight for one vLLM deployment over a Ray cluster: tensor parallelism inside nodes,
pipeline parallelism across them. Pure: a `FleetProbe` (probe/fleet/collect.py) and the deployment's
flags in, checks out; the one-node checks of attention/preflight/deployment.py are reused per node and
per GPU model.

What vLLM does on Ray (vLLM 0.24 v1/executor/ray_utils.py, ray_executor.py; custom_all_reduce.py;
v1/core/kv_cache_utils.py):
- one placement group of TP x PP bundles {"GPU": 1}, strategy PACK; workers are sorted by node,
  so the TP group of ranks kT..kT+T-1 sits inside one node when that node has T GPUs for it,
  else vLLM warns (VLLM_TP_SPREAD_WARNING) and the group spans nodes;
- not enough GPUs in the cluster: the placement group never becomes ready and vLLM raises
  VLLM_PLACEMENT_ERROR after PG_WAIT_TIMEOUT seconds;
- custom all-reduce runs only inside a node (VLLM_CAR_SPANS_NODES), and there only with NVLink
  (more than 2 GPUs) or P2P (2 GPUs): the one-node `interconnect` check, per TP group;
- every worker picks the attention backend on its own GPU, and every worker gets the KV cache
  the smallest one can hold (min num_blocks over workers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from attnsel.attention.preflight.deployment import Deployment, run_preflight
from attnsel.attention.preflight.gpu_checks import (
    check_interconnect,
    check_same_model,
    pipeline_check,
)
from attnsel.attention.preflight.status import (
    FAIL,
    PASS,
    STATUSES,
    WARN,
    Check,
    failing_statuses,
)
from attnsel.probe import GpuInfo, ProbeReport
from attnsel.probe.fleet import (
    FleetProbe,
    FleetVerdict,
    NodeProbe,
    fleet_verdict,
    model_classes,
    model_of,
)

if TYPE_CHECKING:
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.preflight.document import ScopedCheckFields
    from attnsel.attention.rules import Explanation
    from attnsel.attention.versions import RuleProfile

FLEET = "fleet"
PG_WAIT_TIMEOUT = 1800  # vLLM ray_utils.PG_WAIT_TIMEOUT
VLLM_PLACEMENT_ERROR = (
    "Cannot provide a placement group requiring {gpus} GPUs (placement_group_specs={specs}) within {timeout} seconds.\n"
    "Tensor parallel size may exceed available GPUs in your cluster. Check resources with `ray status` and "
    "`ray list nodes`.\nIf running on K8s with limited GPUs, consider reducing --tensor-parallel-size to match "
    "available GPU resources."
)
VLLM_TP_SPREAD_WARNING = (
    "tensor_parallel_size={tp} is bigger than a reserved number of GPUs ({n} GPUs) in a node {node}. Tensor parallel "
    "workers can be spread out to 2+ nodes which can degrade the performance unless you have fast interconnect across "
    "nodes, like Infiniband. To resolve this issue, make sure you have more than {tp} GPUs available at each node."
)
VLLM_CAR_SPANS_NODES = "Custom allreduce is disabled because this process group spans across nodes."


@dataclass(frozen=True)
class ScopedCheck:
    scope: str  # "fleet", a node label, or a GPU model
    check: Check

    def to_dict(self) -> ScopedCheckFields:
        return {"scope": self.scope, **self.check.to_dict()}


@dataclass(frozen=True)
class FleetPreflightResult:
    deployment: Deployment
    pipeline_parallel_size: int
    model: str | None
    checks: tuple[ScopedCheck, ...]
    explanations: tuple[tuple[str, Explanation], ...]  # (GPU model, its explanation)
    model_facts: ModelFacts | None
    profile_reason: str | None
    fleet: FleetProbe
    verdict: FleetVerdict

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.check.status == s) for s in STATUSES}

    @property
    def ok(self) -> bool:
        return not any(c.check.status in failing_statuses(self.deployment.strict) for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def run_fleet_preflight(fleet: FleetProbe, hf_config: dict, deployment: Deployment, pipeline_parallel_size: int,
                        *, profile: RuleProfile, model: str | None = None,
                        profile_reason: str | None = None) -> FleetPreflightResult:
    """Every check, in the order a user fixes them: nodes, GPUs per node, placement, one model,
    interconnect, then the model and attention per GPU model and one verdict across them."""
    tp, pp = deployment.tensor_parallel_size, pipeline_parallel_size
    verdict = fleet_verdict(fleet)
    gpu_nodes = [n for n in fleet.nodes if n.has_gpus]
    answered = [n for n in gpu_nodes if n.report is not None]
    checks: list[ScopedCheck] = list(_answer_checks(fleet, gpu_nodes))
    checks += [ScopedCheck(n.node.label, _gpu_count(n, tp)) for n in answered]
    checks.append(ScopedCheck(FLEET, _placement(answered, tp, pp)))
    classes = model_classes([g for n in answered for g in _usable(n.report)])
    checks.append(ScopedCheck(FLEET, _fleet_same_model(answered, classes, deployment.strict)))
    checks += [ScopedCheck(n.node.label, check_same_model(_report(n), len(_report(n).gpus), deployment.strict))
               for n in answered if _report(n).mixed_gpus]
    checks += _interconnect(answered, tp, pp)
    checks.append(ScopedCheck(FLEET, pipeline_check(hf_config, pp)))
    explanations, dtypes, per_model = _per_gpu_model(answered, classes, hf_config, deployment, profile, model,
                                                     profile_reason)
    checks += per_model
    checks.append(ScopedCheck(FLEET, _one_verdict(explanations, dtypes, deployment.dtype)))
    checks += [ScopedCheck(FLEET, c) for c in _versions(verdict)]
    facts = next((f for _, f in dtypes), None)
    return FleetPreflightResult(deployment, pp, model, tuple(checks), tuple(explanations), facts, profile_reason,
                                fleet, verdict)


def _usable(report: ProbeReport | None) -> list[GpuInfo]:
    return [g for g in report.gpus if g.error is None] if report is not None else []


def _report(node: NodeProbe) -> ProbeReport:
    """The probe of a node that answered (the callers keep only those)."""
    assert node.report is not None
    return node.report


def _slots(node: NodeProbe) -> int:
    """GPUs vLLM can use on a node: what Ray schedules there, at most the usable ones NVML sees."""
    return min(int(node.node.ray_gpus), len(_usable(node.report)))


def _answer_checks(fleet: FleetProbe, gpu_nodes: Sequence[NodeProbe]) -> list[ScopedCheck]:
    if not gpu_nodes:
        return [ScopedCheck(FLEET, Check("nodes", FAIL, f"no GPU node among the {len(fleet.nodes)} alive node(s)",
                                         hint="start Ray on the GPU machines (`ray start --address ...`)"))]
    checks = [ScopedCheck(n.node.label, Check(
        "nodes", FAIL if n.has_gpus else WARN, f"did not answer: {n.problem}",
        hint="rerun with a longer --timeout, or check the node itself (`nvidia-smi`, `ray status`)"))
        for n in fleet.nodes if n.report is None]
    if not checks:
        checks.append(ScopedCheck(FLEET, Check("nodes", PASS, f"{len(fleet.nodes)} alive node(s) answered, "
                                                              f"{len(gpu_nodes)} with GPUs")))
    return checks


def _gpu_count(node: NodeProbe, tp: int) -> Check:
    report = _report(node)
    usable, ray_gpus = len(_usable(report)), node.node.ray_gpus
    broken = [g for g in report.gpus if g.error is not None]
    if broken:
        return Check("gpu-count", FAIL, f"GPU {broken[0].index} cannot be used: {broken[0].error}",
                     hint="check `nvidia-smi` there; Ray may place a vLLM worker on this GPU")
    if not report.gpus:
        why = report.fallback_reason or "NVML sees no GPU"
        return Check("gpu-count", FAIL, f"Ray schedules {ray_gpus:g} GPU(s) here, but the probe sees none ({why})",
                     hint="fix the NVIDIA driver on this node, or take it out of the cluster")
    slots = _slots(node)
    seen = f"{usable} GPU(s) visible, Ray schedules {ray_gpus:g}"
    if slots < tp:
        return Check("gpu-count", WARN, f"{seen}: fewer than --tensor-parallel-size {tp}; a TP group placed here "
                     "spans nodes", hint=f"give every GPU node at least {tp} GPUs, or lower --tensor-parallel-size")
    groups = f"room for {slots // tp} TP group(s) of {tp}"
    if ray_gpus != usable:
        return Check("gpu-count", WARN, f"{seen}: vLLM uses Ray's count; {groups}",
                     hint="`ray start --num-gpus` (or CUDA_VISIBLE_DEVICES when Ray started) decides what Ray offers")
    return Check("gpu-count", PASS, f"{seen}; {groups}")


def _placement(answered: Sequence[NodeProbe], tp: int, pp: int) -> Check:
    world = tp * pp
    slots = {n.node.node_id: _slots(n) for n in answered}
    inside = sum(s // tp for s in slots.values())
    total = sum(slots.values())
    plan = f"TP={tp} x PP={pp} = {world} GPU(s)"
    if inside >= pp:
        return Check("placement", PASS, f"{plan}: each of the {pp} TP group(s) fits inside one node "
                                        f"({inside} fit, {total} GPU(s) in answering nodes)")
    if total >= world:
        small = min(slots, key=lambda node_id: slots[node_id])  # vLLM names the node by its Ray id
        return Check("placement", WARN, f"{plan}: only {inside} of {pp} TP group(s) fit inside one node; vLLM spreads "
                     "the others over nodes (slow without InfiniBand, no custom all-reduce)",
                     hint=f"use nodes with at least {tp} GPUs each, or set --tensor-parallel-size to the GPUs per node",
                     vllm_message=VLLM_TP_SPREAD_WARNING.format(tp=tp, n=slots[small], node=small))
    specs = [{"GPU": 1.0} for _ in range(world)]
    return Check("placement", FAIL, f"{plan}, but the answering nodes offer {total}",
                 hint="add GPU nodes, or lower --tensor-parallel-size / --pipeline-parallel-size",
                 vllm_message=VLLM_PLACEMENT_ERROR.format(gpus=float(world), specs=specs, timeout=PG_WAIT_TIMEOUT))


def _fleet_same_model(answered: Sequence[NodeProbe], classes: Sequence[GpuInfo], strict: bool) -> Check:
    if not classes:
        return Check("same-model", WARN, "not checked: no usable GPU answered (see gpu-count)")
    where: dict[str, list[str]] = {}
    for node in answered:
        for model in dict.fromkeys(model_of(g, classes) for g in _usable(node.report)):
            where.setdefault(model, []).append(node.node.label)
    capabilities = {rep.name: rep.capability_str or "?" for rep in classes}
    if len(classes) == 1:
        rep = classes[0]
        return Check("same-model", PASS, f"one GPU model on every GPU node: {rep.name} (CC {rep.capability_str})")
    listing = "; ".join(f"{model} (CC {capabilities[model]}) on {_names(nodes)}" for model, nodes in where.items())
    if len(set(capabilities.values())) > 1:
        return Check("same-model", FAIL, f"different compute capabilities across the nodes of one model: {listing}",
                     hint="serve one model on one GPU generation: each worker builds kernels and picks attention for "
                          "its own GPU")
    return Check("same-model", FAIL if strict else WARN,
                 f"different GPU models with one compute capability: {listing}; every worker gets the KV cache the "
                 "smallest GPU can hold", hint="use one GPU model (or accept the smallest GPU's KV cache size)")


def _names(labels: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(labels[:limit])
    return shown + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


def _interconnect(answered: Sequence[NodeProbe], tp: int, pp: int) -> list[ScopedCheck]:
    if tp == 1:
        return [ScopedCheck(FLEET, Check("interconnect", PASS, "TP=1: no all-reduce, no GPU-to-GPU link needed"))]
    hosts = [n for n in answered if _slots(n) >= tp]
    checks = [ScopedCheck(n.node.label, _node_interconnect(n, tp)) for n in hosts]
    if sum(_slots(n) // tp for n in hosts) < pp:
        checks.append(ScopedCheck(FLEET, Check(
            "interconnect", WARN, f"a TP group of {tp} that spans nodes runs without custom all-reduce: its all-reduce "
            "goes over the network (NCCL)", vllm_message=VLLM_CAR_SPANS_NODES,
            hint=f"keep every TP group inside one node (nodes with >= {tp} GPUs)")))
    return checks


def _node_interconnect(node: NodeProbe, tp: int) -> Check:
    """The one-node check for every TP group the node can host: GPUs kT..kT+T-1, as vLLM orders
    a node's workers by GPU id. The worst group speaks for the node."""
    gpus = sorted(_usable(node.report), key=lambda g: g.index)[:_slots(node)]
    groups = [gpus[start:start + tp] for start in range(0, len(gpus) - tp + 1, tp)]
    results = [check_interconnect(replace(_report(node), gpus=tuple(group)), tp) for group in groups]
    if len(groups) == 1:
        return results[0]
    spans = [f"{group[0].index}-{group[-1].index}" for group in groups]
    worst = max(range(len(results)), key=lambda k: STATUSES.index(results[k].status))
    if all(r.status == results[worst].status for r in results):
        return replace(results[worst], message=f"GPUs {', '.join(spans)}: {results[worst].message}")
    return replace(results[worst], message=f"GPUs {spans[worst]}: {results[worst].message}")


def _per_gpu_model(answered: Sequence[NodeProbe], classes: Sequence[GpuInfo], hf_config: dict, deployment: Deployment,
                   profile: RuleProfile, model: str | None, profile_reason: str | None,
                   ) -> tuple[list[tuple[str, Explanation]], list[tuple[str, ModelFacts]], list[ScopedCheck]]:
    """The one-node model, dtype and attention checks, once per GPU model (explain per distinct GPU)."""
    explanations: list[tuple[str, Explanation]] = []
    facts: list[tuple[str, ModelFacts]] = []  # (GPU model, its model facts)
    checks: list[ScopedCheck] = []
    for rep in classes:
        node = next(n for n in answered if any(model_of(g, classes) == rep.name for g in _usable(n.report)))
        gpus = tuple(g for g in _usable(node.report) if model_of(g, classes) == rep.name)
        result = run_preflight(replace(_report(node), gpus=gpus), hf_config, deployment, profile=profile, model=model,
                               profile_reason=profile_reason)
        checks += [ScopedCheck(rep.name, c) for c in result.checks if c.name in ("model-config", "dtype", "attention")]
        if result.model_facts is not None:
            facts.append((rep.name, result.model_facts))
        if result.explanation is not None:
            explanations.append((rep.name, result.explanation))
    return explanations, facts, checks


def _one_verdict(explanations: Sequence[tuple[str, Explanation]], facts: Sequence[tuple[str, ModelFacts]],
                 dtype_flag: str) -> Check:
    dtypes = {name: f.dtype for name, f in facts}
    if len(set(dtypes.values())) > 1:
        # vLLM resolves --dtype auto once, in the engine, for the engine node's GPU; the others follow it.
        shown = "; ".join(f"{name}: {dtype}" for name, dtype in dtypes.items())
        return Check("attention-verdict", FAIL, f"--dtype {dtype_flag} resolves differently per GPU model "
                     f"({shown}); vLLM resolves it once, for the GPU of the engine's node",
                     hint="pass one --dtype that every GPU model supports (e.g. --dtype half)")
    answers = {name: (e.selected, e.block_size) for name, e in explanations if e.error is None}
    if not answers:
        return Check("attention-verdict", WARN, "not compared: no GPU model got an attention answer (see attention)")
    shown = "; ".join(f"{name}: {sel or 'none'}, block {block}" for name, (sel, block) in answers.items())
    if len(set(answers.values())) == 1:
        scope = "every GPU model" if len(answers) > 1 else "the one GPU model"
        return Check("attention-verdict", PASS, f"one attention verdict on {scope}: {shown}")
    common = [b for b in explanations[0][1].valid_backends
              if all(b in e.valid_backends for _, e in explanations)]
    hint = (f"pass --attention-backend {common[0]} (valid on every GPU model; also valid: "
            f"{', '.join(common[1:]) or 'none'}) and one --block-size" if common
            else "no backend is valid on every GPU model: serve this model on one GPU model")
    return Check("attention-verdict", FAIL, f"the GPU models get different attention: {shown}", hint=hint)


def _versions(verdict: FleetVerdict) -> list[Check]:
    differing = [d for d in verdict.differences if d.attribute in ("driver", "CUDA")]
    if not differing:
        return []
    text = "; ".join(f"{d.attribute} {d.common} on {d.common_count} node(s), "
                     + ", ".join(f"{v} on {label}" for label, v in d.others[:6]) for d in differing)
    return [Check("versions", WARN, f"the GPU nodes run different NVIDIA drivers: {text}",
                  hint="install one driver version on every node (NCCL across versions is untested)")]
