"""What a probe over a Ray cluster found: one entry per alive node, with the node's own probe
report or the reason it gave none. Frozen dataclasses like probe/facts.py; nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from attnsel.probe.facts import ProbeReport

NODE_ANSWER_SCHEMA = "attnsel-node-probe/1"  # what the task on a node sends back (probe/fleet/collect.py)


class NodeAnswer(TypedDict, total=False):
    """The answer the probe task on a node sends back (schema NODE_ANSWER_SCHEMA): written by
    collect.probe_this_node, read by collect._read_answer. Keys may be missing: the node may run
    another attnsel version, or fail before it knows them."""

    schema: str
    hostname: str
    attnsel_version: str
    python_version: str
    ray_version: str
    node_id: str
    notes: list[str]
    report: dict[str, Any]  # probe.facts.report_fields: the ProbeReport as JSON-able fields
    error: str  # the exception the probe raised there (then no report)
    seconds: float


@dataclass(frozen=True)
class RayNode:
    """One node as Ray's GCS describes it (`ray.nodes()`), before anything runs on it."""

    node_id: str
    address: str  # NodeManagerAddress: the node's IP as Ray uses it
    hostname: str
    alive: bool
    is_head: bool = False
    ray_gpus: float = 0.0  # Ray's "GPU" resource: what vLLM's placement group can reserve here
    accelerator_type: str | None = None  # Ray's "accelerator_type:<X>" resource, e.g. "H100"
    labels: Mapping[str, str] = field(default_factory=dict)
    death_reason: str | None = None  # for a dead node: Ray's DeathReasonMessage
    label: str = ""  # short name, unique among the fleet's nodes: the IP, plus the node id's head when IPs repeat

    def to_dict(self) -> dict:
        return {
            "node_id": self.node_id,
            "label": self.label,
            "address": self.address,
            "hostname": self.hostname,
            "alive": self.alive,
            "is_head": self.is_head,
            "ray_gpus": self.ray_gpus,
            "accelerator_type": self.accelerator_type,
            "labels": dict(self.labels),
            "death_reason": self.death_reason,
        }


@dataclass(frozen=True)
class NodeProbe:
    """A node's answer: its probe report, or why there is none (`problem`)."""

    node: RayNode
    report: ProbeReport | None = None
    problem: str | None = None  # no answer in time, the task failed, the answer was unreadable
    seconds: float | None = None  # how long the probe took on the node itself
    hostname: str | None = None  # as the node says (socket.gethostname())
    attnsel_version: str | None = None
    ray_version: str | None = None
    python_version: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def answered(self) -> bool:
        return self.report is not None

    @property
    def has_gpus(self) -> bool:
        """A node vLLM could place GPU workers on: Ray counts GPUs there, or the probe saw some."""
        return self.node.ray_gpus > 0 or bool(self.report and self.report.gpus)


@dataclass(frozen=True)
class FleetProbe:
    address: str  # as given: "auto", "10.0.0.1:6379", "ray://head:10001"
    ray_version: str  # the driver's (Ray requires the cluster to run the same)
    attnsel_version: str  # the driver's
    timeout_s: float
    elapsed_s: float  # from submitting the tasks to the last answer (or the deadline)
    nodes: tuple[NodeProbe, ...]  # every node Ray listed as alive, head first
    dead_nodes: tuple[RayNode, ...] = ()  # nodes Ray still remembers as dead (not probed)


def unique_labels(nodes: list[RayNode]) -> list[str]:
    """A short name per node: its IP, or IP#<node id head> where several nodes share an IP
    (several raylets on one host, as `ray.cluster_utils.Cluster` starts them).

    >>> a = RayNode("aa11bb22cc", "10.0.0.1", "h1", True)
    >>> b = RayNode("dd33ee44ff", "10.0.0.1", "h1", True)
    >>> unique_labels([a, b, RayNode("0123456789", "10.0.0.2", "h2", True)])
    ['10.0.0.1#aa11bb', '10.0.0.1#dd33ee', '10.0.0.2']
    """
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node.address] = counts.get(node.address, 0) + 1
    return [n.address if counts[n.address] == 1 else f"{n.address}#{n.node_id[:6]}" for n in nodes]
