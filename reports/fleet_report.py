"""Rendering of a fleet probe (probe/fleet/collect.py + probe/fleet/verdict.py) and of a fleet preflight
(attention/preflight/fleet.py): text for people, JSON for CI, GitHub annotations. Never calls Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnsel.attention.preflight import (
    FAIL,
    PASS,
    WARN,
    Check,
    FleetPreflightResult,
    ScopedCheck,
)
from attnsel.probe.fleet import (
    MAX_LISTED,
    Difference,
    FleetProbe,
    FleetVerdict,
    NodeProbe,
    NodeSummary,
)
from attnsel.reports.explain import explanation_to_dict
from attnsel.reports.preflight_report import (
    result_fields,
    write_check_lines,
    write_github_lines,
)
from attnsel.reports.probe_document import probe_json

if TYPE_CHECKING:
    from attnsel.attention.preflight.document import FleetPreflightDocument
    from attnsel.probe import RequirementResult

FLEET_PROBE_SCHEMA = "attnsel-fleet-probe/1"
FLEET_PREFLIGHT_SCHEMA = "attnsel-fleet-preflight/1"


# ---------------------------------------------------------------------------------------------
# probe --ray


def node_json(node: NodeProbe, summary: NodeSummary) -> dict:
    """One node: what Ray says, what the node says, our summary, and its full `probe --json`."""
    return {
        **node.node.to_dict(),
        "status": summary.status,
        "problem": node.problem,
        "seconds": node.seconds,
        "reported_hostname": node.hostname,
        "attnsel_version": node.attnsel_version,
        "ray_version": node.ray_version,
        "python_version": node.python_version,
        "summary": summary.to_dict(),
        "probe": probe_json(node.report) if node.report is not None else None,
    }


def fleet_probe_json(fleet: FleetProbe, verdict: FleetVerdict,
                     requirements: Sequence[RequirementResult] = ()) -> dict:
    return {
        "schema": FLEET_PROBE_SCHEMA,
        "address": fleet.address,
        "ray_version": fleet.ray_version,
        "attnsel_version": fleet.attnsel_version,
        "timeout_s": fleet.timeout_s,
        "elapsed_s": fleet.elapsed_s,
        "summary": verdict.to_dict(),
        "nodes": [node_json(n, s) for n, s in zip(fleet.nodes, verdict.nodes)],
        "dead_nodes": [n.to_dict() for n in fleet.dead_nodes],
        "requirements": [r.to_dict() for r in requirements],
    }


def fleet_header(fleet: FleetProbe, verdict: FleetVerdict) -> str:
    answered = sum(1 for n in verdict.nodes if n.answered)
    return (f"attnsel probe --ray {fleet.address} | Ray {fleet.ray_version} | {len(fleet.nodes)} node(s) alive, "
            f"{answered} answered in {fleet.elapsed_s:.2f} s (timeout {fleet.timeout_s:g} s)")


def node_table(verdict: FleetVerdict) -> Table:
    table = Table(title="Nodes (GPUs: usable ones the probe sees; Ray GPUs: what vLLM can reserve)",
                  title_justify="left")
    for column in ("Node", "GPUs", "Model", "CC", "Driver", "CUDA", "NVLink", "Ray GPUs", "Status"):
        table.add_column(column, overflow="fold", no_wrap=column == "Node")
    for n in verdict.nodes:
        roles = [r for r, on in (("head", n.is_head), ("no GPU", not n.gpu_node)) if on]
        cells = (n.label + (f" ({', '.join(roles)})" if roles else ""), n.gpus if n.answered else "-", n.model or "-", n.capability or "-", n.driver or "-",
                 n.cuda or "-", n.nvlink or "-", f"{n.ray_gpus:g}", n.status)
        table.add_row(*[Text(str(c)) for c in cells])
    return table


def difference_line(d: Difference) -> str:
    """`  driver: 580.95.05 on 14 node(s); 10.0.0.7: 570.86.15`; with no majority, every node's value."""
    pairs = list(d.others) if d.common_count > 1 else [(label, d.common) for label in d.common_labels] + list(d.others)
    listed = ", ".join(f"{label}: {value}" for label, value in pairs[:MAX_LISTED])
    more = f" and {len(pairs) - MAX_LISTED} more" if len(pairs) > MAX_LISTED else ""
    head = f"{d.common} on {d.common_count} node(s); " if d.common_count > 1 else "no two nodes alike: "
    return f"  {d.attribute}: {head}{listed}{more}"


def verdict_lines(fleet: FleetProbe, verdict: FleetVerdict) -> list[str]:
    lines = []
    gpu_nodes = verdict.gpu_nodes
    if verdict.homogeneous is None:
        lines.append("Homogeneous: unknown (no GPU node answered)")
    elif verdict.homogeneous:
        first = next(n for n in gpu_nodes if n.answered)
        lines.append(f"Homogeneous: yes -- {len(gpu_nodes)} GPU node(s), each {first.gpus} x {first.model} (CC "
                     f"{first.capability}), driver {first.driver}, CUDA {first.cuda}, NVLink {first.nvlink}")
    else:
        lines.append(f"Homogeneous: no -- the {len(gpu_nodes)} GPU node(s) differ in:")
        lines += [difference_line(d) for d in verdict.differences]
    problems = [(n.label, p) for n in verdict.nodes if n.answered for p in n.problems]
    if problems:
        lines.append("Problems:")
        lines += [f"  {label}: {p}" for label, p in problems]
    notes = [(n.label, note) for n in verdict.nodes for note in n.notes]
    lines += [f"note: {label}: {note}" for label, note in notes]
    if verdict.unanswered:
        lines.append(f"Did not answer ({len(verdict.unanswered)}):")
        lines += [f"  {label}: {why}" for label, why in verdict.unanswered]
    else:
        lines.append("Did not answer: none")
    cpu_only = [n.label for n in verdict.nodes if not n.gpu_node]
    if cpu_only:
        lines.append(f"No GPU (vLLM places no GPU worker there): {', '.join(cpu_only)}")
    if fleet.dead_nodes:
        dead = ", ".join(f"{n.label} ({n.death_reason or 'dead'})" for n in fleet.dead_nodes[:MAX_LISTED])
        more = f" and {len(fleet.dead_nodes) - MAX_LISTED} more" if len(fleet.dead_nodes) > MAX_LISTED else ""
        lines.append(f"Dead nodes Ray still lists (not probed): {dead}{more}")
    return lines


def print_fleet(fleet: FleetProbe, verdict: FleetVerdict, console: Console,
                requirements: Sequence[RequirementResult] = ()) -> None:
    console.print(Text(fleet_header(fleet, verdict), style="bold"))
    console.print(node_table(verdict))
    for line in verdict_lines(fleet, verdict):
        console.print(Text(line))
    for r in requirements:
        console.print(Text(f"{'ok' if r.ok else 'FAILED'}: {r.check}: {r.detail}"))


# ---------------------------------------------------------------------------------------------
# preflight --ray


def fleet_preflight_json(result: FleetPreflightResult) -> FleetPreflightDocument:
    head = result_fields(result)
    pp = result.pipeline_parallel_size
    head["deployment"]["pipeline_parallel_size"] = pp
    flags = head["deployment"]["vllm_flags"]
    if "--pipeline-parallel-size" not in flags:  # the deployment names it once it is more than 1
        flags += ["--pipeline-parallel-size", str(pp)]
    flags += ["--distributed-executor-backend", "ray"]
    return {
        "schema": FLEET_PREFLIGHT_SCHEMA,
        **head,
        "cluster": {"address": result.fleet.address, "ray_version": result.fleet.ray_version,
                    "elapsed_s": result.fleet.elapsed_s, **result.verdict.to_dict(),
                    "nodes": [s.to_dict() for s in result.verdict.nodes]},
        "checks": [c.to_dict() for c in result.checks],
        "explain": {name: explanation_to_dict(e) for name, e in result.explanations},
    }


def grouped(checks: Sequence[ScopedCheck]) -> list[tuple[str, Check]]:
    """Checks with one name, status and message collapse into one line naming their scopes:
    100 nodes that pass the same way are one line, not 100."""
    groups: dict[tuple[str, str, str], list[ScopedCheck]] = {}
    for c in checks:
        groups.setdefault((c.check.name, c.check.status, c.check.message), []).append(c)
    lines = []
    for members in groups.values():
        scopes = [m.scope for m in members]
        more = f" and {len(scopes) - MAX_LISTED} more ({len(scopes)} in all)" if len(scopes) > MAX_LISTED else ""
        lines.append((", ".join(scopes[:MAX_LISTED]) + more, members[0].check))
    return lines


def preflight_header(result: FleetPreflightResult) -> str:
    d = result.deployment
    model = f"{result.model} · " if result.model else ""
    gpus = sum(n.gpus for n in result.verdict.nodes if n.answered)
    return (f"attnsel preflight --ray {result.fleet.address} · {model}TP={d.tensor_parallel_size} "
            f"PP={result.pipeline_parallel_size} · {len(result.verdict.gpu_nodes)} GPU node(s), {gpus} GPU(s), "
            f"Ray {result.fleet.ray_version}")


def summary_line(result: FleetPreflightResult) -> str:
    c = result.counts
    return f"Result: {c[PASS]} pass, {c[WARN]} warn, {c[FAIL]} fail -> exit {result.exit_code}"


def render_preflight_text(result: FleetPreflightResult, out: TextIO, *, quiet: bool = False, verbose: bool = False,
                          colour: bool = False, width: int | None = None) -> None:
    """As the one-node text, with each line's scope (`[fleet]`, nodes, GPU models) before its message."""
    if not quiet:
        out.write(preflight_header(result) + "\n")
        if result.profile_reason:
            out.write(f"vLLM rules: {result.profile_reason}\n")
    rows = [(f"[{scope}] ", check) for scope, check in grouped(result.checks)]
    write_check_lines(out, rows, quiet=quiet, verbose=verbose, colour=colour, width=width)
    if not quiet:
        out.write(summary_line(result) + "\n")


def render_preflight_github(result: FleetPreflightResult, out: TextIO, *, quiet: bool = False) -> None:
    """As the one-node annotations, the scope in the check's name: `attnsel preflight gpu-count [10.0.0.7]: ...`."""
    if not quiet:
        out.write(preflight_header(result) + "\n")
    write_github_lines(out, [replace(check, name=f"{check.name} [{scope}]") for scope, check in grouped(result.checks)],
                       quiet=quiet)
    if not quiet:
        out.write(summary_line(result) + "\n")
