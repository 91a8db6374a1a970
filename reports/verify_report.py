"""Render a verify.json (bench/verify/run.py): the verdict on tune's recommendation with the flags to
paste, the engines vLLM really started, each shape's figures, and predicted (kernel) vs observed
(engine) margins. Terminal (rich), Markdown and an HTML section share the same table data.
Renders only: every number and word comes from the document; nothing is recomputed here.
"""

from __future__ import annotations

import html as _html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from attnsel.bench.tune import advised_flags
from attnsel.bench.verify import (
    Comparison,
    EngineFacts,
    EngineStart,
    EngineVerdict,
    Figure,
    GpuFacts,
    Judged,
    ModelFacts,
    RunStatus,
    ShapeFigures,
    ShapeResult,
    StartFigure,
    StartSpread,
    VerdictRecord,
    VerifyDocument,
    VerifyOptions,
    VllmFacts,
)
from attnsel.reports.cells import formatted, table

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA = "attnsel-verify/1"  # bench/verify/request.py SCHEMA
VERDICT_STYLES: dict[str, str] = {EngineVerdict.HOLDS: "bold green", EngineVerdict.WITHIN_NOISE: "bold yellow",
                  EngineVerdict.REVERSED: "bold red", EngineVerdict.NOT_MEASURED: "bold red"}
VERDICT_CLASSES: dict[str, str] = {EngineVerdict.HOLDS: "good", EngineVerdict.REVERSED: "bad"}  # HTML; others "meh"



def _utilization(value: float | None) -> str:
    """None: verify passed none, so the release's own default ran (0.34's extensible KV cache: 1.0)."""
    return "vLLM's default" if value is None else f"{value}"

def _figure(fig: Figure | None, fmt: str) -> str:
    """median (±spread%) of a figure from bench/verify/compare.py shape_figures."""
    if not fig or fig.median is None:
        return "–"
    return fmt.format(fig.median) + ("" if fig.spread is None else f" ±{fig.spread * 100:.1f}%")


def _who(entry: EngineStart | Comparison | StartSpread) -> str:
    return entry.short or getattr(entry, "name", None) or getattr(entry, "candidate", None) or "?"


def _gib(value: float | None) -> str:
    return "–" if not value else f"{value / 1024 ** 3:.1f}"


def typed(doc: Mapping | VerifyDocument) -> VerifyDocument:
    """A verify.json as its records (bench/verify/records.py); a record as it is."""
    record = doc if isinstance(doc, VerifyDocument) else VerifyDocument.from_dict(doc)
    assert isinstance(record, VerifyDocument)
    return record


def headline(doc: Mapping | VerifyDocument) -> tuple[str, str, str | None]:
    """(verdict word, sentence, flags to paste or None)."""
    verdict = typed(doc).verdict or VerdictRecord()
    word = verdict.verdict or EngineVerdict.NOT_MEASURED
    return word, verdict.text or "no verdict (the run did not finish)", verdict.flags


def context_lines(doc: Mapping | VerifyDocument) -> list[str]:
    doc = typed(doc)
    model, gpu = doc.model or ModelFacts(), doc.gpu or GpuFacts()
    vllm, opts = doc.vllm or VllmFacts(), doc.options or VerifyOptions()
    versions = sorted({v for c in doc.candidates or [] if (v := (c.engine or EngineFacts()).vllm_version) is not None})
    lines = [f"model {model.name} ({model.model_type}, {model.attention_layers} attention layers"
             + (", hybrid" if model.is_hybrid else "") + f", TP={model.tensor_parallel_size})"
             f" · GPU {gpu.name} ({_gib(gpu.memory_total_bytes)} GiB, {_gib(gpu.memory_used_bytes)} GiB in use at start)",
             f"vLLM {', '.join(versions) or vllm.installed_version or '?'} · rules {vllm.rule_profile} · "
             f"dummy weights, prefix caching off, vLLM's default CUDA graphs and torch.compile · "
             f"gpu_memory_utilization {_utilization(opts.gpu_memory_utilization)} · max_model_len {opts.max_model_len}",
             f"decode per step = (T(N2) - T(N1)) / (N2 - N1), same prompts, one warm-up call per shape, "
             f"{opts.repeats} ABBA pairs; tokens/s = batch x N2 / T(N2): prompts of the shape's context, "
             f"N2 generated tokens each, prefill included; prefill tok/s = batch x prompt / time to the batch's first tokens"]
    tune = doc.tune
    if tune:
        margin = "" if tune.margin_pct is None else f" ({tune.margin_pct:+.1f}% at kernel level, {tune.verdict})"
        said = advised_flags(tune) or f"keep vLLM's default (fastest measured: {tune.flags})"
        lines.append(f"checks tune's {tune.scope} recommendation from {tune.source}: {said}{margin}")
    return lines


ENGINE_HEADERS = ("candidate", "status", "vLLM ran", "start s", "compile s", "graphs s", "KV tokens",
                  "GPU blocks", "CUDA graphs")


def engine_rows(doc: Mapping | VerifyDocument) -> list[list[str]]:
    rows = []
    for c in [start for row in typed(doc).candidates or [] for start in (row, *(row.restarts or []))]:
        e = c.engine or EngineFacts()
        status = c.status or "?"
        if c.error:
            status += f": {c.error}"
        ran = f"{e.backend_used}/{e.block_size_used}" if e.backend_used else "–"
        compile_s = formatted(e.torch_compile_s, "{:.1f}") + (f" ({e.compile_cache})" if e.compile_cache else "")
        start = formatted(c.start_s, "{:.1f}")
        if e.flashinfer_autotune_s:  # FlashInfer's autotuner, inside vLLM's kernel warm-up
            start += f" (autotune {e.flashinfer_autotune_s:.0f})"
        rows.append([_who(c), status, ran, start, compile_s,
                     formatted(e.graph_capture_s, "{:.0f}"), formatted(e.kv_cache_tokens, "{:,}"),
                     formatted(e.num_gpu_blocks, "{:,}"), e.cudagraph_mode or "–"])
    return rows


SHAPE_HEADERS = ("candidate", "shape", "N1/N2", "status", "decode ms/step", "tokens/s", "prefill tok/s", "fit",
                 "kernel µs", "attn share")


def shape_rows(doc: Mapping | VerifyDocument) -> list[list[str]]:
    rows = []
    for c in typed(doc).candidates or []:
        for s in c.shapes or []:
            f = s.figures or ShapeFigures()
            status = s.status or "?"
            if status != RunStatus.OK and s.error:
                status += f": {s.error}"
            label = f"b={s.batch} ctx={s.context}" if s.batch else "–"
            steps = f"{s.n1}/{s.n2}" if s.n1 else "–"
            rows.append([_who(c), label, steps, status, _figure(f.decode_step_ms, "{:.2f}"),
                         _figure(f.output_tokens_per_s, "{:,.0f}"), _figure(f.prefill_tokens_per_s, "{:,.0f}"),
                         formatted(s.requests_fit, "{:,}"), formatted(s.kernel_ms and s.kernel_ms * 1e3, "{:.1f}"),
                         formatted(s.attention_share and s.attention_share * 100, "{:.0f}%")])
    return rows


START_HEADERS = ("pair", "shape", "starts", "tokens/s per start", "start-to-start", "within one engine", "gate",
                 "decode ms per start", "start-to-start (decode)")


def _per_start(fig: StartFigure | None, fmt: str) -> list[str]:
    """medians per start, start-to-start spread, within-engine noise, the gate it is set beside."""
    if not fig or not fig.medians:
        return ["–", "–", "–", "–"]
    return [" / ".join(fmt.format(m) for m in fig.medians), formatted(fig.start_spread_pct, "{:.1f}%"),
            formatted(fig.within_noise_pct, "{:.1f}%"), formatted(fig.gate_pct, "{:.1f}%")]


def start_rows(doc: Mapping | VerifyDocument) -> list[list[str]]:
    """--repeat-engine: per pair and shape, the spread between its engine starts beside the
    within-engine noise (none without --repeat-engine)."""
    rows = []
    for s in typed(doc).engine_starts or []:
        decode = _per_start(s.decode, "{:.2f}")
        rows.append([_who(s), f"b={s.batch} ctx={s.context}", f"{s.measured}/{s.starts}",
                     *_per_start(s.end_to_end, "{:,.0f}"), decode[0], decode[1]])
    return rows


COMPARISON_HEADERS = ("vs vLLM's default", "shape", "kernel (tune)", "step from kernels", "decode step",
                      "tokens/s", "prefill", "noise")


def _judged(entry: Judged | None) -> str:
    if not entry or entry.margin_pct is None:
        return "–"
    return f"{entry.margin_pct:+.1f}% ({entry.result})"


def comparison_rows(doc: Mapping | VerifyDocument) -> list[list[str]]:
    rows = []
    for c in typed(doc).comparisons or []:
        kernel = formatted(c.predicted_kernel_margin_pct, "{:+.1f}%")
        if c.predicted_source and c.predicted_kernel_margin_pct is not None:
            kernel += f" ({c.predicted_source})"
        shape = f"b={c.batch} ctx={c.context}"
        if c.missing:
            rows.append([_who(c), shape, kernel, "–", f"not compared: {c.missing}", "–", "–", "–"])
            continue
        e2e = c.end_to_end or Judged()
        rows.append([_who(c), shape, kernel, formatted(c.expected_step_margin_pct, "{:+.1f}%"),
                     _judged(c.decode), _judged(e2e), _judged(c.prefill), formatted(e2e.noise_pct, "{:.1f}%")])
    return rows


# ---------------------------------------------------------------------------------------------
# Terminal


def render_terminal(doc: Mapping | VerifyDocument, console: Console) -> None:
    from rich.table import Table

    doc = typed(doc)
    word, text, flags = headline(doc)
    console.print("[bold]attnsel verify[/bold]: vLLM's own engine, one per candidate")
    for line in context_lines(doc):
        console.print(line, soft_wrap=True)
    for title, headers, rows in (("Engines", ENGINE_HEADERS, engine_rows(doc)),
                                 ("Per shape (median ±spread of the repeats)", SHAPE_HEADERS, shape_rows(doc)),
                                 ("Engine starts of the same pair: start-to-start spread vs within-engine noise",
                                  START_HEADERS, start_rows(doc)),
                                 ("Predicted (kernel) vs observed (engine): gain over vLLM's default",
                                  COMPARISON_HEADERS, comparison_rows(doc))):
        if rows:
            table = Table(title=title, title_justify="left")
            for h in headers:
                table.add_column(h, overflow="fold")
            for row in rows:
                table.add_row(*[str(v) for v in row])
            console.print(table)
    for warning in doc.warnings or []:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    console.print(f"Verdict: [{VERDICT_STYLES.get(word, 'bold')}]{word.upper()}[/] -- {text}", soft_wrap=True)
    if flags is not None:
        console.print(f"  vLLM flags: [bold]{flags or '(none: vLLM default)'}[/bold]")


# ---------------------------------------------------------------------------------------------
# Markdown and HTML


def markdown(doc: Mapping | VerifyDocument, level: int = 1) -> str:
    doc = typed(doc)
    word, text, flags = headline(doc)
    h = "#" * level
    parts = [f"{h} attnsel verify: {word}", "", f"**{word.upper()}** — {text}", ""]
    if flags is not None:
        parts += [f"vLLM flags: `{flags}`" if flags else "vLLM flags: none (vLLM's default)", ""]
    parts += [f"- {line}" for line in context_lines(doc)] + [""]
    for title, headers, rows in (("Engines", ENGINE_HEADERS, engine_rows(doc)),
                                 ("Per shape", SHAPE_HEADERS, shape_rows(doc)),
                                 ("Engine starts", START_HEADERS, start_rows(doc)),
                                 ("Predicted vs observed", COMPARISON_HEADERS, comparison_rows(doc))):
        if rows:
            parts += [f"{h}# {title}", "", table(headers, rows), ""]
    if doc.warnings:
        parts += [f"{h}# Warnings", ""] + [f"- {w}" for w in doc.warnings] + [""]
    return "\n".join(parts).rstrip() + "\n"


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{_html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_section(doc: Mapping | VerifyDocument) -> str:
    doc = typed(doc)
    word, text, flags = headline(doc)
    cls = VERDICT_CLASSES.get(word, "meh")
    parts = [f'<section><h2>attnsel verify: <span class="{cls}">{_html.escape(word)}</span></h2>',
             f"<p>{_html.escape(text)}</p>"]
    if flags is not None:
        parts.append(f"<p>vLLM flags: <code>{_html.escape(flags or 'none (vLLM default)')}</code></p>")
    parts.append("<ul>" + "".join(f"<li>{_html.escape(line)}</li>" for line in context_lines(doc)) + "</ul>")
    for title, headers, rows in (("Engines", ENGINE_HEADERS, engine_rows(doc)),
                                 ("Per shape", SHAPE_HEADERS, shape_rows(doc)),
                                 ("Engine starts", START_HEADERS, start_rows(doc)),
                                 ("Predicted vs observed", COMPARISON_HEADERS, comparison_rows(doc))):
        if rows:
            parts.append(f"<h3>{_html.escape(title)}</h3>{_html_table(headers, rows)}")
    if doc.warnings:
        parts.append("<ul>" + "".join(f"<li>{_html.escape(w)}</li>" for w in doc.warnings) + "</ul>")
    return "".join(parts) + "</section>"


CSV_COLUMNS = ("candidate", "roles", "status", "backend_used", "block_size_used", "shape", "batch", "context",
               "shape_status", "decode_step_ms", "decode_step_spread", "output_tokens_per_s", "prefill_tokens_per_s",
               "requests_fit", "kernel_ms", "attention_share", "kv_cache_tokens", "start_s")


def csv_records(doc: Mapping | VerifyDocument) -> list[dict]:
    """One line per candidate x shape (for spreadsheets)."""
    out = []
    for c in typed(doc).candidates or []:
        e = c.engine or EngineFacts()
        for s in c.shapes or [ShapeResult()]:
            f = s.figures or ShapeFigures()
            step = f.decode_step_ms or Figure()
            out.append({"candidate": c.name, "roles": "+".join(c.roles or []), "status": c.status,
                        "backend_used": e.backend_used, "block_size_used": e.block_size_used,
                        "shape": s.label, "batch": s.batch, "context": s.context,
                        "shape_status": s.status, "decode_step_ms": step.median, "decode_step_spread": step.spread,
                        "output_tokens_per_s": (f.output_tokens_per_s or Figure()).median,
                        "prefill_tokens_per_s": (f.prefill_tokens_per_s or Figure()).median,
                        "requests_fit": s.requests_fit, "kernel_ms": s.kernel_ms,
                        "attention_share": s.attention_share, "kv_cache_tokens": e.kv_cache_tokens,
                        "start_s": c.start_s})
    return out
