"""`probe --ray`: the probe on every node of a Ray cluster, and the verdict over the nodes."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
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

__getattr__ = lazy_door(__name__)
