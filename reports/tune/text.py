"""Render `attnsel tune` plans and result documents (bench/tune/document.py) as rich text. Never calls NVML
or CUDA; everything comes from the plan / document dicts, so recorded results render the same."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table

from attnsel.bench.plan.workloads import WorkloadKind
from attnsel.bench.sweep import results as R
from attnsel.bench.tune import (
    DecisionRecord,
    Environment,
    GpuEnvironment,
    PlanRecord,
    RecommendationRecord,
    ResultRow,
    Timing,
    TuneDocument,
    Verdict,
    advised_flags,
)

STATUS_STYLE: dict[str, str] = {
    R.STATUS_OK: "green", R.STATUS_SKIPPED_BY_VLLM: "dim", R.STATUS_UNAVAILABLE: "yellow",
    R.STATUS_UNSUPPORTED: "yellow", R.STATUS_WRONG: "bold red", R.STATUS_ERROR: "red", R.STATUS_OOM: "red",
    R.STATUS_TIMEOUT: "red", R.STATUS_CRASHED: "bold red",
}


def _shape_line(shape: dict) -> str:
    src = f"{shape['model']} (TP={shape['tensor_parallel_size']}): " if shape.get("model") else ""
    extras = [name for name in ("has_sink", "use_sparse", "use_mm_prefix") if shape.get(name)]
    extra = f", {', '.join(extras)}" if extras else ""
    if shape.get("use_mla") and shape.get("kv_lora_rank") is not None:
        layout = (f"MLA: {shape['num_q_heads']} query heads per GPU over one latent cache of "
                  f"{shape['kv_lora_rank']} + {shape['qk_rope_head_dim']} = {shape['head_size']} per token")
    else:
        layout = f"head_size {shape['head_size']}, {shape['num_q_heads']} query / {shape['num_kv_heads']} KV heads per GPU"
        extra = (", use_mla" if shape.get("use_mla") else "") + extra
    return f"{src}{layout}, {shape['dtype']}, kv-cache-dtype {shape['kv_cache_dtype']}{extra}"


def _default_line(plan: dict) -> str:
    d = plan["vllm_default"]
    if d.get("backend"):
        return f"vLLM's default here: {d['backend']} with block size {d['block_size']}"
    return f"vLLM's default here: none ({d.get('error') or 'no valid backend'})"


# ---------------------------------------------------------------------------------------------
# --dry-run


def plan_table(plan: dict) -> Table:
    table = Table(title="Backend x --block-size, filtered with vLLM's rules", title_justify="left")
    for col in ("backend", "--block-size", "kernel block", "plan", "vLLM's reason"):
        table.add_column(col)
    for c in plan["configs"]:
        planned = c["status"] == "planned"
        table.add_row(
            c["backend"], str(c["block_size"]),
            str(c["kernel_block_size"]) if c["kernel_block_size"] else "-",
            "time" if planned else "[dim]skipped[/dim]",
            "" if planned else "; ".join(c["reasons"]),
        )
    return table


def workloads_table(plan: dict) -> Table:
    table = Table(title="Workloads (each timed for every planned config)", title_justify="left")
    for col in ("kind", "shape", "batch", "KV length", "new tokens/request"):
        table.add_column(col)
    for w in plan["workloads"]:
        q = str(w["query_len"]) if w["kind"] != WorkloadKind.MIXED else f"{w['query_len']} (chunks) / 1"
        table.add_row(w["kind"], w["label"], str(w["batch"]), str(w["context_len"]), q)
    return table


def _launch(row: ResultRow) -> str | None:
    return row.launch or (row.timing or Timing()).mode  # older rows: the timing's mode


def timing_method(opts: dict, rows: Sequence[ResultRow] = ()) -> str:
    """How rows were launched and timed, in words, from what the rows recorded (bench/timing/gpu.py)."""
    policy = opts.get("launch") or ("graph" if opts.get("mode") == "graph" else "eager" if opts.get("mode") else "vllm")
    timed = [r for r in rows if r.status == R.STATUS_OK]
    graph = sorted({r.backend for r in timed if _launch(r) in ("graph", "cuda_graph")})
    if policy == "vllm":
        launched = ("launched as vLLM launches them: CUDA-graph replay where vLLM captures the batch"
                    + (f" ({', '.join(graph)} decode)" if graph else "") + ", eager elsewhere")
    else:
        launched = "all rows " + ("replayed from CUDA graphs (--cuda-graph)" if policy == "graph" else "launched eagerly (--eager)")
    timers = sorted({(r.timing or Timing()).timer or "events" for r in timed})
    names = {"cupti": "kernel time by CUPTI", "events": "CUDA events behind a GPU spin"}
    read = " and ".join(names.get(t, t) for t in timers) if timers else {"cupti": names["cupti"]}.get(
        str(opts.get("timer")), "CUPTI where available, else CUDA events")
    l2 = "cold (2 x L2 flushed before each call)" if opts.get("cold_l2", True) else "hot (no flush)"
    return f"{launched}; {read}; L2 {l2}; median"


def launch_lines(launch: dict) -> list[str]:
    """One line per backend: which planned shapes replay a CUDA graph, as vLLM would launch them."""
    lines = []
    for backend, by_label in launch.items():
        graph = [label for label, how in by_label.items() if how == "graph"]
        if not graph:
            lines.append(f"launch: {backend}: every shape eagerly (vLLM captures no attention graph for them)")
        else:
            lines.append(f"launch: {backend}: CUDA-graph replay for {len(graph)} of {len(by_label)} shapes "
                         f"({', '.join(graph[:3])}{', ...' if len(graph) > 3 else ''}), eager for the rest")
    return lines


def render_plan(plan: dict, console: Console, *, notes: bool = True) -> None:
    gpu = plan.get("gpu") or "GPU"
    console.print(f"[bold]attnsel tune --dry-run[/bold]: {gpu} (compute capability {plan['capability']}), "
                  f"grid {plan['grid']}")
    console.print(_shape_line(plan["shape"]))
    if plan.get("rule_profile_reason"):
        console.print(f"vLLM rules: {plan['rule_profile_reason']}")
    console.print(_default_line(plan))
    console.print(plan_table(plan))
    console.print(workloads_table(plan))
    for line in launch_lines(plan.get("launch") or {}):
        console.print(line)
    planned = sum(1 for c in plan["configs"] if c["status"] == "planned")
    console.print(f"{planned} configs x {len(plan['workloads'])} shapes = {plan['timed_rows']} timed rows; "
                  f"{plan['skipped_configs']} configs skipped by vLLM's rules. "
                  f"Rough warm estimate: {plan['estimated_seconds_warm']:.0f} s.")
    for note in plan.get("notes") or [] if notes else []:  # -q: results only
        console.print(f"note: {note}")
    for fault in plan.get("known_faults") or []:  # attention/versions/faults.py FaultMatch.to_dict
        maybe = "" if fault["certainty"] == "met" else "possibly: "
        console.print(f"warning: known vLLM fault {fault['id']} ({maybe}{'; '.join(fault['why'])}): {fault['title']}. "
                      f"Workaround: {fault['workaround']}", style="yellow", markup=False)


# ---------------------------------------------------------------------------------------------
# Results


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1000:.1f}"


def ranking_table(decision: DecisionRecord, title: str, limit: int = 8) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("#", "backend", "--block-size", "kernel block", "geomean us", "vs vLLM default", "vs best"):
        table.add_column(col, justify="right" if col in ("#", "geomean us", "vs vLLM default") else "left")
    default = decision.vllm_default
    for i, c in enumerate((decision.ranking or [])[:limit], 1):
        rel = "-"
        if default and default.geomean_ms is not None and c.geomean_ms is not None:
            rel = f"{default.geomean_ms / c.geomean_ms:.2f}x"
        is_default = default and (c.backend, c.block_size) == (default.backend, default.block_size)
        name = c.backend + (" (vLLM default)" if is_default else "")
        vs_best = {"best": "best", "tie": "tie (within noise)"}.get(c.vs_best or "", c.vs_best or "")
        table.add_row(str(i), name, str(c.block_size), str(c.kernel_block_size or "-"),
                      _us(c.geomean_ms), rel, vs_best)
    return table


def rows_table(rows: Sequence[ResultRow], title: str = "All rows") -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("backend", "bs", "kbs", "workload", "status", "median us", "p20-p80 us", "TB/s", "% peak",
                "TFLOP/s", "setup s"):
        table.add_column(col)
    for r in rows:
        t = r.timing or Timing()
        bw, pct = r.bandwidth_bytes_per_s, r.pct_of_peak_bandwidth
        style = STATUS_STYLE.get(r.status, "")
        table.add_row(
            r.backend, str(r.block_size), str(r.kernel_block_size_used or r.kernel_block_size or "-"),
            r.workload_label if r.workload_label is not None else "",
            f"[{style}]{r.status}[/{style}]" if style else str(r.status),
            _us(t.median_ms),
            f"{_us(t.p20_ms)}-{_us(t.p80_ms)}" if r.timing else "-",
            f"{bw / 1e12:.2f}" if bw else "-", f"{pct:.0f}%" if pct else "-",
            f"{r.tflops:.1f}" if r.tflops else "-",
            f"{r.setup_s:.1f}" if isinstance(r.setup_s, (int, float)) else "-",
        )
    return table


def group_problems(rows: Sequence[ResultRow]) -> list[dict]:
    """Rows without a timing, grouped by (backend, status, error) so that a missing library or a
    crashing config is one line, not one per shape."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        if r.status in (R.STATUS_OK, R.STATUS_SKIPPED_BY_VLLM):
            continue
        key = (r.backend, r.status, r.error or "")
        g = groups.setdefault(key, {"backend": r.backend, "status": r.status, "error": r.error or "",
                                    "block_sizes": [], "shapes": []})
        if r.block_size not in g["block_sizes"]:
            g["block_sizes"].append(r.block_size)
        if r.workload_label not in g["shapes"]:
            g["shapes"].append(r.workload_label)
    return list(groups.values())


def problems_table(rows: Sequence[ResultRow]) -> Table | None:
    groups = group_problems(rows)
    if not groups:
        return None
    table = Table(title="Rows that did not produce a timing", title_justify="left")
    for col in ("backend", "--block-size", "shapes", "status", "error"):
        table.add_column(col)
    for g in groups:
        style = STATUS_STYLE.get(g["status"], "")
        shapes = g["shapes"][0] if len(g["shapes"]) == 1 else f"{len(g['shapes'])} shapes"
        table.add_row(g["backend"], ", ".join(str(b) for b in sorted(g["block_sizes"])), shapes,
                      f"[{style}]{g['status']}[/{style}]", g["error"][:160])
    return table


def setup_lines(rows: Sequence[ResultRow]) -> list[str]:
    """Compile/JIT cost per backend, reported apart from run time (issue "attnsel tune")."""
    out = []
    backends = list(dict.fromkeys(r.backend for r in rows if r.setup_s is not None))
    for backend in backends:
        mine = [r for r in rows if r.backend == backend]
        setups = [r.setup_s for r in mine if isinstance(r.setup_s, (int, float))]
        imports = [r.library_import_s for r in mine if isinstance(r.library_import_s, (int, float))]
        out.append(f"setup {backend}: library import {max(imports, default=0):.1f} s; plan + JIT + first call: "
                   f"max {max(setups):.2f} s, total {sum(setups):.1f} s over {len(setups)} rows (not in the timings)")
    return out


def _s(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "?"


def phase_line(phases: dict | None) -> str | None:
    """One line: where the sweep's wall time went (tune.json "phases", docs/tune-performance.md)."""
    if not phases:
        return None
    parts = [f"probe {_s(phases.get('probe_s'))} ({phases.get('probe_source', '?')})"]
    for backend, b in (phases.get("backends") or {}).items():
        hidden = (b.get("startup_detail") or {}).get("overlapped_s")
        startup = f"startup {_s(b.get('startup_s'))}" + (f" +{_s(hidden)} hidden" if hidden else "")
        if b.get("precompile_s") is not None:  # Triton kernels compiled in parallel at go (change 10)
            startup += f", precompile {_s(b.get('precompile_s'))}"
        lanes = f" on {len(b['parts'])} GPUs" if b.get("parts") else ""  # split over lanes: summed
        parts.append(f"{backend} {_s(b.get('wall_s'))}{lanes} ({startup}, batch {_s(b.get('batch_s'))}, "
                     f"setup/JIT {_s(b.get('setup_s'))}, check {_s(b.get('check_s'))}, "
                     f"timing {_s(b.get('timing_s'))}, other {_s(b.get('other_s'))})")
    parts.append(f"other {_s(phases.get('other_s'))}")
    return f"time: {_s(phases.get('total_s'))} s = " + " + ".join(parts)


def render_recommendation(rec: Mapping | RecommendationRecord, console: Console) -> None:
    if isinstance(rec, Mapping):
        rec = RecommendationRecord.from_dict(rec)
    console.print("[bold]Recommendation[/bold]")
    for kind, decision in (rec.workloads or {}).items():
        console.print(f"  {kind:8s} {decision.advice if decision else None}")
    overall = rec.overall
    if overall:
        weights = ", ".join(f"{k}={v:.2f}" for k, v in (overall.weights or {}).items())
        console.print(f"  overall  ({weights}) {overall.advice}")
        if overall.best:
            advised = advised_flags(overall)
            if advised:
                console.print(f"  vLLM flags: [bold]{advised}[/bold]")
                # a kernel margin shrinks by attention's share of a step (H100, fp8 Llama-3.1-8B:
                # +5.7% in the kernels, within noise in vLLM's engine: tests/fixtures/verify/)
                console.print("  (a kernel-level margin: `attnsel verify` checks it in vLLM's own engine)")
            else:
                default_won = Verdict.read(overall.verdict) is Verdict.DEFAULT_IS_FASTEST
                best = "" if default_won else f" (fastest measured: {overall.flags})"
                console.print(f"  vLLM flags: [bold](none: keep vLLM's default)[/bold]{best}")
    for dq in rec.disqualified or []:
        console.print(f"  [bold red]disqualified[/bold red] {dq.backend} --block-size {dq.block_size}: {dq.reason}")


def render_results(document: Mapping | TuneDocument, console: Console, *, show_rows: bool = False) -> None:
    doc = document if isinstance(document, TuneDocument) else TuneDocument.from_dict(document)
    plan = (doc.plan or PlanRecord()).to_dict()  # the plan lines are shared with --dry-run, which prints a plan dict
    env = doc.environment or Environment()
    gpu = env.gpu or GpuEnvironment()
    peak = gpu.peak_memory_bandwidth_bytes_per_s
    versions = env.versions or {}
    console.print(f"[bold]attnsel tune[/bold]: {gpu.name or plan.get('gpu')} (compute capability "
                  f"{plan['capability']}), driver {gpu.driver_version or '?'}, peak "
                  f"{peak / 1e12:.2f} TB/s" if peak else f"[bold]attnsel tune[/bold]: {plan.get('gpu')}")
    libs = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    if libs:
        console.print(f"libraries: {libs}")
    opts = doc.options or {}
    console.print(_shape_line(plan["shape"]))
    console.print(f"timing: {timing_method(opts, doc.rows)}, p20/p80 band; {_default_line(plan)}")
    rec = doc.recommendation or RecommendationRecord()
    for kind, decision in (rec.workloads or {}).items():
        if decision and decision.ranking:
            console.print(ranking_table(decision, f"{kind}: configs by geometric-mean time over "
                                                  f"{decision.ranking[0].shapes} shapes"))
    rows = doc.rows or []
    if show_rows:
        console.print(rows_table([r for r in rows if r.status != R.STATUS_SKIPPED_BY_VLLM]))
    problems = problems_table(rows)
    if problems is not None:
        console.print(problems)
    skipped = {(r.backend, r.block_size): r.error for r in rows if r.status == R.STATUS_SKIPPED_BY_VLLM}
    for (backend, bs), why in sorted(skipped.items()):
        console.print(f"[dim]skipped (vLLM would refuse): {backend} --block-size {bs}: {why}[/dim]")
    for line in setup_lines(rows):
        console.print(line)
    timeline = phase_line(doc.phases)
    if timeline:
        console.print(timeline, soft_wrap=True)
    render_recommendation(rec, console)
    for warning in doc.warnings or []:
        console.print(f"[yellow]warning:[/yellow] {warning}")
