"""GPU-to-GPU links: NVML P2P status per pair, topology level, vLLM's NVLink verdict, measured copy speed.

vLLM decides "fully connected" with `NvmlCudaPlatform.is_fully_connected` (seed cuda.py): for every
pair i < j of the physical ids it is given, `nvmlDeviceGetP2PStatus(h_i, h_j,
NVML_P2P_CAPS_INDEX_NVLINK)` must be NVML_P2P_STATUS_OK; the first other status, or an NVMLError,
returns False (vLLM logs "NVLink detection failed. This is normal if your machine has no NVLink
equipped."). With one GPU there is no pair, so it returns True. It checks NVLink only, not PCIe P2P
(vllm PR#4159 switched to this query; club-3090#786).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from attnsel.probe.facts import NvlinkVerdict, P2PPair
from attnsel.probe.nvml import (
    NVLINK_MAX_LINKS,
    P2P_CAPS_INDEX,
    P2P_STATUS_NAMES,
    P2P_STATUS_OK,
    NvmlSession,
    TorchFacade,
)

# nvmlGpuTopologyLevel_t -> the labels of `nvidia-smi topo -m`. INTERNAL (two GPUs on one board,
# e.g. K80) sits behind the board's own PCIe switch, which nvidia-smi shows as PIX.
TOPOLOGY_NAMES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

VLLM_NVLINK_FAILED_LOG = "NVLink detection failed. This is normal if your machine has no NVLink equipped."
# vLLM custom_all_reduce.py warnings, verbatim.
VLLM_CAR_PCIE_ONLY = (
    "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly."
)
VLLM_CAR_NO_P2P = (
    "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly."
)


def topology_name(level: int | None) -> str | None:
    """nvmlDeviceGetTopologyCommonAncestor's level as nvidia-smi prints it.

    >>> topology_name(30), topology_name(50), topology_name(None)
    ('PHB', 'SYS', None)
    """
    if level is None:
        return None
    return TOPOLOGY_NAMES.get(int(level), f"LEVEL{level}")


def _status_name(value: int | None) -> str | None:
    return None if value is None else P2P_STATUS_NAMES.get(int(value), f"STATUS_{value}")


def _is_ok(value: int | None) -> bool | None:
    return None if value is None else int(value) == P2P_STATUS_OK


def active_nvlink_count(session: NvmlSession, physical_index: int) -> int | None:
    """Links in state NVML_FEATURE_ENABLED, asking link 0, 1, ... until NVML rejects a link number."""
    count = 0
    for link in range(NVLINK_MAX_LINKS):
        state = session.get("nvmlDeviceGetNvLinkState", physical_index, link, quiet=True)
        if state is None:
            return count if link > 0 else None
        count += int(state == 1)
    return count


# What `query_pair` asks every pair, in its order: (NVML function, arguments after the two GPUs). One
# list for the reader and for `pair_calls`, so what is asked ahead is what the reader asks.
_PAIR_QUERIES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("nvmlDeviceGetP2PStatus", (P2P_CAPS_INDEX["NVLINK"],)),
    ("nvmlDeviceGetP2PStatus", (P2P_CAPS_INDEX["READ"],)),
    ("nvmlDeviceGetP2PStatus", (P2P_CAPS_INDEX["WRITE"],)),
    ("nvmlDeviceGetP2PStatus", (P2P_CAPS_INDEX["ATOMICS"],)),
    ("nvmlDeviceGetTopologyCommonAncestor", ()),
)


def _visited(visible: Sequence[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """((NVML a, NVML b), (logical a, logical b)) for every pair, in vLLM's i < j order of `visible`."""
    return [((pa, pb), (la, lb)) for i, (la, pa) in enumerate(visible) for lb, pb in visible[i + 1:]]


def pair_calls(visible: Sequence[tuple[int, int]]) -> list[tuple[str, tuple[int, ...]]]:
    """The calls `collect_pairs(session, visible)` makes unconditionally, as (function, args)."""
    return [(function, (a, b, *extra)) for (a, b), _ in _visited(visible) for function, extra in _PAIR_QUERIES]


def query_pair(session: NvmlSession, a: int, b: int, logical: tuple[int, int], link_counts: _LinkCounts) -> P2PPair:
    """All P2P facts for one pair of physical GPUs (a < b in the order vLLM would visit them)."""
    before = len(session.failures)
    nvlink, read, write, atomics, level = (session.get(function, a, b, *extra) for function, extra in _PAIR_QUERIES)
    errors = [f.describe() for f in session.failures[before:]]

    pcie = topology_name(level)
    count = None
    topology: str | None  # NV<links>, else the PCIe level (None: unknown)
    if _is_ok(nvlink):
        counts = [link_counts.of(a), link_counts.of(b)]
        count = min(counts) if None not in counts else None  # type: ignore[type-var]
        topology = f"NV{count}" if count else "NV"
    else:
        topology = pcie
    return P2PPair(
        a=logical[0],
        b=logical[1],
        nvlink=_is_ok(nvlink),
        pcie_read=_is_ok(read),
        pcie_write=_is_ok(write),
        topology=topology,
        error="; ".join(errors) or None,
        physical_a=a,
        physical_b=b,
        nvlink_status=_status_name(nvlink),
        read_status=_status_name(read),
        write_status=_status_name(write),
        atomics=_is_ok(atomics),
        pcie_topology=pcie,
        nvlink_count=count,
    )


class _LinkCounts:
    """Active NVLink counts, asked only for GPUs that have an NVLink peer."""

    def __init__(self, session: NvmlSession):
        self.session = session
        self.counts: dict[int, int | None] = {}

    def of(self, physical_index: int) -> int | None:
        if physical_index not in self.counts:
            self.counts[physical_index] = active_nvlink_count(self.session, physical_index)
        return self.counts[physical_index]


def collect_pairs(session: NvmlSession, visible: Sequence[tuple[int, int]]) -> list[P2PPair]:
    """Every pair of the visible GPUs, given as (logical index, NVML index), in vLLM's i < j order."""
    link_counts = _LinkCounts(session)
    return [query_pair(session, a, b, logical, link_counts) for (a, b), logical in _visited(visible)]


def vllm_fully_connected(pairs: Sequence[P2PPair], world_size: int) -> tuple[bool | None, str]:
    """vLLM's is_fully_connected over the visible GPUs, with the reason in words.

    A query that raised counts as False, as in vLLM (which catches NVMLError and returns False).

    >>> vllm_fully_connected([], 1)[0]
    True
    >>> ok = P2PPair(a=0, b=1, nvlink=True, physical_a=0, physical_b=1, nvlink_status="OK")
    >>> no = P2PPair(a=0, b=2, nvlink=False, physical_a=0, physical_b=2, nvlink_status="NOT_SUPPORTED")
    >>> vllm_fully_connected([ok, no], 3)[0]
    False
    """
    if world_size == 0:
        return None, "no visible GPU: nothing to connect"
    if world_size == 1:
        return True, (
            "one visible GPU: vLLM's is_fully_connected has no pair to check and returns True "
            "(it does not matter: a single GPU does no all-reduce)"
        )
    for pair in pairs:  # the first failing pair decides, as vLLM returns at the first one
        where = f"GPU {pair.a} (NVML {pair.physical_a}) - GPU {pair.b} (NVML {pair.physical_b})"
        if pair.nvlink is None:
            first_error = (pair.error or "no answer").split("; ")[0]
            return False, (
                f"NVML could not answer the NVLink P2P query for {where} ({first_error}); vLLM returns False here "
                f"and logs \"{VLLM_NVLINK_FAILED_LOG}\""
            )
        if not pair.nvlink:
            return False, f"no NVLink P2P between {where} (NVML_P2P_STATUS_{pair.nvlink_status})"
    return True, f"every pair of the {world_size} visible GPUs has NVLink P2P (NVML_P2P_CAPS_INDEX_NVLINK = OK)"


def custom_allreduce_verdict(world_size: int, fully_connected: bool | None, pairs: Sequence[P2PPair]) -> tuple[bool | None, str]:
    """What vLLM's custom all-reduce would do if all visible GPUs form one tensor-parallel group
    (docs/probe.md, "Custom all-reduce": 2 GPUs need working P2P; more need a full NVLink mesh, vllm#56128)."""
    if world_size == 0:
        return None, "no visible GPU"
    if world_size == 1:
        return None, "not used: with one GPU (tensor-parallel size 1) there is no all-reduce"
    if world_size > 2:
        if fully_connected:
            return True, (
                f"on for TP={world_size} (full NVLink mesh; vLLM still runs its own P2P test and needs a "
                "world size it supports)"
            )
        if fully_connected is None:
            return None, "unknown: NVML could not tell whether the GPUs form an NVLink mesh"
        if any(p.nvlink is None for p in pairs):
            return False, (
                f"off for TP={world_size}: is_fully_connected is False because an NVML query failed (see above); "
                f"vLLM logs \"{VLLM_CAR_PCIE_ONLY}\" and uses NCCL"
            )
        return False, f"off for TP={world_size}: vLLM logs \"{VLLM_CAR_PCIE_ONLY}\" and uses NCCL"
    pair = pairs[0] if pairs else None
    if fully_connected:
        return True, "on for TP=2 (NVLink between the two GPUs; vLLM also runs its own P2P test)"
    if pair is not None and pair.pcie_read and pair.pcie_write:
        return True, (
            "on for TP=2 if vLLM's own P2P test passes: no NVLink, but NVML reports PCIe P2P read/write OK "
            "(two GPUs need no NVLink mesh)"
        )
    if pair is not None and (pair.pcie_read is False or pair.pcie_write is False):
        return False, f"off for TP=2: NVML reports no P2P between the GPUs; vLLM logs \"{VLLM_CAR_NO_P2P}\""
    return None, "unknown for TP=2: NVML could not report P2P for the pair; vLLM decides by its own P2P test"


def nvlink_verdict(pairs: Sequence[P2PPair], world_size: int, physical_ids: Sequence[int]) -> NvlinkVerdict:
    fully, reason = vllm_fully_connected(pairs, world_size)
    on, text = custom_allreduce_verdict(world_size, fully, pairs)
    return NvlinkVerdict(
        fully_connected=fully,
        reason=reason,
        custom_allreduce=text,
        pairs=tuple(pairs),
        world_size=world_size,
        custom_allreduce_on=on,
        physical_ids=tuple(physical_ids),
    )


def unknown_verdict(reason: str, world_size: int, pairs: Sequence[P2PPair] = ()) -> NvlinkVerdict:
    """No NVML: vLLM's own check cannot run either, so the answer is unknown (null)."""
    return NvlinkVerdict(
        fully_connected=None,
        reason=reason,
        custom_allreduce="unknown without NVML" if world_size > 1 else custom_allreduce_verdict(world_size, None, ())[1],
        pairs=tuple(pairs),
        world_size=world_size,
        custom_allreduce_on=None,
    )


def with_measured_bandwidth(torch: TorchFacade, pairs: list[P2PPair], visible: int) -> list[P2PPair]:
    """`--measure-p2p`: each pair with the copy bandwidth torch measured, or the reason it did not."""
    if visible < 2:
        return pairs
    measure = getattr(torch, "measure_copy_gbps", None)
    if measure is None:
        return [replace(p, measure_note="this torch facade cannot measure") for p in pairs]
    results = measure([(p.a, p.b) for p in pairs])
    out = []
    for p in pairs:
        value = results.get((p.a, p.b))
        if isinstance(value, (int, float)):
            out.append(replace(p, measured_gbps=round(float(value), 1)))
        else:
            out.append(replace(p, measure_note=str(value or "not measured")))
    return out
