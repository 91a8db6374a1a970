"""The inline SVG charts of the HTML report (reports/tune/html.py): median latency vs --block-size per
backend for each shape, and decode bandwidth as % of the GPU's peak. No JavaScript, no fonts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import pandas as pd

from attnsel.bench.plan.workloads import WorkloadKind
from attnsel.bench.sweep.results import RowStatus

# Okabe-Ito colours (readable with colour-vision deficiencies), plus a marker shape per backend.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
MARKERS = ["circle", "square", "triangle", "diamond"]


def _e(value: object) -> str:
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
    return [round(i * step, 10) for i in range(math.ceil(top / step) + 1)]


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
    sub = frame[(frame["workload"] == label) & (frame["status"] == RowStatus.OK) & frame["median_ms"].notna()]
    if sub.empty:
        return ""
    sizes = sorted(int(s) for s in frame.loc[frame["workload"] == label, "block_size"].dropna().unique())
    axes = _latency_axes(sub, sizes, width, height)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
             f'aria-label="{_e(label)}: median latency vs block size">']
    parts += _latency_grid(axes, height)
    for i, backend in enumerate(b for b in backends if b in set(sub["backend"])):
        colour, shape = colour_for(backend, backends), MARKERS[backends.index(backend) % len(MARKERS)]
        parts += _latency_series(axes, sub[sub["backend"] == backend].sort_values("block_size"), backend, colour, shape)
        parts += _legend_entry(axes, axes.top + 6 + i * 20, backend, colour, shape)
    parts += _fastest_mark(axes, sub)
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class _LatencyAxes:
    """Where a block size and a latency land on the latency chart."""

    sizes: list[int]
    ticks: list[float]
    log_scale: bool
    left: int
    top: int
    plot_w: int
    plot_h: int

    def x_of(self, size: int) -> float:
        return self.left + (self.sizes.index(size) + 0.5) * self.plot_w / len(self.sizes)

    def y_of(self, value: float) -> float:
        if self.log_scale:
            lo_log, hi_log = math.log10(self.ticks[0]), math.log10(self.ticks[-1])
            return self.top + self.plot_h * (1 - (math.log10(max(value, self.ticks[0])) - lo_log) / (hi_log - lo_log))
        return self.top + self.plot_h * (1 - value / self.ticks[-1])


def _latency_axes(sub: pd.DataFrame, sizes: list[int], width: int, height: int) -> _LatencyAxes:
    """A log axis when the p20..p80 span is wider than LOG_SCALE_RATIO, else a linear one from 0."""
    left, right, top, bottom = 58, 150, 14, 42
    high = float(sub["p80_ms"].fillna(sub["median_ms"]).max())
    low = float(sub["p20_ms"].fillna(sub["median_ms"]).min())
    log_scale = low > 0 and high / low > LOG_SCALE_RATIO
    ticks = log_ticks(low, high) if log_scale else nice_ticks(high * 1.05)
    return _LatencyAxes(sizes, ticks, log_scale, left, top, width - left - right, height - top - bottom)


def _latency_grid(ax: _LatencyAxes, height: int) -> list[str]:
    """Tick lines and labels, the x axis with one label per block size, the axis titles."""
    left, top, plot_w, plot_h = ax.left, ax.top, ax.plot_w, ax.plot_h
    parts = []
    for t in ax.ticks:
        y = ax.y_of(t)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eaeef2"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#57606a">{_tick_label(t)}</text>')
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#8c959f"/>')
    for size in ax.sizes:
        parts.append(f'<text x="{ax.x_of(size):.1f}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle" fill="#57606a">{size}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" font-size="12" text-anchor="middle" fill="#1b1f24">--block-size</text>')
    parts.append(f'<text x="14" y="{top + plot_h / 2:.1f}" font-size="12" text-anchor="middle" fill="#1b1f24" '
                 f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">median latency (ms{", log scale" if ax.log_scale else ""})</text>')
    return parts


def _latency_series(ax: _LatencyAxes, points: pd.DataFrame, backend: str, colour: str, shape: str) -> list[str]:
    """One backend: its line over the block sizes, p20-p80 whiskers, a marker per point."""
    parts = []
    coords = [(ax.x_of(int(r.block_size)), ax.y_of(r.median_ms)) for r in points.itertuples()]
    if len(coords) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
    for r, (x, y) in zip(points.itertuples(), coords):
        if pd.notna(r.p20_ms) and pd.notna(r.p80_ms):
            parts.append(f'<line x1="{x:.1f}" y1="{ax.y_of(r.p20_ms):.1f}" x2="{x:.1f}" y2="{ax.y_of(r.p80_ms):.1f}" '
                         f'stroke="{colour}" stroke-width="1.2"/>')
        parts.append(_marker(shape, x, y, colour, f"{backend} --block-size {int(r.block_size)}: {r.median_ms:.4f} ms"))
    return parts


def _legend_entry(ax: _LatencyAxes, ly: float, backend: str, colour: str, shape: str) -> list[str]:
    lx = ax.left + ax.plot_w + 14
    return [f'<line x1="{lx}" y1="{ly}" x2="{lx + 18}" y2="{ly}" stroke="{colour}" stroke-width="2"/>',
            _marker(shape, lx + 9, ly, colour, backend),
            f'<text x="{lx + 24}" y="{ly + 4}" font-size="11.5" fill="#1b1f24">{_e(backend)}</text>']


def _fastest_mark(ax: _LatencyAxes, sub: pd.DataFrame) -> list[str]:
    """The fastest point circled, and its legend entry below the backends'."""
    best = sub.loc[sub["median_ms"].idxmin()]
    bx, by = ax.x_of(int(best["block_size"])), ax.y_of(best["median_ms"])
    ly = ax.top + 6 + len(set(sub["backend"])) * 20 + 8
    right_of_plot = ax.left + ax.plot_w
    return [f'<circle cx="{bx:.1f}" cy="{by:.1f}" r="9" fill="none" stroke="#1b1f24" stroke-width="1.5"/>',
            f'<circle cx="{right_of_plot + 23}" cy="{ly}" r="7" fill="none" stroke="#1b1f24" stroke-width="1.5"/>',
            f'<text x="{right_of_plot + 38}" y="{ly + 4}" font-size="11.5" fill="#1b1f24">fastest</text>']


def bandwidth_svg(best: pd.DataFrame, backends: Sequence[str], width: int = 1240) -> str:
    """Horizontal bars: achieved bandwidth as % of peak, per decode shape and backend (its best
    block size), on a 0-100% axis."""
    decode = best[best["kind"] == WorkloadKind.DECODE]
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
