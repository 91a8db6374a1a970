"""Render a verify.json (bench/verify/run.py): the verdict on tune's recommendation with the flags to
paste, the engines vLLM really started, each shape's figures, and predicted (kernel) vs observed
(engine) margins. Terminal (rich), Markdown and an HTML section share the same table data.
Renders only: every number and word comes from the document; nothing is recomputed here.
"""

from __future__ import annotations

import html as _html
from typing import Any, Optional, Sequence

from attnsel.bench.tune import advised_flags
from attnsel.bench.verify import EngineVerdict
from attnsel.reports.cells import formatted

SCHEMA = "attnsel-verify/1"  # bench/verify/run.py SCHEMA
VERDICT_STYLES = {EngineVerdict.HOLDS: "bold green", EngineVerdict.WITHIN_NOISE: "bold yellow",
                  EngineVerdict.REVERSED: "bold red", EngineVerdict.NOT_MEASURED: "bold red"}
VERDICT_CLASSES = {EngineVerdict.HOLDS: "good", EngineVerdict.REVERSED: "bad"}  # HTML; others "meh"


def _figure(fig: Optional[dict], fmt: str) -> str:
    """median (±spread%) of a figure from bench/engine_compare.shape_figures."""
    if not fig or fig.get("median") is None:
        return "–"
    spread = fig.get("spread")
    return fmt.format(fig["median"]) + ("" if spread is None else f" ±{spread * 100:.1f}%")


def _who(entry: dict) -> str:
    return entry.get("short") or entry.get("name") or entry.get("candidate") or "?"


def _gib(value: Any) -> str:
    return "–" if not value else f"{value / 1024 ** 3:.1f}"


def headline(doc: dict) -> tuple[str, str, Optional[str]]:
    """(verdict word, sentence, flags to paste or None)."""
    verdict = doc.get("verdict") or {}
    word = verdict.get("verdict") or EngineVerdict.NOT_MEASURED
    flags = verdict.get("flags")
    return word, verdict.get("text") or "no verdict (the run did not finish)", flags


def context_lines(doc: dict) -> list[str]:
    model, gpu, vllm, opts = doc.get("model") or {}, doc.get("gpu") or {}, doc.get("vllm") or {}, doc.get("options") or {}
    versions = sorted({(c.get("engine") or {}).get("vllm_version") for c in doc.get("candidates") or []} - {None})
    lines = [f"model {model.get('name')} ({model.get('model_type')}, {model.get('attention_layers')} attention layers"
             + (", hybrid" if model.get("is_hybrid") else "") + f", TP={model.get('tensor_parallel_size')})"
             f" · GPU {gpu.get('name')} ({_gib(gpu.get('memory_total_bytes'))} GiB, {_gib(gpu.get('memory_used_bytes'))} GiB in use at start)",
             f"vLLM {', '.join(versions) or vllm.get('installed_version') or '?'} · rules {vllm.get('rule_profile')} · "
             f"dummy weights, prefix caching off, vLLM's default CUDA graphs and torch.compile · "
             f"gpu_memory_utilization {opts.get('gpu_memory_utilization')} · max_model_len {opts.get('max_model_len')}",
             f"decode per step = (T(N2) - T(N1)) / (N2 - N1), same prompts, one warm-up call per shape, "
             f"{opts.get('repeats')} ABBA pairs; tokens/s = batch x N2 / T(N2): prompts of the shape's context, "
             f"N2 generated tokens each, prefill included; prefill tok/s = batch x prompt / time to the batch's first tokens"]
    tune = doc.get("tune")
    if tune:
        margin = "" if tune.get("margin_pct") is None else f" ({tune['margin_pct']:+.1f}% at kernel level, {tune.get('verdict')})"
        said = advised_flags(tune) or f"keep vLLM's default (fastest measured: {tune.get('flags')})"
        lines.append(f"checks tune's {tune.get('scope')} recommendation from {tune.get('source')}: {said}{margin}")
    return lines


ENGINE_HEADERS = ("candidate", "status", "vLLM ran", "start s", "compile s", "graphs s", "KV tokens",
                  "GPU blocks", "CUDA graphs")


def engine_rows(doc: dict) -> list[list[str]]:
    rows = []
    for c in doc.get("candidates") or []:
        e = c.get("engine") or {}
        status = c.get("status") or "?"
        if c.get("error"):
            status += f": {c['error']}"
        ran = f"{e['backend_used']}/{e.get('block_size_used')}" if e.get("backend_used") else "–"
        compile_s = formatted(e.get("torch_compile_s"), "{:.1f}") + (f" ({e['compile_cache']})" if e.get("compile_cache") else "")
        start = formatted(c.get("start_s"), "{:.1f}")
        if e.get("flashinfer_autotune_s"):  # FlashInfer's autotuner, inside vLLM's kernel warm-up
            start += f" (autotune {e['flashinfer_autotune_s']:.0f})"
        rows.append([_who(c), status, ran, start, compile_s,
                     formatted(e.get("graph_capture_s"), "{:.0f}"), formatted(e.get("kv_cache_tokens"), "{:,}"),
                     formatted(e.get("num_gpu_blocks"), "{:,}"), e.get("cudagraph_mode") or "–"])
    return rows


SHAPE_HEADERS = ("candidate", "shape", "N1/N2", "status", "decode ms/step", "tokens/s", "prefill tok/s", "fit",
                 "kernel µs", "attn share")


def shape_rows(doc: dict) -> list[list[str]]:
    rows = []
    for c in doc.get("candidates") or []:
        for s in c.get("shapes") or []:
            f = s.get("figures") or {}
            status = s.get("status") or "?"
            if status != "ok" and s.get("error"):
                status += f": {s['error']}"
            label = f"b={s['batch']} ctx={s['context']}" if s.get("batch") else "–"
            steps = f"{s['n1']}/{s['n2']}" if s.get("n1") else "–"
            rows.append([_who(c), label, steps, status, _figure(f.get("decode_step_ms"), "{:.2f}"),
                         _figure(f.get("output_tokens_per_s"), "{:,.0f}"), _figure(f.get("prefill_tokens_per_s"), "{:,.0f}"),
                         formatted(s.get("requests_fit"), "{:,}"), formatted(s.get("kernel_ms") and s["kernel_ms"] * 1e3, "{:.1f}"),
                         formatted(s.get("attention_share") and s["attention_share"] * 100, "{:.0f}%")])
    return rows


COMPARISON_HEADERS = ("vs vLLM's default", "shape", "kernel (tune)", "step from kernels", "decode step",
                      "tokens/s", "prefill", "noise")


def _judged(entry: Optional[dict]) -> str:
    if not entry or entry.get("margin_pct") is None:
        return "–"
    return f"{entry['margin_pct']:+.1f}% ({entry['result']})"


def comparison_rows(doc: dict) -> list[list[str]]:
    rows = []
    for c in doc.get("comparisons") or []:
        kernel = formatted(c.get("predicted_kernel_margin_pct"), "{:+.1f}%")
        if c.get("predicted_source") and c.get("predicted_kernel_margin_pct") is not None:
            kernel += f" ({c['predicted_source']})"
        shape = f"b={c['batch']} ctx={c['context']}"
        if c.get("missing"):
            rows.append([_who(c), shape, kernel, "–", f"not compared: {c['missing']}", "–", "–", "–"])
            continue
        e2e = c.get("end_to_end") or {}
        rows.append([_who(c), shape, kernel, formatted(c.get("expected_step_margin_pct"), "{:+.1f}%"),
                     _judged(c.get("decode")), _judged(e2e), _judged(c.get("prefill")), formatted(e2e.get("noise_pct"), "{:.1f}%")])
    return rows


# ---------------------------------------------------------------------------------------------
# Terminal


def render_terminal(doc: dict, console) -> None:
    from rich.table import Table

    word, text, flags = headline(doc)
    console.print("[bold]attnsel verify[/bold]: vLLM's own engine, one per candidate")
    for line in context_lines(doc):
        console.print(line, soft_wrap=True)
    for title, headers, rows in (("Engines", ENGINE_HEADERS, engine_rows(doc)),
                                 ("Per shape (median ±spread of the repeats)", SHAPE_HEADERS, shape_rows(doc)),
                                 ("Predicted (kernel) vs observed (engine): gain over vLLM's default",
                                  COMPARISON_HEADERS, comparison_rows(doc))):
        if rows:
            table = Table(title=title, title_justify="left")
            for h in headers:
                table.add_column(h, overflow="fold")
            for row in rows:
                table.add_row(*[str(v) for v in row])
            console.print(table)
    for warning in doc.get("warnings") or []:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    console.print(f"Verdict: [{VERDICT_STYLES.get(EngineVerdict.read(word), 'bold')}]{word.upper()}[/] -- {text}", soft_wrap=True)
    if flags is not None:
        console.print(f"  vLLM flags: [bold]{flags or '(none: vLLM default)'}[/bold]")


# ---------------------------------------------------------------------------------------------
# Markdown and HTML


def markdown(doc: dict, level: int = 1) -> str:
    from attnsel.reports.tune.markdown import table

    word, text, flags = headline(doc)
    h = "#" * level
    parts = [f"{h} attnsel verify: {word}", "", f"**{word.upper()}** — {text}", ""]
    if flags is not None:
        parts += [f"vLLM flags: `{flags}`" if flags else "vLLM flags: none (vLLM's default)", ""]
    parts += [f"- {line}" for line in context_lines(doc)] + [""]
    for title, headers, rows in (("Engines", ENGINE_HEADERS, engine_rows(doc)),
                                 ("Per shape", SHAPE_HEADERS, shape_rows(doc)),
                                 ("Predicted vs observed", COMPARISON_HEADERS, comparison_rows(doc))):
        if rows:
            parts += [f"{h}# {title}", "", table(headers, rows), ""]
    if doc.get("warnings"):
        parts += [f"{h}# Warnings", ""] + [f"- {w}" for w in doc["warnings"]] + [""]
    return "\n".join(parts).rstrip() + "\n"


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_section(doc: dict) -> str:
    word, text, flags = headline(doc)
    cls = VERDICT_CLASSES.get(EngineVerdict.read(word), "meh")
    parts = [f'<section><h2>attnsel verify: <span class="{cls}">{_html.escape(word)}</span></h2>',
             f"<p>{_html.escape(text)}</p>"]
    if flags is not None:
        parts.append(f"<p>vLLM flags: <code>{_html.escape(flags or 'none (vLLM default)')}</code></p>")
    parts.append("<ul>" + "".join(f"<li>{_html.escape(line)}</li>" for line in context_lines(doc)) + "</ul>")
    for title, headers, rows in (("Engines", ENGINE_HEADERS, engine_rows(doc)),
                                 ("Per shape", SHAPE_HEADERS, shape_rows(doc)),
                                 ("Predicted vs observed", COMPARISON_HEADERS, comparison_rows(doc))):
        if rows:
            parts.append(f"<h3>{_html.escape(title)}</h3>{_html_table(headers, rows)}")
    if doc.get("warnings"):
        parts.append("<ul>" + "".join(f"<li>{_html.escape(w)}</li>" for w in doc["warnings"]) + "</ul>")
    return "".join(parts) + "</section>"


CSV_COLUMNS = ("candidate", "roles", "status", "backend_used", "block_size_used", "shape", "batch", "context",
               "shape_status", "decode_step_ms", "decode_step_spread", "output_tokens_per_s", "prefill_tokens_per_s",
               "requests_fit", "kernel_ms", "attention_share", "kv_cache_tokens", "start_s")


def csv_records(doc: dict) -> list[dict]:
    """One line per candidate x shape (for spreadsheets)."""
    out = []
    for c in doc.get("candidates") or []:
        e = c.get("engine") or {}
        for s in c.get("shapes") or [{}]:
            f = s.get("figures") or {}
            step = f.get("decode_step_ms") or {}
            out.append({"candidate": c.get("name"), "roles": "+".join(c.get("roles") or []), "status": c.get("status"),
                        "backend_used": e.get("backend_used"), "block_size_used": e.get("block_size_used"),
                        "shape": s.get("label"), "batch": s.get("batch"), "context": s.get("context"),
                        "shape_status": s.get("status"), "decode_step_ms": step.get("median"),
                        "decode_step_spread": step.get("spread"),
                        "output_tokens_per_s": (f.get("output_tokens_per_s") or {}).get("median"),
                        "prefill_tokens_per_s": (f.get("prefill_tokens_per_s") or {}).get("median"),
                        "requests_fit": s.get("requests_fit"), "kernel_ms": s.get("kernel_ms"),
                        "attention_share": s.get("attention_share"), "kv_cache_tokens": e.get("kv_cache_tokens"),
                        "start_s": c.get("start_s")})
    return out
