"""Render a `ReleaseHistory` (attention/explain/history.py): `attnsel explain --vllm-version all`, as a
rich table with one line per change, or a JSON dict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnsel.attention.explain import ReleaseChange, ReleaseHistory, ReleaseVerdict
from attnsel.reports.cells import dash
from attnsel.reports.explain.table import (
    EXPLAIN_HISTORY_SCHEMA,
    _capability_str,
    _inputs_line,
    _short,
)

if TYPE_CHECKING:
    from attnsel.attention.explain.document import (
        Change,
        ChangeFields,
        ExplainHistory,
        ModelRef,
        ReleaseFields,
    )


def change_lines(change: ReleaseChange) -> list[str]:
    """What one release changed, one phrase per kind of change.

    >>> change_lines(ReleaseChange("0.24.0", "0.25.0", became_valid=["FLASHINFER"], selected=("A", "B")))
    ['FLASHINFER became valid', 'vLLM picks B (was A)']
    """
    lines = []
    if change.became_valid:
        lines.append(f"{', '.join(change.became_valid)} became valid")
    if change.became_invalid:
        lines.append(f"{', '.join(change.became_invalid)} no longer valid")
    if change.selected:
        old, new = change.selected
        lines.append(f"vLLM picks {new}" + (f" (was {old})" if old else "") if new else f"no backend picked (was {old})")
    if change.block_size:
        old_size, new_size = change.block_size
        lines.append(f"block size {dash(old_size)} -> {dash(new_size)}")
    if change.error:
        _old_error, new_error = change.error
        lines.append(f"vLLM raises: {_short(new_error, 120)}" if new_error else "vLLM no longer raises")
    return lines


def _verdict_dict(verdict: ReleaseVerdict) -> ReleaseFields:
    e = verdict.explanation
    return {
        "profile": verdict.profile,
        "vllm_version": verdict.vllm_version,
        "selected": verdict.selected,
        "block_size": verdict.block_size,
        "kernel_block_size": e.kernel_block_size if e is not None and e.selected else None,
        "valid_backends": verdict.valid_backends,
        "backends": [b.to_dict() for b in e.backends] if e is not None else [],
        "error": verdict.vllm_error,
        "refused": verdict.error is not None,
        "notes": list(e.notes) if e is not None else [],
        "exit_code": e.exit_code if e is not None else 1,
    }


def _change_dict(change: ReleaseChange) -> ChangeFields:
    def pair(value: tuple | None) -> Change | None:
        return None if value is None else {"before": value[0], "after": value[1]}

    return {
        "before": change.before,
        "after": change.after,
        "changed": change.changed,
        "became_valid": change.became_valid,
        "became_invalid": change.became_invalid,
        "selected": pair(change.selected),
        "block_size": pair(change.block_size),
        "error": pair(change.error),
        "summary": change_lines(change),
    }


def history_to_dict(history: ReleaseHistory, model: ModelRef | None = None) -> ExplainHistory:
    """The `explain --vllm-version all --json` document."""
    first = next((v.explanation for v in history.releases if v.explanation is not None), None)
    return {
        "schema": EXPLAIN_HISTORY_SCHEMA,
        "gpu": {"name": history.gpu_name, "capability": _capability_str(history.capability)},
        "model": model,
        "inputs": first.inputs.to_dict() if first is not None and model is None else None,
        "releases": [_verdict_dict(v) for v in history.releases],
        "changes": [_change_dict(c) for c in history.changes],
    }


def render_history(history: ReleaseHistory, console: Console, model: ModelRef | None = None) -> None:
    gpu = f"{history.gpu_name} " if history.gpu_name else ""
    console.print(f"attnsel explain --vllm-version all · GPU {gpu}(compute capability "
                  f"{_capability_str(history.capability)}) · {len(history.releases)} releases", markup=False)
    if model is not None:
        console.print(f"Model: {model['name']} ({model['source']}) · model_type {model['model_type']} · "
                      "inputs derived again for each release", markup=False)
    else:
        first = next((v.explanation for v in history.releases if v.explanation is not None), None)
        if first is not None:
            console.print(_inputs_line(first), markup=False)
    table = Table(show_header=True, header_style="bold")
    for column in ("vLLM", "Profile", "vLLM selects", "Block", "Valid"):
        table.add_column(column, no_wrap=True)
    for verdict in history.releases:
        e = verdict.explanation
        table.add_row(
            verdict.vllm_version, verdict.profile,
            verdict.selected or Text("raises" if verdict.vllm_error else "-", style="red"),
            dash(verdict.block_size),
            f"{len(verdict.valid_backends)}/{len(e.backends)}" if e is not None else "-",
        )
    console.print(table)
    oldest = history.releases[0] if history.releases else None
    if oldest is not None and oldest.vllm_error:
        console.print(f"{oldest.vllm_version}: vLLM raises: {_short(oldest.vllm_error, 160)}", markup=False)
    changed = [c for c in history.changes if c.changed]
    if not changed:
        console.print(f"No change across the {len(history.releases)} releases.", markup=False)
    for change in changed:
        console.print(f"{change.before} -> {change.after}: {'; '.join(change_lines(change))}", markup=False)
