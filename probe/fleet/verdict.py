"""The fleet verdict: per node what it has and what is wrong there; whether the GPU nodes are
alike, and if not, what differs and on which nodes; which nodes did not answer, and why.

Pure: reads a `FleetProbe` (probe/fleet/facts.py), never Ray or NVML. "GPU nodes" are the nodes
vLLM could place GPU workers on: Ray counts GPUs there, or the probe saw some. A CPU-only head
node is normal and is kept out of the comparison.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from attnsel.probe.facts import GpuInfo, ProbeReport
from attnsel.probe.fleet.facts import FleetProbe, NodeProbe
from attnsel.probe.mixed_gpus import same_model
from attnsel.probe.torch_fallback import TORCH_NOT_ASKED

MAX_LISTED = 8  # nodes named per difference in text; JSON lists them all


@dataclass(frozen=True)
class NodeSummary:
    label: str
    answered: bool
    gpu_node: bool
    gpus: int  # usable visible GPUs (no NVML error)
    model: str  # the node's GPU model(s) by fleet-wide model class, "" when none
    capability: str  # e.g. "9.0"; several joined by "+"
    driver: str
    cuda: str
    nvlink: str  # yes | no | unknown | n/a (fewer than 2 GPUs)
    source: str  # nvml | torch | none | no answer
    ray_gpus: float
    problems: tuple[str, ...]  # what is wrong on this node (also why it did not answer)
    notes: tuple[str, ...]
    is_head: bool = False

    @property
    def status(self) -> str:
        if not self.answered:
            return "no answer"
        return "problem" if self.problems else "ok"

    def to_dict(self) -> dict:
        return {
            "label": self.label, "status": self.status, "answered": self.answered, "gpu_node": self.gpu_node,
            "gpus": self.gpus, "model": self.model, "compute_capability": self.capability, "driver": self.driver,
            "cuda": self.cuda, "nvlink": self.nvlink, "source": self.source, "ray_gpus": self.ray_gpus,
            "problems": list(self.problems), "notes": list(self.notes), "is_head": self.is_head,
        }


@dataclass(frozen=True)
class Difference:
    """One attribute the GPU nodes do not share: the value most have, and every other node's."""

    attribute: str
    common: str
    common_count: int
    others: tuple[tuple[str, str], ...]  # (node label, its value)
    common_labels: tuple[str, ...] = ()  # the nodes that have `common`

    def to_dict(self) -> dict:
        return {"attribute": self.attribute, "common": self.common, "common_nodes": self.common_count,
                "common_labels": list(self.common_labels),
                "others": [{"node": label, "value": value} for label, value in self.others]}


@dataclass(frozen=True)
class FleetVerdict:
    nodes: tuple[NodeSummary, ...]
    differences: tuple[Difference, ...]
    unanswered: tuple[tuple[str, str], ...]  # (label, why)

    @property
    def gpu_nodes(self) -> list[NodeSummary]:
        return [n for n in self.nodes if n.gpu_node]

    @property
    def homogeneous(self) -> bool | None:
        """None when no GPU node answered (nothing to compare)."""
        if not any(n.answered for n in self.gpu_nodes):
            return None
        return not self.differences

    def to_dict(self) -> dict:
        answered = [n for n in self.nodes if n.answered]
        return {
            "nodes_alive": len(self.nodes),
            "answered": len(answered),
            "gpu_nodes": len(self.gpu_nodes),
            "gpus": sum(n.gpus for n in answered),
            "homogeneous": self.homogeneous,
            "differences": [d.to_dict() for d in self.differences],
            "unanswered": [{"node": label, "reason": why} for label, why in self.unanswered],
        }


# ---------------------------------------------------------------------------------------------


def fleet_verdict(fleet: FleetProbe) -> FleetVerdict:
    classes = model_classes([g for n in fleet.nodes if n.report for g in _usable(n.report)])
    summaries = tuple(_summary(n, classes, fleet.attnsel_version) for n in fleet.nodes)
    compared = [(s, n) for s, n in zip(summaries, fleet.nodes) if s.gpu_node and s.answered]
    unanswered = tuple((n.node.label, n.problem or "no answer") for n in fleet.nodes if not n.answered)
    return FleetVerdict(summaries, tuple(_differences(compared)), unanswered)


def _identity(gpu: GpuInfo) -> tuple:
    """What same_model reads of a GPU: 800 GPUs of a fleet are a handful of distinct identities."""
    return gpu.name, gpu.compute_capability, gpu.memory_total_bytes, gpu.pci_device_id


def model_classes(gpus: Sequence[GpuInfo]) -> list[GpuInfo]:
    """One representative per GPU model across the fleet (same_model decides, so name variants of
    one model, vllm#16740, fall in one class and an H100 never joins an A100)."""
    representatives: list[GpuInfo] = []
    distinct = {_identity(g): g for g in gpus}
    for gpu in distinct.values():
        if not any(same_model([rep, gpu]) for rep in representatives):
            representatives.append(gpu)
    return representatives


@lru_cache(maxsize=1024)
def _model_name(identity: tuple, classes: tuple[tuple, ...]) -> str:
    gpu = GpuInfo(0, 0, identity[0], compute_capability=identity[1], memory_total_bytes=identity[2],
                  pci_device_id=identity[3])
    reps = [GpuInfo(0, 0, c[0], compute_capability=c[1], memory_total_bytes=c[2], pci_device_id=c[3]) for c in classes]
    return next((rep.name for rep in reps if same_model([rep, gpu])), gpu.name)


def model_of(gpu: GpuInfo, classes: Sequence[GpuInfo]) -> str:
    """The name of the class `gpu` belongs to (its own name if none)."""
    return _model_name(_identity(gpu), tuple(_identity(c) for c in classes))


def _usable(report: ProbeReport) -> list[GpuInfo]:
    return [g for g in report.gpus if g.error is None]


def _summary(node: NodeProbe, classes: Sequence[GpuInfo], driver_attnsel: str) -> NodeSummary:
    label = node.node.label
    report = node.report
    if report is None:
        return NodeSummary(label, False, node.has_gpus, 0, "", "", "", "", "", "no answer", node.node.ray_gpus,
                           (node.problem or "no answer",), node.notes, node.node.is_head)
    usable = _usable(report)
    models = sorted({model_of(g, classes) for g in usable})
    ccs = sorted({g.capability_str or "?" for g in usable})
    return NodeSummary(
        label=label, answered=True, gpu_node=node.has_gpus, gpus=len(usable), model=" + ".join(models),
        capability="+".join(ccs), driver=report.driver_version or "", cuda=report.cuda_driver_version or "",
        nvlink=_nvlink(report), source=report.source, ray_gpus=node.node.ray_gpus,
        problems=tuple(_problems(node, report, usable, driver_attnsel)), notes=node.notes, is_head=node.node.is_head,
    )


def _nvlink(report: ProbeReport) -> str:
    if len(report.gpus) < 2:
        return "n/a"
    return {True: "yes", False: "no", None: "unknown"}[report.nvlink.fully_connected]


def _problems(node: NodeProbe, report: ProbeReport, usable: list[GpuInfo], driver_attnsel: str) -> list[str]:
    # On a CPU-only node (a head node, say) a missing NVIDIA driver is expected, not a problem.
    problems = [e for e in report.errors if not e.startswith(TORCH_NOT_ASKED)] if node.has_gpus else []
    if report.mixed_gpus:
        problems.append("different GPU models on this node: " + ", ".join(dict.fromkeys(g.name for g in report.gpus)))
    ray_gpus = node.node.ray_gpus
    if node.has_gpus and ray_gpus != len(usable):
        problems.append(
            f"Ray schedules {ray_gpus:g} GPU(s) here but {len(usable)} usable GPU(s) are visible: vLLM's workers get "
            "Ray's GPUs (`ray start --num-gpus`, CUDA_VISIBLE_DEVICES when Ray started)")
    if node.attnsel_version and node.attnsel_version != driver_attnsel:
        problems.append(f"attnsel {node.attnsel_version} here, {driver_attnsel} on the driver: install one version")
    return problems


def _visible_devices(node: NodeProbe) -> str | None:
    """The node's CUDA_VISIBLE_DEVICES as its probe saw it (only nodes with a report are compared)."""
    if node.report is None:
        return None
    visible = node.report.cuda_visible_devices
    return "unset" if visible is None else repr(visible)


def _read_by_nvml(read: Callable[[NodeSummary], str]) -> Callable[[NodeSummary, NodeProbe], str | None]:
    """Facts only NVML gives: a node whose NVML failed differs in "GPU source", not in every row."""
    return lambda s, n: read(s) if s.source == "nvml" else None


# What the GPU nodes should share, and how each node's value is read (None: unknown, left out).
_ATTRIBUTES: tuple[tuple[str, Callable[[NodeSummary, NodeProbe], str | None]], ...] = (
    ("GPU model", lambda s, n: s.model or None),
    ("GPUs", lambda s, n: str(s.gpus)),
    ("compute capability", lambda s, n: s.capability or None),
    ("driver", _read_by_nvml(lambda s: s.driver)),
    ("CUDA", _read_by_nvml(lambda s: s.cuda)),
    ("NVLink (vLLM is_fully_connected)", _read_by_nvml(lambda s: s.nvlink)),
    ("GPU source", lambda s, n: s.source),
    ("CUDA_VISIBLE_DEVICES", lambda s, n: _visible_devices(n)),
    ("Ray GPUs", lambda s, n: f"{s.ray_gpus:g}"),
)


def _differences(compared: list[tuple[NodeSummary, NodeProbe]]) -> list[Difference]:
    differences = []
    for attribute, read in _ATTRIBUTES:
        values = [(s.label, value) for s, n in compared if (value := read(s, n)) is not None]
        counts = Counter(value for _, value in values)
        if len(counts) < 2:
            continue
        common, count = counts.most_common(1)[0]
        others = tuple((label, value) for label, value in values if value != common)
        common_labels = tuple(label for label, value in values if value == common)
        differences.append(Difference(attribute, common, count, others, common_labels))
    return differences
