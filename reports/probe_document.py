"""The `attnsel probe --json` document. Plain dicts only (no rich): the quick start of `attnsel probe`
(cli/entry.py) prints it without loading a table renderer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnsel.probe import capability_facts
from attnsel.probe.libraries import environment_versions

PROBE_SCHEMA = "attnsel-probe/1"  # docs/schemas/attnsel-probe-1.schema.json

if TYPE_CHECKING:
    from attnsel.probe import ProbeReport, RequirementResult


def probe_json(report: ProbeReport, requirements: Sequence[RequirementResult] = ()) -> dict:
    """The `attnsel probe --json` document: the report plus vLLM's capability facts per GPU, and the
    installed library versions (`libraries`: torch, vLLM, FlashInfer, Triton, CUDA; read from package
    metadata, nothing imported)."""
    data = {"schema": PROBE_SCHEMA, **report.to_dict()}
    for gpu_dict, gpu in zip(data["gpus"], report.gpus):
        gpu_dict["vllm"] = capability_facts(gpu)
    data["requirements"] = [r.to_dict() for r in requirements]
    data["libraries"] = environment_versions()
    return data
