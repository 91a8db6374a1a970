"""The `attnsel probe --json` document. Plain dicts only (no rich): the quick start of `attnsel probe`
(cli/entry.py) prints it without loading a table renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from attnsel.probe import capability_facts

if TYPE_CHECKING:
    from attnsel.probe import ProbeReport, RequirementResult


def probe_json(report: ProbeReport, requirements: Sequence[RequirementResult] = ()) -> dict:
    """The `attnsel probe --json` document: the report plus vLLM's capability facts per GPU."""
    data = report.to_dict()
    for gpu_dict, gpu in zip(data["gpus"], report.gpus):
        gpu_dict["vllm"] = capability_facts(gpu)
    data["requirements"] = [r.to_dict() for r in requirements]
    return data
