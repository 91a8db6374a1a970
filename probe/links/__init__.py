"""GPU-to-GPU links: NVLink / PCIe P2P per pair, vLLM's fully-connected verdict, measured copy bandwidth."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
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

__all__ = [
    "VLLM_CAR_NO_P2P",
    "VLLM_CAR_PCIE_ONLY",
    "collect_pairs",
    "measure_pairs",
    "nvlink_verdict",
    "pair_calls",
    "unknown_verdict",
    "vllm_fully_connected",
    "with_measured_bandwidth",
]
__getattr__ = lazy_door(__name__, {
    "VLLM_CAR_NO_P2P": "p2p",
    "VLLM_CAR_PCIE_ONLY": "p2p",
    "collect_pairs": "p2p",
    "measure_pairs": "bandwidth",
    "nvlink_verdict": "p2p",
    "pair_calls": "p2p",
    "unknown_verdict": "p2p",
    "vllm_fully_connected": "p2p",
    "with_measured_bandwidth": "p2p",
})
