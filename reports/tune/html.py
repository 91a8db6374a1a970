"""One self-contained HTML page: inline CSS, inline SVG charts (no JavaScript, no fonts, no CDN),
so it opens offline and can be attached to an issue or a CI artifact.

Charts: median latency vs --block-size per backend for each shape (p20-p80 whiskers) and decode
bandwidth as % of the GPU's peak, drawn in reports/tune/html_charts.py; vLLM's reasons as a backend x
reason matrix, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import pandas as pd

from attnsel.bench.tune import Verdict
from attnsel.reports.cells import formatted
from attnsel.reports.tune import frames as F
from attnsel.reports.tune.html_charts import bandwidth_svg, latency_svg
from attnsel.reports.tune.loaders import ReportData, TuneData

FAIL_COLOUR, PASS_COLOUR = "#c62828", "#2e7d32"

CSS = """
:root { --fg:#1b1f24; --muted:#57606a; --line:#d0d7de; --bg:#ffffff; --soft:#f6f8fa; --accent:#0969da; }
* { box-sizing: border-box; }
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg); background: var(--bg);
       margin: 0 auto; max-width: 1320px; padding: 24px 32px 48px; line-height: 1.45; font-size: 15px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 32px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 16px; margin: 20px 0 8px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.note { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: 8px 12px; margin: 12px 0; }
.warn { background: #fff1e5; border-left: 4px solid #d55e00; padding: 6px 12px; margin: 6px 0; }
.error { background: #ffebe9; border-left: 4px solid #c62828; padding: 8px 12px; margin: 8px 0; }
.cards { display: grid; grid-template-columns: 1.3fr 1fr; gap: 16px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; background: var(--soft); }
.card h3 { margin-top: 0; }
.big { font-size: 22px; font-weight: 600; }
.good { color: #1a7f37; } .meh { color: #9a6700; } .bad { color: #cf222e; }
code, .flags { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; }
.flags { display: block; background: #0d1117; color: #e6edf3; padding: 8px 10px; border-radius: 6px; margin-top: 8px; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13.5px; }
th, td { border: 1px solid var(--line); padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.best { background: #dafbe1; font-weight: 700; }
td.na { color: #8c959f; text-align: center; }
table.kv th { width: 170px; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 8px 10px 4px; background: #fff; }
figcaption { font-weight: 600; font-size: 14px; margin-bottom: 2px; }
svg text { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
.matrix td.hit { background: #ffd8d3; color: #82071e; text-align: center; font-weight: 700; }
.matrix td.ok { background: #dafbe1; color: #116329; text-align: center; font-weight: 700; }
.matrix td.empty { background: #fff; }
.matrix th.reason { max-width: 150px; font-size: 12.5px; }
.log { background: var(--soft); border-left: 4px solid #8c959f; padding: 6px 12px; margin: 6px 0; font-size: 13.5px; }
h1 + p.sub { margin-top: 4px; } body > h1:not(:first-child) { margin-top: 40px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12.5px; }
"""


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def matrix_table(matrix: pd.DataFrame, selected: str | None = None) -> str:
    """backend (x block size) x reason; a red cell where vLLM gives that reason. A backend with
    no reason is valid (green); the one vLLM picks says so."""
    if len(matrix.index) == 0:
        return ""
    head = "".join(f'<th class="reason">{_e(r)}</th>' for r in matrix.columns)
    if not len(matrix.columns):
        head = '<th class="reason">reasons</th>'
    rows = []
    for name, values in matrix.iterrows():
        cells = "".join('<td class="hit">✗</td>' if hit else '<td class="empty"></td>' for hit in values)
        if not len(matrix.columns):
            cells = '<td class="empty">none</td>'
        if values.any():
            verdict = '<td class="hit">refused</td>'
        else:
            verdict = f'<td class="ok">{"selected" if name == selected else "valid"}</td>'
        rows.append(f"<tr><th>{_e(name)}</th>{verdict}{cells}</tr>")
    return f'<table class="matrix"><tr><th>backend</th><th>vLLM</th>{head}</tr>{"".join(rows)}</table>'


def _kv_table(rows: Sequence[tuple[str, str]]) -> str:
    """Rows of (label, already-escaped HTML)."""
    return '<table class="kv">' + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _latency_html_table(frame: pd.DataFrame, label: str) -> str:
    lat = F.latency_table(frame, label)
    status = F.status_table(frame, label)
    if lat.empty:
        return ""
    best = lat.min().min()
    sizes = list(status.columns)
    head = "".join(f'<th>bs {int(s)}</th>' for s in sizes)
    body = []
    for backend in status.index:
        cells = []
        for s in sizes:
            value = lat.loc[backend, s] if backend in lat.index and s in lat.columns else float("nan")
            if pd.notna(value):
                cls = "num best" if value == best else "num"
                cells.append(f'<td class="{cls}">{value:.4f}</td>')
            else:
                cells.append(f'<td class="na" title="{_e(status.loc[backend, s])}">{_e(status.loc[backend, s]) if pd.notna(status.loc[backend, s]) else "–"}</td>')
        body.append(f"<tr><th>{_e(backend)}</th>{''.join(cells)}</tr>")
    return f"<table><tr><th>median ms</th>{head}</tr>{''.join(body)}</table>"


# ---------------------------------------------------------------------------------------------


def render(data: ReportData) -> str:
    title = "attnsel report"
    body: list[str] = []
    if data.tune is not None:
        s = F.tune_summary(data.tune)
        title = f"attnsel tune report · {s['gpu'] or 'GPU'}" + (f" · {s['shape']['model']}" if s["shape"].get("model") else "")
        body.append(tune_html(data.tune, s))
    if data.verify is not None:
        from attnsel.reports import verify_report

        body.append(verify_report.html_section(data.verify))
    for doc in data.explains:
        body.append(explain_html(doc, standalone=data.tune is None))
    sources = ", ".join(_e(s) for s in data.sources)
    body.append(f"<footer>Rendered by <code>attnsel report</code> from {sources}. Self-contained: no scripts, no network.</footer>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def _decision_html(d: dict | None) -> str:
    if not d:
        return "<p>No recommendation: nothing could be compared.</p>"
    verdict = Verdict.read(d["verdict"])
    cls = "good" if verdict is Verdict.FASTER else "meh"
    noise = "" if d["noise_threshold_pct"] is None else f" · noise bar {d['noise_threshold_pct']:.1f}%"
    if not d["flags"] and verdict is not None and verdict.keeps_default and d["default"]:
        # the advice is vLLM's default: it heads the card; tune's fastest pair is a measurement below it
        margin = "" if d["margin_pct"] is None else f", {d['margin_pct']:+.1f}% vs vLLM's default (kernel-level)"
        return (f'<div class="big">keep vLLM\'s default: {_e(d["default"])}</div>'
                f'<p>fastest measured: {_e(d["best"] or "–")}{margin}{noise} · confidence: <b>{_e(d["confidence"])}</b></p>'
                f"<p>{_e(d['advice'])}</p>"
                '<code class="flags"># no flags needed: keep vLLM\'s default</code>')
    margin = "" if d["margin_pct"] is None else (f'<span class="big {cls}">{d["margin_pct"]:+.1f}%</span> vs vLLM\'s '
                                                 "default (kernel-level)")
    if d["flags"]:
        flags = f'<code class="flags">vllm serve … {_e(d["flags"])}</code>'
    elif verdict is Verdict.DEFAULT_NOT_MEASURED and d["best_flags"]:
        flags = f'<code class="flags">vllm serve … {_e(d["best_flags"])}  # fastest measured, no baseline</code>'
    elif verdict is not None and verdict.keeps_default:  # as the Markdown says: "small", "stand-in" too
        flags = '<code class="flags"># no flags needed: keep vLLM\'s default</code>'
    else:
        flags = ""
    return (f'<div class="big">{_e(d["best"] or "–")}</div><p>{margin}{noise} · confidence: <b>{_e(d["confidence"])}</b></p>'
            f"<p>{_e(d['advice'])}</p>{flags}")


def tune_html(tune: TuneData, s: dict) -> str:
    frame = F.rows_frame(tune)
    backends = [b for b in F.BACKEND_ORDER if b in set(frame["backend"])] + sorted(
        set(frame["backend"].dropna()) - set(F.BACKEND_ORDER))
    peak = f"{s['peak_bandwidth']} ({s['peak_bandwidth_source']})" if s["peak_bandwidth"] else "unknown"
    out = _tune_heading(s)
    out.append('<div class="cards"><div class="card"><h3>Recommendation (all workloads, weighted)</h3>'
               f'{_decision_html(s["overall"])}</div><div class="card"><h3>Environment</h3>'
               f'{_kv_table(_environment_rows(s, peak))}</div></div>')
    if s["per_kind"]:
        out.append(_per_kind_table(s["per_kind"]))
    for warning in s["warnings"]:
        out.append(f'<div class="warn">⚠ {_e(warning)}</div>')
    out += _tune_charts(frame, backends, peak)
    out += _not_timed_and_failed(tune, frame)
    tables = "".join(f"<h3>{_e(label)}</h3>{_latency_html_table(frame, label)}" for _k, label in F.workloads(frame))
    out.append(f"<h2>Tables per workload</h2>{tables}")
    return "".join(out)


def _tune_heading(s: dict) -> list[str]:
    """Title, the shape that was timed, the run's note, and a warning when tune.json is missing."""
    out = [f"<h1>{_e('attnsel tune report')}: {_e(s['gpu'] or 'GPU')}</h1>"]
    shape = s["shape"]
    if shape:
        model = f"{shape.get('model')}, TP={shape.get('tensor_parallel_size', 1)} · " if shape.get("model") else ""
        out.append(f'<p class="sub">{_e(model)}head size {_e(shape.get("head_size"))}, {_e(shape.get("num_q_heads"))} query / '
                   f'{_e(shape.get("num_kv_heads"))} KV heads per GPU · {_e(shape.get("dtype"))} · kv cache {_e(shape.get("kv_cache_dtype"))} · '
                   f'{_e(s["timing_mode"])} · grid {_e(s["grid"])}</p>')
    if s["note"]:
        out.append(f'<div class="note"><b>Note:</b> {_e(s["note"])}</div>')
    if not s["complete"]:
        out.append('<div class="note"><b>Partial results:</b> tune.json is missing (the sweep was cut short); the advice is '
                   "recomputed from results.jsonl and vLLM's default is unknown.</div>")
    return out


def _environment_rows(s: dict, peak: str) -> list[tuple[str, str]]:
    """The Environment card: GPU, peak bandwidth, driver/CUDA/library versions, vLLM's default, rows."""
    env = [f"driver {s['driver']}" if s["driver"] else None, f"CUDA {s['cuda']}" if s["cuda"] else None]
    env += [f"{k} {v}" for k, v in s["versions"].items()]
    gpu = f"{s['gpu'] or '–'}" + (f" (CC {s['capability']})" if s["capability"] else "")
    if s["memory_gib"]:
        gpu += f", {s['memory_gib']:.0f} GiB"
    kv = [("GPU", _e(gpu)), ("Peak bandwidth", _e(peak)), ("Environment", _e(", ".join(e for e in env if e) or "–")),
          ("vLLM's default", f"<code>{_e(s['vllm_default'] or 'unknown')}</code>"),
          ("Rows", _e(", ".join(f"{n} {k}" for k, n in sorted(s["statuses"].items()))))]
    if s["created"]:
        kv.append(("Measured", _e(s["created"]) + (f" ({s['elapsed_s']:.0f} s)" if s.get("elapsed_s") else "")))
    return kv


def _per_kind_table(per_kind: list[dict]) -> str:
    rows = "".join(
        f"<tr><td>{_e(d['scope'])}</td><td><code>{_e(d['best'] or '–')}</code></td>"
        f"<td class='num'>{formatted(d['margin_pct'], '{:+.1f}%')}</td>"
        f"<td class='num'>{formatted(d['noise_threshold_pct'], '{:.1f}%')}</td>"
        f"<td>{_e(d['confidence'])}</td><td><code>{_e(d['flags'] or '')}</code></td></tr>" for d in per_kind)
    return ("<h3>Per workload kind</h3><table><tr><th>kind</th><th>fastest</th><th>vs default (kernel-level)</th>"
            f"<th>noise bar</th><th>confidence</th><th>flags</th></tr>{rows}</table><p class=\"sub\">{_e(F.KERNEL_LEVEL_NOTE)}</p>")


def _tune_charts(frame: pd.DataFrame, backends: list[str], peak: str) -> list[str]:
    """Latency vs block size per shape, then decode bandwidth as % of peak (each only with data)."""
    out = []
    figures = []
    for _kind, label in F.workloads(frame):
        svg = latency_svg(frame, label, backends)
        if svg:
            figures.append(f"<figure><figcaption>{_e(label)}</figcaption>{svg}</figure>")
    if figures:
        out.append('<h2>Latency vs block size</h2><p class="sub">Median of cold-L2 timings per call; whiskers: p20–p80; '
                   f'lower is better.</p><div class="charts">{"".join(figures)}</div>')
    bw = bandwidth_svg(F.best_bandwidth(frame), backends)
    if bw:
        out.append(f"<h2>Decode bandwidth, % of peak</h2><p class=\"sub\">Best block size per backend; peak = {_e(peak)}.</p>"
                   f"<figure>{bw}</figure>")
    return out


def _not_timed_and_failed(tune: TuneData, frame: pd.DataFrame) -> list[str]:
    """What vLLM's rules skipped (with its reasons) and the rows that failed (never recommended)."""
    out = []
    skipped = F.skipped_configs(tune)
    if not skipped.empty:
        entries = [(f"{r.backend} · bs {r.block_size}", list(r.reasons)) for r in skipped.itertuples()]
        out.append("<h2>Not timed: vLLM's reasons</h2>" + matrix_table(F.reason_matrix(entries)))
    problems = F.problems_frame(frame)
    if not problems.empty:
        rows = "".join(f"<tr><td>{_e(r.backend)}</td><td class='num'>{_e(r.block_size)}</td><td>{_e(r.workload)}</td>"
                       f"<td>{_e(r.status)}</td><td>{_e((r.error or '')[:300])}</td></tr>" for r in problems.itertuples())
        out.append("<h2>Failed rows (never recommended)</h2><table><tr><th>backend</th><th>--block-size</th><th>shape</th>"
                   f"<th>status</th><th>error</th></tr>{rows}</table>")
    return out


def explain_html(doc: dict, standalone: bool = True) -> str:
    s = F.explain_summary(doc)
    tag = "h1" if standalone else "h2"
    out = [f"<{tag}>attnsel explain: {_e(s['gpu'] or 'GPU')} (CC {_e(s['capability'])})</{tag}>"]
    i = s["inputs"]
    out.append(f'<p class="sub">rule profile {_e(s["profile"])} · model {_e(s["model"] or "–")} · head_size {_e(i.get("head_size"))}, '
               f'{_e(i.get("dtype"))}, kv cache {_e(i.get("kv_cache_dtype"))}, --block-size {_e(i.get("block_size") or "auto")}</p>')
    if s["error"]:
        out.append(f'<div class="error"><b>vLLM raises {_e(s["error_type"])}:</b> {_e(s["error"])}</div>')
    else:
        flags = " ".join(s["vllm_args"]) or "no flags needed (vLLM's own choice)"
        out.append(f'<div class="card"><div class="big">vLLM selects {_e(s["selected"])}</div>'
                   f'<p>KV block size {_e(s["block_size"])} (kernel block {_e(s["kernel_block_size"])})</p>'
                   f'<code class="flags">{_e(flags)}</code></div>')
    out.append("<h3>Backend × vLLM's reason</h3>" + matrix_table(F.explain_matrix(doc), selected=s["selected"]))
    for warning in s["warnings"]:
        out.append(f'<div class="log">vLLM logs: {_e(warning)}</div>')
    return "".join(out)
