"""`probe --ray`: the probe on every node of a Ray cluster, and the verdict over the nodes."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.probe.fleet.collect import (
        DEFAULT_TIMEOUT_S,
        connect,
        list_nodes,
        probe_fleet,
        probe_this_node,
        task_options,
    )
    from attnsel.probe.fleet.facts import FleetProbe, NodeProbe, RayNode
    from attnsel.probe.fleet.verdict import (
        MAX_LISTED,
        Difference,
        FleetVerdict,
        NodeSummary,
        fleet_verdict,
        model_classes,
        model_of,
    )

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_LISTED",
    "Difference",
    "FleetProbe",
    "FleetVerdict",
    "NodeProbe",
    "NodeSummary",
    "RayNode",
    "connect",
    "fleet_verdict",
    "list_nodes",
    "model_classes",
    "model_of",
    "probe_fleet",
    "probe_this_node",
    "task_options",
]
__getattr__ = lazy_door(__name__, {
    "DEFAULT_TIMEOUT_S": "collect",
    "Difference": "verdict",
    "FleetProbe": "facts",
    "FleetVerdict": "verdict",
    "MAX_LISTED": "verdict",
    "NodeProbe": "facts",
    "NodeSummary": "verdict",
    "RayNode": "facts",
    "connect": "collect",
    "fleet_verdict": "verdict",
    "list_nodes": "collect",
    "model_classes": "verdict",
    "model_of": "verdict",
    "probe_fleet": "collect",
    "probe_this_node": "collect",
    "task_options": "collect",
})
