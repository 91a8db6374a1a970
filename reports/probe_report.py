"""Rendering of a `ProbeReport`: a rich table for people (the JSON dict for CI: reports/probe_document.py).
Never calls NVML."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from attnsel.files import shown_path
from attnsel.probe import GpuInfo, P2PPair, ProbeReport, capability_facts
from attnsel.reports.cells import dash

if TYPE_CHECKING:
    from attnsel.probe import RequirementResult

TOPOLOGY_LEGEND = "NV# = NVLink (# active links); PIX/PXB/PHB/NODE/SYS = PCIe path, as in nvidia-smi topo -m"
PAIR_TABLE_MAX = 10  # above this many pairs, show the nvidia-smi-style matrix only


def _gib(nbytes: int | None) -> str:
    return "?" if nbytes is None else f"{nbytes / 2**30:.1f}"


def _tbps(gpu: GpuInfo) -> str:
    peak = gpu.peak_memory_bandwidth_bytes_per_s
    if peak is None:
        return "?"
    mark = "" if gpu.peak_memory_bandwidth_source == "nvml" else " (table)"
    return f"{peak / 1e12:.2f}{mark}"


def _header(report: ProbeReport) -> Text:
    source = {"nvml": "NVML", "torch": "torch.cuda (NVML unavailable)", "none": "no GPU source"}[report.source]
    parts = [source]
    if report.driver_version:
        parts.append(f"driver {report.driver_version}")
    if report.cuda_driver_version:
        parts.append(f"CUDA {report.cuda_driver_version}")
    seen = f"{len(report.gpus)} GPU(s) visible"
    if report.physical_gpu_count is not None:
        seen += f" of {report.physical_gpu_count}"
    parts.append(seen)
    cvd = "unset" if report.cuda_visible_devices is None else shown_path(report.cuda_visible_devices)
    order = report.cuda_device_order or f"unset -> {report.device_order or 'FASTEST_FIRST'}"
    parts.append(f"CUDA_VISIBLE_DEVICES={cvd}")
    parts.append(f"CUDA_DEVICE_ORDER={order}")
    return Text(" | ".join(parts), style="bold")


def gpu_table(report: ProbeReport) -> Table:
    table = Table(title="GPUs (CUDA ordinal -> NVML index)", title_justify="left", show_lines=False)
    for column in ("CUDA", "NVML", "Name", "CC", "GiB", "Free", "Peak TB/s", "vLLM dtypes", "FP8", "PCI bus", "UUID"):
        table.add_column(column, overflow="fold", no_wrap=column != "UUID")
    for gpu in report.gpus:
        facts = capability_facts(gpu)
        dtypes = ",".join(d.replace("bfloat16", "bf16").replace("float16", "fp16").replace("float32", "fp32")
                          for d in facts["supported_dtypes"])
        fp8 = "yes" if facts["supports_fp8"] else "no"
        if gpu.compute_capability is None:
            dtypes = fp8 = "?"
        name = gpu.name + (" [MIG]" if gpu.is_mig else "")
        if gpu.error:
            name += f" [error: {gpu.error}]"
        cells = (
            str(gpu.index),
            dash(gpu.physical_index),
            name,
            dash(gpu.capability_str),
            _gib(gpu.memory_total_bytes),
            _gib(gpu.memory_free_bytes),
            _tbps(gpu),
            dtypes,
            fp8,
            dash(gpu.pci_bus_id),
            dash(gpu.uuid),
        )
        table.add_row(*_plain_cells(cells))
    return table


def _plain_cells(cells: Iterable[object]) -> list[Text]:
    # Text, not str: no rich markup or emoji codes in device data (":AB:" in a PCI bus id is an emoji).
    return [Text(str(c)) for c in cells]


def topology_matrix(report: ProbeReport) -> Table | None:
    """Like `nvidia-smi topo -m`, over the visible GPUs and in CUDA ordinals."""
    pairs = report.nvlink.pairs
    if not pairs:
        return None
    indices = sorted({p.a for p in pairs} | {p.b for p in pairs})
    label = {}
    for p in pairs:
        label[(p.a, p.b)] = label[(p.b, p.a)] = p.topology or "?"
    table = Table(title="Topology", title_justify="left")
    table.add_column("")
    for j in indices:
        table.add_column(f"GPU{j}")
    for i in indices:
        row = []
        for j in indices:
            if i == j:
                row.append("X")
            else:
                row.append(label.get((i, j), "?"))
        table.add_row(*_plain_cells([f"GPU{i}", *row]))
    return table


def _ok(value: bool | None) -> str:
    return {True: "OK", False: "no", None: "?"}[value]


def pair_table(pairs: Sequence[P2PPair]) -> Table:
    table = Table(title="P2P per pair (NVML nvmlDeviceGetP2PStatus)", title_justify="left")
    for column in ("GPUs", "NVML", "Link", "NVLink P2P", "P2P read", "P2P write", "Copy GB/s"):
        table.add_column(column)
    for p in pairs:
        measured = f"{p.measured_gbps:.1f}" if p.measured_gbps is not None else (p.measure_note or "-")
        table.add_row(*_plain_cells([
            f"{p.a}-{p.b}",
            f"{dash(p.physical_a)}-{dash(p.physical_b)}",
            p.topology or "?",
            p.nvlink_status or _ok(p.nvlink),
            p.read_status or _ok(p.pcie_read),
            p.write_status or _ok(p.pcie_write),
            measured,
        ]))
    return table


def _verdict_lines(report: ProbeReport) -> list[Text]:
    nv = report.nvlink
    full = {True: "yes", False: "no", None: "unknown"}[nv.fully_connected]
    lines = [
        Text.assemble(("NVLink fully connected (vLLM is_fully_connected): ", "bold"), full, f" -- {nv.reason}"),
        Text.assemble(("Custom all-reduce: ", "bold"), nv.custom_allreduce),
        Text.assemble(("Mixed GPU models: ", "bold"), "yes" if report.mixed_gpus else "no"),
    ]
    return lines


def render_probe(report: ProbeReport, requirements: Sequence[RequirementResult] = (), *, notes: bool = True) -> Group:
    """The probe as text. A failed requirement is left to the one error line on stderr (exit 1);
    `notes=False` (-q) leaves out the note lines."""
    parts: list = [_header(report)]
    if report.gpus:
        parts.append(gpu_table(report))
    else:
        parts.append(Text("No GPU visible.", style="bold"))
    matrix = topology_matrix(report)
    if matrix is not None:
        parts.append(matrix)
        parts.append(Text(TOPOLOGY_LEGEND, style="dim"))
    pairs = report.nvlink.pairs
    if pairs and (len(pairs) <= PAIR_TABLE_MAX or any(p.measured_gbps or p.measure_note for p in pairs)):
        parts.append(pair_table(pairs))
    parts.extend(_verdict_lines(report))
    # a source that could not be read is not an error of the command (it exits 0): with GPUs it is a
    # warning (a GPU only partly read), without any it is how a GPU-less machine looks
    error_label = ("warning: ", "bold yellow") if report.gpus else ("note: ", "dim")
    for line in report.errors if report.gpus or notes else ():
        parts.append(Text.assemble(error_label, line))
    for line in report.warnings:
        parts.append(Text.assemble(("warning: ", "bold yellow"), line))
    for line in report.notes if notes else ():
        parts.append(Text.assemble(("note: ", "dim"), line))
    for req in requirements:
        if req.ok:
            parts.append(Text.assemble(("PASS ", "green"), f"{req.check}: {req.detail}"))
    return Group(*parts)


def print_probe(report: ProbeReport, console: Console, requirements: Sequence[RequirementResult] = (), *,
                notes: bool = True) -> None:
    console.print(render_probe(report, requirements, notes=notes))
