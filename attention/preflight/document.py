"""The `preflight --json` result as typed dicts: one definition of its keys, for the one-node
document (reports/preflight_report.py, `attnsel-preflight/1`) and the Ray cluster's
(reports/fleet_report.py, `attnsel-fleet-preflight/1`), which start with the same fields.
Their JSON Schemas are docs/schemas/attnsel-preflight.json and attnsel-fleet-preflight.json.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from attnsel.attention.explain.document import ExplainAnswer
    from attnsel.attention.preflight.status import CheckStatus


class CheckFields(TypedDict):
    """One check (attention/preflight/status.py Check.to_dict)."""

    name: str
    status: CheckStatus  # written as its word: pass | warn | fail
    message: str
    hint: str | None
    vllm_message: str | None


class ScopedCheckFields(TypedDict):
    """One check of a cluster, with where it applies (attention/preflight/fleet.py ScopedCheck.to_dict)."""

    scope: str  # "fleet", a node label, or a GPU model
    name: str
    status: CheckStatus
    message: str
    hint: str | None
    vllm_message: str | None


class DeploymentFields(TypedDict):
    tensor_parallel_size: int
    pipeline_parallel_size: int
    attention_backend: str | None
    block_size: int | None
    kv_cache_dtype: str | None
    dtype: str
    strict: bool
    vllm_flags: list[str]  # the `vllm serve` flags of the deployment checked


class ResultFields(TypedDict):
    """What every preflight document starts with (after its schema)."""

    ok: bool
    exit_code: int
    counts: dict[str, int]  # pass / warn / fail -> how many checks
    model: str | None
    model_type: str | None
    deployment: DeploymentFields
    rule_profile: str | None  # which vLLM rule profile answered, and why


class _PreflightHead(TypedDict):
    """What both preflight documents open with (their writers put these keys first, in this order)."""

    schema: str
    ok: bool
    exit_code: int
    counts: dict[str, int]
    model: str | None
    model_type: str | None
    deployment: DeploymentFields
    rule_profile: str | None


class PreflightDocument(_PreflightHead):
    """`preflight --json` on one machine (`attnsel-preflight/1`)."""

    gpu_source: str  # nvml | torch | target
    gpus: list[dict]
    checks: list[CheckFields]
    explain: ExplainAnswer | None  # explain's answer for the TP group's GPU, when the attention step ran
    memory: dict | None  # the memory plan (attention/memory MemoryPlan.to_dict), when the memory step ran


class FleetPreflightDocument(_PreflightHead):
    """`preflight --ray --json` (`attnsel-fleet-preflight/1`)."""

    cluster: dict
    checks: list[ScopedCheckFields]
    explain: dict[str, ExplainAnswer]  # GPU model -> explain's answer on it
