"""Render a `PreflightResult` (attention/preflight/deployment.py) as text, JSON or GitHub Actions annotations.

GitHub workflow commands: `::error::message` / `::warning::message`, one line each; the message is
escaped the way the Actions toolkit escapes command data (% -> %25, CR -> %0D, LF -> %0A).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from attnsel.attention.preflight import FAIL, PASS, WARN, Check, PreflightResult

if TYPE_CHECKING:
    from attnsel.attention.preflight import FleetPreflightResult
    from attnsel.attention.preflight.document import PreflightDocument, ResultFields

PREFLIGHT_SCHEMA = "attnsel-preflight/1"  # `preflight --json` (docs/schemas/)
FORMATS = ("text", "json", "github")
_LABEL = {PASS: "PASS", WARN: "WARN", FAIL: "FAIL"}
_ANSI = {PASS: "\x1b[32m", WARN: "\x1b[33m", FAIL: "\x1b[1;31m"}  # green, yellow, bold red
_RESET = "\x1b[0m"


_SOURCES = {"nvml": "seen through NVML", "torch": "seen through torch.cuda (no NVML)", "target": "target machine from --gpu"}


def _gpu_summary(result: PreflightResult) -> str:
    if not result.gpus:
        return "no GPU visible"
    names = list(dict.fromkeys(f"{g.name} (CC {g.capability_str or '?'})" for g in result.gpus))
    source = _SOURCES.get(result.probe_source, result.probe_source)
    return f"{len(result.gpus)} × " + ", ".join(names) + f", {source}"


def header_line(result: PreflightResult) -> str:
    tp, pp = result.deployment.tensor_parallel_size, result.deployment.pipeline_parallel_size
    model = f"{result.model} · " if result.model else ""
    return f"attnsel preflight · {model}TP={tp}{f' · PP={pp}' if pp > 1 else ''} · {_gpu_summary(result)}"


def summary_line(result: PreflightResult) -> str:
    c = result.counts
    return f"Result: {c[PASS]} pass, {c[WARN]} warn, {c[FAIL]} fail -> exit {result.exit_code}"


def result_fields(result: PreflightResult | FleetPreflightResult) -> ResultFields:
    """What every preflight document starts with (one node's, or a cluster's: reports/fleet_report.py)."""
    d = result.deployment
    return {
        "ok": result.ok,
        "exit_code": result.exit_code,
        "counts": result.counts,
        "model": result.model,
        "model_type": getattr(result.model_facts, "model_type", None),
        "deployment": {
            "tensor_parallel_size": d.tensor_parallel_size,
            "pipeline_parallel_size": d.pipeline_parallel_size,
            "attention_backend": d.attention_backend,
            "block_size": d.block_size,
            "kv_cache_dtype": d.kv_cache_dtype,
            "dtype": d.dtype,
            "strict": d.strict,
            "vllm_flags": d.vllm_flags(),
        },
        "rule_profile": result.profile_reason,
    }


def preflight_to_dict(result: PreflightResult) -> PreflightDocument:
    from attnsel.reports.explain import explanation_to_dict

    return {
        "schema": PREFLIGHT_SCHEMA,
        **result_fields(result),
        "gpu_source": result.probe_source,
        "gpus": [g.to_dict() for g in result.gpus],
        "checks": [c.to_dict() for c in result.checks],
        "explain": explanation_to_dict(result.explanation) if result.explanation is not None else None,
        "memory": result.memory.to_dict() if result.memory is not None else None,
    }


def render_text(result: PreflightResult, out: TextIO, *, quiet: bool = False, verbose: bool = False,
                colour: bool = False, width: int | None = None) -> None:
    """One line per check (`PASS name  message`), hints and vLLM's words indented below.
    quiet: only warn/fail lines and nothing else. colour: ANSI-coloured labels (a terminal
    without NO_COLOR); the text is the same either way. width: the terminal's, to wrap long
    messages under their own column (None: one line per message, for pipes)."""
    if not quiet:
        _write_header(result, out)
    write_check_lines(out, [("", c) for c in result.checks], quiet=quiet, verbose=verbose, colour=colour,
                      width=width)
    if not quiet:
        out.write(summary_line(result) + "\n")


def write_check_lines(out: TextIO, rows: Sequence[tuple[str, Check]], *, quiet: bool, verbose: bool,
                      colour: bool, width: int | None = None) -> None:
    """`LABEL  name  <prefix>message` per (prefix, check), vLLM's words and the hint below a warn/fail
    (below every check when verbose); quiet leaves out the passes. With a terminal `width`, a long
    message wraps under its own column (the label and name stay first, for grep)."""
    names = max((len(c.name) for _, c in rows), default=0)
    indent = " " * (names + 8)

    def line(first: str, text: str) -> str:
        if width is None or len(indent) + 20 > width:
            return first + text + "\n"
        return textwrap.fill(text, width, initial_indent=first, subsequent_indent=indent,
                             break_long_words=False, break_on_hyphens=False) + "\n"

    for prefix, check in rows:
        if quiet and check.status == PASS:
            continue
        label = f"{_ANSI[check.status]}{_LABEL[check.status]}{_RESET}" if colour else _LABEL[check.status]
        out.write(line(f"{label}  {check.name.ljust(names)}  ", f"{prefix}{check.message}"))
        if check.vllm_message and (check.status != PASS or verbose):
            out.write(line(indent, f"vLLM: {check.vllm_message}"))
        if check.hint and (check.status != PASS or verbose):
            out.write(line(indent, f"hint: {check.hint}"))


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_line(check: Check) -> str | None:
    """The workflow command for one check; None for a pass (printed as a plain log line instead)."""
    if check.status == PASS:
        return None
    command = "error" if check.status == FAIL else "warning"
    parts = [f"attnsel preflight {check.name}: {check.message}"]
    if check.vllm_message:
        parts.append(f"vLLM: {check.vllm_message}")
    if check.hint:
        parts.append(f"hint: {check.hint}")
    return f"::{command}::{_escape_data(' — '.join(parts))}"


def _write_header(result: PreflightResult, out: TextIO) -> None:
    out.write(header_line(result) + "\n")
    if result.profile_reason:
        out.write(f"vLLM rules: {result.profile_reason}\n")


def render_github(result: PreflightResult, out: TextIO, *, quiet: bool = False) -> None:
    if not quiet:
        _write_header(result, out)
    write_github_lines(out, result.checks, quiet=quiet)
    if not quiet:
        out.write(summary_line(result) + "\n")


def write_github_lines(out: TextIO, checks: Sequence[Check], *, quiet: bool) -> None:
    """An ::error::/::warning:: command per fail/warn; a plain `ok:` log line per pass unless quiet."""
    for check in checks:
        line = github_line(check)
        if line is not None:
            out.write(line + "\n")
        elif not quiet:
            out.write(f"ok: {check.name}: {check.message}\n")
