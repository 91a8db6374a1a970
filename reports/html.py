"""One self-contained HTML page: inline CSS, inline SVG charts drawn here (no JavaScript, no
fonts, no CDN), so it opens offline and can be attached to an issue or a CI artifact.

Charts: median latency vs --block-size per backend for each shape (p20-p80 whiskers), decode
bandwidth as % of the GPU's peak, and vLLM's reasons as a backend x reason matrix.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any, Optional, Sequence

import pandas as pd

from attnsel.reports import frames as F
from attnsel.reports.loaders import ReportData, TuneData

# Okabe-Ito colours (readable with colour-vision deficiencies), plus a marker shape per backend.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
MARKERS = ["circle", "square", "triangle", "diamond"]
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


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def colour_for(backend: str, order: Sequence[str]) -> str:
    return PALETTE[list(order).index(backend) % len(PALETTE)] if backend in order else PALETTE[-1]


def _marker(shape: str, x: float, y: float, colour: str, title: str) -> str:
    t = f"<title>{_e(title)}</title>"
    if shape == "square":
        return f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{colour}">{t}</rect>'
    if shape == "triangle":
        return f'<polygon points="{x:.1f},{y - 5:.1f} {x - 5:.1f},{y + 4:.1f} {x + 5:.1f},{y + 4:.1f}" fill="{colour}">{t}</polygon>'
    if shape == "diamond":
        return f'<polygon points="{x:.1f},{y - 5.5:.1f} {x + 5.5:.1f},{y:.1f} {x:.1f},{y + 5.5:.1f} {x - 5.5:.1f},{y:.1f}" fill="{colour}">{t}</polygon>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{colour}">{t}</circle>'


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top` (1, 2, 2.5, 5 x 10^k steps)."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [round(i * step, 10) for i in range(int(math.ceil(top / step)) + 1)]


# When the slowest point is more than this many times the fastest (FlexAttention runs 20-50x
# slower than the others on an H200), a linear axis flattens every other backend onto zero.
LOG_SCALE_RATIO = 10.0


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks spanning [low, high] on a log axis.

    >>> log_ticks(0.013, 4.5)
    [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]
    """
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks = [round(m * 10.0 ** e, 12) for e in range(first, last + 1) for m in (1, 2, 5)]
    lower = max(t for t in ticks if t <= low)
    upper = min(t for t in ticks if t >= high)
    return [t for t in ticks if lower <= t <= upper]


def _tick_label(value: float) -> str:
    return f"{value:g}" if value >= 0.01 or value == 0 else f"{value:.1e}"


def latency_svg(frame: pd.DataFrame, label: str, backends: Sequence[str], width: int = 600, height: int = 300) -> str:
    """Median latency (y, ms, from 0; log scale when the points span more than LOG_SCALE_RATIO)
    vs --block-size (x, one slot per size) per backend; whiskers p20-p80; the fastest point circled."""
    sub = frame[(frame["workload"] == label) & (frame["status"] == "ok") & frame["median_ms"].notna()]
    if sub.empty:
        return ""
    sizes = sorted(int(s) for s in frame.loc[frame["workload"] == label, "block_size"].dropna().unique())
    left, right, top, bottom = 58, 150, 14, 42
    plot_w, plot_h = width - left - right, height - top - bottom
    high = float(sub["p80_ms"].fillna(sub["median_ms"]).max())
    low = float(sub["p20_ms"].fillna(sub["median_ms"]).min())
    log_scale = low > 0 and high / low > LOG_SCALE_RATIO
    if log_scale:
        ticks = log_ticks(low, high)
        lo_log, hi_log = math.log10(ticks[0]), math.log10(ticks[-1])
    else:
        ticks = nice_ticks(high * 1.05)
    y_max = ticks[-1]

    def x_of(size: int) -> float:
        return left + (sizes.index(size) + 0.5) * plot_w / len(sizes)

    def y_of(value: float) -> float:
        if log_scale:
            return top + plot_h * (1 - (math.log10(max(value, ticks[0])) - lo_log) / (hi_log - lo_log))
        return top + plot_h * (1 - value / y_max)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
             f'aria-label="{_e(label)}: median latency vs block size">']
    for t in ticks:
        y = y_of(t)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eaeef2"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#57606a">{_tick_label(t)}</text>')
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#8c959f"/>')
    for size in sizes:
        parts.append(f'<text x="{x_of(size):.1f}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle" fill="#57606a">{size}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" font-size="12" text-anchor="middle" fill="#1b1f24">--block-size</text>')
    parts.append(f'<text x="14" y="{top + plot_h / 2:.1f}" font-size="12" text-anchor="middle" fill="#1b1f24" '
                 f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">median latency (ms{", log scale" if log_scale else ""})</text>')
    best = sub.loc[sub["median_ms"].idxmin()]
    legend_y = top + 6
    for i, backend in enumerate(b for b in backends if b in set(sub["backend"])):
        colour, shape = colour_for(backend, backends), MARKERS[backends.index(backend) % len(MARKERS)]
        points = sub[sub["backend"] == backend].sort_values("block_size")
        coords = [(x_of(int(r.block_size)), y_of(r.median_ms)) for r in points.itertuples()]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for r, (x, y) in zip(points.itertuples(), coords):
            if pd.notna(r.p20_ms) and pd.notna(r.p80_ms):
                parts.append(f'<line x1="{x:.1f}" y1="{y_of(r.p20_ms):.1f}" x2="{x:.1f}" y2="{y_of(r.p80_ms):.1f}" '
                             f'stroke="{colour}" stroke-width="1.2"/>')
            parts.append(_marker(shape, x, y, colour, f"{backend} --block-size {int(r.block_size)}: {r.median_ms:.4f} ms"))
        ly = legend_y + i * 20
        lx = left + plot_w + 14
        parts.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 18}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        parts.append(_marker(shape, lx + 9, ly, colour, backend))
        parts.append(f'<text x="{lx + 24}" y="{ly + 4}" font-size="11.5" fill="#1b1f24">{_e(backend)}</text>')
    bx, by = x_of(int(best["block_size"])), y_of(best["median_ms"])
    parts.append(f'<circle cx="{bx:.1f}" cy="{by:.1f}" r="9" fill="none" stroke="#1b1f24" stroke-width="1.5"/>')
    ly = legend_y + len(set(sub["backend"])) * 20 + 8
    parts.append(f'<circle cx="{left + plot_w + 23}" cy="{ly}" r="7" fill="none" stroke="#1b1f24" stroke-width="1.5"/>')
    parts.append(f'<text x="{left + plot_w + 38}" y="{ly + 4}" font-size="11.5" fill="#1b1f24">fastest</text>')
    parts.append("</svg>")
    return "".join(parts)


def bandwidth_svg(best: pd.DataFrame, backends: Sequence[str], width: int = 1240) -> str:
    """Horizontal bars: achieved bandwidth as % of peak, per decode shape and backend (its best
    block size), on a 0-100% axis."""
    decode = best[best["kind"] == "decode"]
    if decode.empty:
        return ""
    shapes = list(dict.fromkeys(decode["workload"]))
    bar_h, gap, group_gap = 16, 3, 16
    left, right, top = 190, 170, 26
    per_group = [decode[decode["workload"] == s] for s in shapes]
    height = top + sum(len(g) * (bar_h + gap) + group_gap for g in per_group) + 24
    plot_w = width - left - right

    def x_of(pct: float) -> float:
        return left + plot_w * min(max(pct, 0.0), 110.0) / 110.0

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
             'aria-label="decode bandwidth as percent of peak">']
    for pct in (0, 25, 50, 75, 100):
        x = x_of(pct)
        parts.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 20}" stroke="{"#8c959f" if pct in (0, 100) else "#eaeef2"}"/>')
        parts.append(f'<text x="{x:.1f}" y="{top - 10}" font-size="11" text-anchor="middle" fill="#57606a">{pct}%</text>')
    y = top
    for shape, group in zip(shapes, per_group):
        group_top = y
        for r in group.itertuples():
            colour = colour_for(r.backend, backends)
            x_end = x_of(r.pct_of_peak)
            title = f"{r.backend} --block-size {int(r.block_size)}: {r.pct_of_peak:.1f}% of peak ({r.bandwidth_tb_s:.2f} TB/s)"
            parts.append(f'<rect x="{left}" y="{y}" width="{x_end - left:.1f}" height="{bar_h}" fill="{colour}" rx="2">'
                         f'<title>{_e(title)}</title></rect>')
            parts.append(f'<text x="{x_end + 5:.1f}" y="{y + 12}" font-size="11" fill="#1b1f24">{r.pct_of_peak:.1f}% '
                         f'· {_e(r.backend)} bs {int(r.block_size)}</text>')
            y += bar_h + gap
        mid = (group_top + y - gap) / 2
        parts.append(f'<text x="{left - 10}" y="{mid + 4:.1f}" font-size="12" text-anchor="end" fill="#1b1f24">{_e(shape)}</text>')
        y += group_gap
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" font-size="12" text-anchor="middle" fill="#1b1f24">'
                 "achieved memory bandwidth, % of the GPU's peak</text>")
    parts.append("</svg>")
    return "".join(parts)


def matrix_table(matrix: pd.DataFrame, selected: Optional[str] = None) -> str:
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


def _pct(value: Optional[float], fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def _decision_html(d: Optional[dict]) -> str:
    if not d:
        return "<p>No recommendation: nothing could be compared.</p>"
    cls = "good" if d["verdict"] == "faster" else "meh"
    margin = "" if d["margin_pct"] is None else f'<span class="big {cls}">{d["margin_pct"]:+.1f}%</span> vs vLLM\'s default'
    noise = "" if d["noise_threshold_pct"] is None else f" · noise bar {d['noise_threshold_pct']:.1f}%"
    if d["flags"]:
        flags = f'<code class="flags">vllm serve … {_e(d["flags"])}</code>'
    elif d["verdict"] == "default not measured" and d["best_flags"]:
        flags = f'<code class="flags">vllm serve … {_e(d["best_flags"])}  # fastest measured, no baseline</code>'
    elif d["verdict"] in ("noisy", "default is fastest"):
        flags = '<code class="flags"># no flags needed: keep vLLM\'s default</code>'
    else:
        flags = ""
    return (f'<div class="big">{_e(d["best"] or "–")}</div><p>{margin}{noise} · confidence: <b>{_e(d["confidence"])}</b></p>'
            f"<p>{_e(d['advice'])}</p>{flags}")


def tune_html(tune: TuneData, s: dict) -> str:
    frame = F.rows_frame(tune)
    backends = [b for b in F.BACKEND_ORDER if b in set(frame["backend"])] + sorted(
        set(frame["backend"].dropna()) - set(F.BACKEND_ORDER))
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
    env = [f"driver {s['driver']}" if s["driver"] else None, f"CUDA {s['cuda']}" if s["cuda"] else None]
    env += [f"{k} {v}" for k, v in s["versions"].items()]
    gpu = f"{s['gpu'] or '–'}" + (f" (CC {s['capability']})" if s["capability"] else "")
    if s["memory_gib"]:
        gpu += f", {s['memory_gib']:.0f} GiB"
    peak = f"{s['peak_bandwidth']} ({s['peak_bandwidth_source']})" if s["peak_bandwidth"] else "unknown"
    kv = [("GPU", _e(gpu)), ("Peak bandwidth", _e(peak)), ("Environment", _e(", ".join(e for e in env if e) or "–")),
          ("vLLM's default", f"<code>{_e(s['vllm_default'] or 'unknown')}</code>"),
          ("Rows", _e(", ".join(f"{n} {k}" for k, n in sorted(s["statuses"].items()))))]
    if s["created"]:
        kv.append(("Measured", _e(s["created"]) + (f" ({s['elapsed_s']:.0f} s)" if s.get("elapsed_s") else "")))
    out.append('<div class="cards"><div class="card"><h3>Recommendation (all workloads, weighted)</h3>'
               f'{_decision_html(s["overall"])}</div><div class="card"><h3>Environment</h3>{_kv_table(kv)}</div></div>')
    if s["per_kind"]:
        rows = "".join(
            f"<tr><td>{_e(d['scope'])}</td><td><code>{_e(d['best'] or '–')}</code></td>"
            f"<td class='num'>{_pct(d['margin_pct'], '{:+.1f}%')}</td>"
            f"<td class='num'>{_pct(d['noise_threshold_pct'], '{:.1f}%')}</td>"
            f"<td>{_e(d['confidence'])}</td><td><code>{_e(d['flags'] or '')}</code></td></tr>" for d in s["per_kind"])
        out.append("<h3>Per workload kind</h3><table><tr><th>kind</th><th>fastest</th><th>vs default</th><th>noise bar</th>"
                   f"<th>confidence</th><th>flags</th></tr>{rows}</table>")
    for warning in s["warnings"]:
        out.append(f'<div class="warn">⚠ {_e(warning)}</div>')
    figures = []
    for kind, label in F.workloads(frame):
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
    tables = "".join(f"<h3>{_e(label)}</h3>{_latency_html_table(frame, label)}" for _k, label in F.workloads(frame))
    out.append(f"<h2>Tables per workload</h2>{tables}")
    return "".join(out)


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
        flags = " ".join(s["vllm_args"])
        out.append(f'<div class="card"><div class="big">vLLM selects {_e(s["selected"])}</div>'
                   f'<p>KV block size {_e(s["block_size"])} (kernel block {_e(s["kernel_block_size"])})</p>'
                   f'<code class="flags">{_e(flags)}</code></div>')
    out.append("<h3>Backend × vLLM's reason</h3>" + matrix_table(F.explain_matrix(doc), selected=s["selected"]))
    for warning in s["warnings"]:
        out.append(f'<div class="log">vLLM logs: {_e(warning)}</div>')
    return "".join(out)
