"""`probe --require-*`: the CI requirements on a probe report (one node's, or every GPU node of a
fleet with --ray). Pure: reads the reports only; the caller exits 1 when one is not met."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnsel.errors import CheckFailed
from attnsel.probe.capability import parse_capability
from attnsel.probe.facts import ProbeReport

if TYPE_CHECKING:
    from attnsel.probe.fleet.facts import FleetProbe
    from attnsel.probe.fleet.verdict import FleetVerdict


@dataclass(frozen=True)
class RequirementResult:
    check: str  # "--require-gpus 8"
    ok: bool
    detail: str

    def to_dict(self) -> dict:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


def parse_required_capability(text: str) -> tuple[int, int]:
    """--require-capability X.Y, range-checked (bad input: exit 2, before any probing)."""
    return parse_capability(text, "--require-capability")


def check_requirements(report: ProbeReport, gpus: int | None, capability: str | None, nvlink: bool,
                       same_model: bool) -> list[RequirementResult]:
    """One RequirementResult per --require-* option given."""
    results = []
    healthy = [g for g in report.gpus if g.error is None]
    if gpus is not None:
        ok = len(healthy) >= gpus
        broken = len(report.gpus) - len(healthy)
        extra = f" ({broken} more visible but failing)" if broken else ""
        results.append(RequirementResult(f"--require-gpus {gpus}", ok, f"{len(healthy)} usable GPU(s) visible{extra}, need {gpus}"))
    if capability is not None:
        want = parse_required_capability(capability)
        low = [g for g in report.gpus if g.compute_capability is None or g.compute_capability < want]
        if not report.gpus:
            results.append(RequirementResult(f"--require-capability {capability}", False, "no GPU visible"))
        else:
            detail = ", ".join(f"GPU {g.index} {g.name} has {g.capability_str or 'unknown'}" for g in low)
            results.append(RequirementResult(
                f"--require-capability {capability}", not low, detail or f"every visible GPU has CC >= {capability}"))
    if nvlink:
        fully = report.nvlink.fully_connected
        detail = f"vLLM's is_fully_connected would be {fully}: {report.nvlink.reason}"
        results.append(RequirementResult("--require-nvlink", fully is True, detail))
    if same_model:
        names = ", ".join(sorted({g.name for g in report.gpus})) or "no GPU"
        detail = f"visible models differ: {names}" if report.mixed_gpus else f"one model: {names}"
        results.append(RequirementResult("--require-same-model", not report.mixed_gpus, detail))
    return results


def fleet_requirements(fleet: FleetProbe, verdict: FleetVerdict, gpus: int | None, capability: str | None, nvlink: bool,
                       same_model: bool) -> list[RequirementResult]:
    """Each --require-* option on every GPU node of a fleet probe (probe/fleet: a GPU node that did
    not answer fails them all); --require-same-model across the nodes too."""
    failures: dict[str, list[str]] = {name: [] for name in _requirement_names(gpus, capability, nvlink, same_model)}
    if not failures:
        return []
    gpu_nodes = [n for n in fleet.nodes if n.has_gpus]
    for node in gpu_nodes:
        if node.report is None:
            for bad in failures.values():
                bad.append(f"{node.node.label} did not answer")
            continue
        for r in check_requirements(node.report, gpus, capability, nvlink, same_model):
            if not r.ok:
                failures[r.check].append(f"{node.node.label}: {r.detail}")
    model = next((d for d in verdict.differences if d.attribute in ("GPU model", "compute capability")), None)
    if same_model and model is not None:
        failures["--require-same-model"].append(
            f"GPU nodes differ: {model.common} on {model.common_count}; "
            + ", ".join(f"{label}: {value}" for label, value in model.others))
    if not gpu_nodes:
        for bad in failures.values():
            bad.append("no GPU node in the cluster")
    return [RequirementResult(name, not bad, "; ".join(bad) if bad else f"met on all {len(gpu_nodes)} GPU node(s)")
            for name, bad in failures.items()]


def _requirement_names(gpus: int | None, capability: str | None, nvlink: bool, same_model: bool) -> list[str]:
    names = [f"--require-gpus {gpus}"] if gpus is not None else []
    names += [f"--require-capability {capability}"] if capability is not None else []
    names += ["--require-nvlink"] if nvlink else []
    return names + (["--require-same-model"] if same_model else [])


def raise_if_unmet(results: list[RequirementResult]) -> None:
    """Exit 1 (one line naming each unmet requirement) once the report is printed."""
    failed = [r for r in results if not r.ok]
    if failed:
        raise CheckFailed("requirement failed: " + "; ".join(f"{r.check}: {r.detail}" for r in failed))
