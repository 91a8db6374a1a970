"""GitHub-flavoured Markdown: pastes into an issue or PR comment as is. Summary first; the long
per-workload tables sit in <details> blocks so the comment stays readable. Tables are written
here (pandas' to_markdown needs `tabulate`, which is not a dependency)."""

from __future__ import annotations

import math

import pandas as pd

from attnsel.bench.plan.workloads import WorkloadKind
from attnsel.bench.tune import Verdict
from attnsel.reports import verify_report
from attnsel.reports.cells import cell, table
from attnsel.reports.tune import frames as F
from attnsel.reports.tune.loaders import ReportData, TuneData


def _ms(value: object) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def _pct(value: object, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def _code(text: str | None) -> str:
    return f"`{text}`" if text else "–"


# ---------------------------------------------------------------------------------------------


def render(data: ReportData) -> str:
    parts: list[str] = []
    if data.tune is not None:
        parts.append(tune_markdown(data.tune))
    if data.verify is not None:
        parts.append(verify_report.markdown(data.verify, level=2 if data.tune is not None else 1))
    for doc in data.explains:
        parts.append(explain_markdown(doc, level=2 if data.tune is not None else 1))
    return "\n\n".join(parts).rstrip() + "\n"


def _summary_rows(s: dict) -> list[tuple[str, str]]:
    shape = s["shape"]
    gpu = s["gpu"] or "unknown GPU"
    if s["capability"]:
        gpu += f" (compute capability {s['capability']})"
    if s["memory_gib"]:
        gpu += f", {s['memory_gib']:.0f} GiB"
    if s["peak_bandwidth"]:
        gpu += f", peak {s['peak_bandwidth']}"
    env = []
    if s["driver"]:
        env.append(f"driver {s['driver']}")
    if s["cuda"]:
        env.append(f"CUDA {s['cuda']}")
    env += [f"{k} {v}" for k, v in s["versions"].items()]
    model = f"{shape['model']}, TP={shape.get('tensor_parallel_size', 1)}: " if shape.get("model") else ""
    shape_text = (f"{model}head size {shape.get('head_size')}, {shape.get('num_q_heads')} query / "
                  f"{shape.get('num_kv_heads')} KV heads per GPU, {shape.get('dtype')}, kv cache {shape.get('kv_cache_dtype')}"
                  if shape else "–")
    rows = [("GPU", gpu), ("Environment", ", ".join(env) or "–"), ("Shape", shape_text),
            ("Timing", f"{s['timing_mode'] or '–'}, grid {s['grid'] or '–'}"),
            ("vLLM's default", _code(s["vllm_default"]))]
    overall = s["overall"]
    if overall:
        rows.append(("Recommendation", overall["advice"]))
        rows.append(("Margin vs default", f"{_pct(overall['margin_pct'], signed=True)} (noise bar "
                                           f"{_pct(overall['noise_threshold_pct'])}): {overall['confidence']}"))
    rows.append(("vLLM flags", _flags_text(s)))
    counts = ", ".join(f"{n} {status}" for status, n in sorted(s["statuses"].items()))
    rows.append(("Rows", counts))
    return rows


def _flags_text(s: dict) -> str:
    verdict = Verdict.read((s["overall"] or {}).get("verdict"))
    if s["vllm_flags"]:
        return _code(s["vllm_flags"])
    if verdict is not None and verdict.keeps_default:
        return "none needed (keep vLLM's default)"
    if verdict is Verdict.DEFAULT_NOT_MEASURED and s["fastest_flags"]:
        return f"{_code(s['fastest_flags'])} (fastest measured; vLLM's default was not measured, so no margin)"
    return "–"


def tune_markdown(tune: TuneData) -> str:
    s = F.tune_summary(tune)
    frame = F.rows_frame(tune)
    title = f"# attnsel tune report: {s['gpu'] or 'GPU'}"
    if s["shape"].get("model"):
        title += f" · {s['shape']['model']}"
    out = [title, ""]
    if s["note"]:
        out += [f"> **Note:** {cell(s['note'])}", ""]
    if not s["complete"]:
        out += ["> **Partial results:** tune.json is missing (the sweep was cut short); the advice below is "
                "recomputed from results.jsonl and vLLM's default is unknown.", ""]
    out += ["## Summary", "", table(["", ""], _summary_rows(s)), ""]
    if s["per_kind"]:
        out += ["### Per workload kind", "", table(
            ["kind", "fastest", "vs vLLM's default (kernel-level)", "noise bar", "confidence", "flags"],
            [(d["scope"], _code(d["best"]), _pct(d["margin_pct"], signed=True), _pct(d["noise_threshold_pct"]),
              d["confidence"], _code(d["flags"])) for d in s["per_kind"]],
            align="llrrll"), "", f"- {F.KERNEL_LEVEL_NOTE}", ""]
    for warning in s["warnings"]:
        out.append(f"- ⚠️ {cell(warning)}")
    if s["warnings"]:
        out.append("")
    out += _bandwidth_section(frame)
    out += _workload_sections(frame)
    out += _skipped_section(tune)
    out += _problem_section(frame)
    out.append(f"<sub>Rendered by `attnsel report` from `{cell(s['source'])}`"
               + (f", measured {s['created']}" if s["created"] else "") + ".</sub>")
    return "\n".join(out)


def _bandwidth_section(frame: pd.DataFrame) -> list[str]:
    best = F.best_bandwidth(frame)
    decode = best[best["kind"] == WorkloadKind.DECODE]
    if decode.empty:
        return []
    backends = list(dict.fromkeys(decode["backend"]))
    rows = []
    for label in dict.fromkeys(decode["workload"]):
        sub = decode[decode["workload"] == label].set_index("backend")
        rows.append([label] + [
            f"{_pct(sub.loc[b, 'pct_of_peak'])} (bs {int(sub.loc[b, 'block_size'])})" if b in sub.index else "–"
            for b in backends])
    return ["### Decode bandwidth, % of peak (best block size per backend)", "",
            table(["shape", *backends], rows, align="l" + "r" * len(backends)), ""]


def _workload_sections(frame: pd.DataFrame) -> list[str]:
    out = ["## Workloads", "", "Median latency in ms per `--block-size` (p20–p80 in the CSV/JSON); **bold** = fastest.", ""]
    for _kind, label in F.workloads(frame):
        lat = F.latency_table(frame, label)
        if lat.empty:
            continue
        best = lat.min().min()
        rows = []
        for backend, values in lat.iterrows():
            rows.append([backend] + [("**" + _ms(v) + "**") if v == best else _ms(v) for v in values])
        headers = ["backend"] + [f"bs {int(c)}" for c in lat.columns]
        out += [f"<details><summary><b>{label}</b> · fastest {_fastest(lat)}</summary>", "",
                table(headers, rows, align="l" + "r" * len(lat.columns)), "", "</details>", ""]
    return out


def _fastest(lat: pd.DataFrame) -> str:
    stacked = lat.stack()
    (backend, block) = stacked.idxmin()
    return f"{backend} bs {int(block)}: {stacked.min():.4f} ms"


def _skipped_section(tune: TuneData) -> list[str]:
    skipped = F.skipped_configs(tune)
    if skipped.empty:
        return []
    rows = [(r.backend, r.block_size, "; ".join(r.reasons)) for r in skipped.itertuples()]
    return ["### Not timed: vLLM refuses these", "", table(["backend", "--block-size", "vLLM's reason"], rows, align="lrl"), ""]


def _problem_section(frame: pd.DataFrame) -> list[str]:
    problems = F.problems_frame(frame)
    if problems.empty:
        return []
    rows = [(r.backend, r.block_size, r.workload, r.status, (r.error or "")[:200]) for r in problems.itertuples()]
    return ["### Failed rows (never recommended)", "",
            table(["backend", "--block-size", "shape", "status", "error"], rows, align="lrlll"), ""]


def explain_markdown(doc: dict, level: int = 1) -> str:
    s = F.explain_summary(doc)
    h = "#" * level
    gpu = f"{s['gpu'] or 'GPU'} (compute capability {s['capability']})"
    out = [f"{h} attnsel explain: {gpu}", ""]
    i = s["inputs"]
    rows = [("Rule profile", s["profile"]), ("Model", s["model"] or "–"),
            ("Inputs", f"head_size={i.get('head_size')}, dtype={i.get('dtype')}, kv_cache_dtype={i.get('kv_cache_dtype')}, "
                       f"block_size={i.get('block_size')}")]
    if s["error"]:
        rows.append(("vLLM raises", f"{s['error_type']}: {s['error']}"))
    else:
        rows.append(("vLLM selects", f"{s['selected']}, KV block size {s['block_size']}"))
        rows.append(("vLLM flags", _code(" ".join(s["vllm_args"])) if s["vllm_args"] else "none needed (vLLM's own choice)"))
    out += [table(["", ""], rows), ""]
    frame = F.explain_frame(doc)
    out += [table(["prio", "backend", "valid", "reasons (vLLM's words)"],
                  [("–" if pd.isna(r.priority) else int(r.priority), r.backend + (" ◀ selected" if r.selected else ""),
                    "✅" if r.valid else "❌", r.reasons) for r in frame.itertuples()], align="rlcl"), ""]
    for warning in s["warnings"]:
        out.append(f"- vLLM logs: {cell(warning)}")
    return "\n".join(out).rstrip()
