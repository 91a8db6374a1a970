"""GPU-to-GPU links: NVLink / PCIe P2P per pair, vLLM's fully-connected verdict, measured copy bandwidth."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.probe.links.bandwidth import measure_pairs
    from attnsel.probe.links.p2p import (
        VLLM_CAR_NO_P2P,
        VLLM_CAR_PCIE_ONLY,
        collect_pairs,
        nvlink_verdict,
        pair_calls,
        unknown_verdict,
        vllm_fully_connected,
        with_measured_bandwidth,
    )

__getattr__ = lazy_door(__name__)
