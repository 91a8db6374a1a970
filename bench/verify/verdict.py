"""Predicted vs observed: put tune's kernel-level margin beside the engine-level margin of each
candidate, give the attention share of a decode step, and state the verdict on tune's
recommendation with the flags to paste (rules in bench/verify/compare.py). Pure functions over
the verify document (and the tune document it checks); `attnsel report` renders their output
and never recomputes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attnsel.bench.sweep import results as R
from attnsel.bench.tune import (
    DecisionRecord,
    RecommendationRecord,
    TuneDocument,
    Workload,
    advised_flags,
)
from attnsel.bench.tune import recommend as REC
from attnsel.bench.verify import compare as EC
from attnsel.bench.verify.compare import EngineVerdict, Judgement
from attnsel.bench.verify.plan import (
    ROLE_DEFAULT,
    ROLE_FASTEST,
    ROLE_NAMED,
    ROLE_PICK,
    ROLE_RUNNER_UP,
)
from attnsel.bench.verify.records import (
    BestPair,
    Comparison,
    Judged,
    ShapeVerdict,
    StartFigure,
    StartSpread,
    TuneAdvice,
    VerdictRecord,
)
from attnsel.bench.verify.status import RunStatus


def _label(batch: int, context: int) -> str:
    return f"decode b={batch} ctx={context}"


TuneInput = Mapping | TuneDocument | None  # a tune.json as read, or its record


def tune_record(tune_doc: TuneInput) -> TuneDocument:
    """The tune result as its records (an empty one without a tune result: pairs the user named)."""
    record = tune_doc if isinstance(tune_doc, TuneDocument) else TuneDocument.from_dict(tune_doc or {})
    assert isinstance(record, TuneDocument)
    return record


def kernel_times(tune_doc: TuneInput) -> dict[tuple[str, int, int, int], float]:
    """(backend, block size, batch, context) -> tune's median kernel time (ms) for decode rows."""
    out = {}
    for row in tune_record(tune_doc).rows or []:
        if row.kind == "decode" and row.status == R.STATUS_OK and row.timing:
            w = row.workload or Workload()
            if w.batch is None or w.context_len is None or row.timing.median_ms is None:
                continue  # not a measured decode row (the input checks refuse such a tune.json)
            out[(row.backend, int(row.block_size), int(w.batch), int(w.context_len))] = float(row.timing.median_ms)
    return out


def decode_geomeans(tune_doc: TuneInput) -> dict[tuple[str, int], float]:
    workloads = (tune_record(tune_doc).recommendation or RecommendationRecord()).workloads or {}
    decode = workloads.get("decode") or DecisionRecord()
    return {(c.backend, int(c.block_size)): float(c.geomean_ms) for c in decode.ranking or [] if c.geomean_ms is not None}


def default_row(document: dict) -> dict | None:
    return next((r for r in document["candidates"] if ROLE_DEFAULT in r["roles"]), None)


def run_config(row: dict) -> tuple[str, int] | None:
    """The pair an engine really ran (read back), else the one it was started for."""
    engine = row.get("engine") or {}
    used, size = engine.get("backend_used"), engine.get("block_size_used")
    if used and size and "," not in str(used):
        return (str(used), int(size))
    if row.get("backend") and row.get("block_size"):
        return (row["backend"], int(row["block_size"]))
    return tuple(row["predicted"]) if row.get("predicted") else None


def _figures(row: dict | None, index: int) -> dict | None:
    """One pair's figures at shape `index`: its engine's, or over its engine starts with --repeat-engine."""
    if row is not None and "restarts" in row:
        return EC.across_starts([_start_figures(start, index) for start in (row, *row["restarts"])])
    return _start_figures(row, index)


def _start_figures(row: dict | None, index: int) -> dict | None:
    shapes = (row or {}).get("shapes") or []
    if row is None or row.get("status") != RunStatus.OK or index >= len(shapes):
        return None
    shape = shapes[index] or {}
    return shape.get("figures") if shape.get("status") == RunStatus.OK else None


def annotate_attention(document: dict, tune_doc: TuneInput) -> None:
    """Adds tune's kernel time and the attention share of the decode step to each measured shape."""
    kernels = kernel_times(tune_doc)
    layers = document["model"].get("attention_layers")
    for row in document["candidates"]:
        config = run_config(row)
        for shape in row.get("shapes") or []:
            step = ((shape.get("figures") or {}).get("decode_step_ms") or {}).get("median")
            kernel = kernels.get((*config, int(shape["batch"]), int(shape["context"]))) if config and "batch" in shape else None
            shape["kernel_ms"] = kernel
            shape["attention_share"] = EC.attention_share(kernel, layers, step)


def predicted_margin(tune_doc: TuneInput, default: tuple | None, config: tuple | None,
                     batch: int, context: int) -> tuple[float | None, str | None]:
    """tune's kernel-level gain of `config` over the default, in % : at this shape if tune timed
    it, else over tune's decode shapes (geometric means)."""
    if not default or not config:
        return None, None
    kernels = kernel_times(tune_doc)
    at_d, at_c = kernels.get((*default, batch, context)), kernels.get((*config, batch, context))
    if at_d and at_c:
        return (at_d / at_c - 1.0) * 100, "this shape"
    means = decode_geomeans(tune_doc)
    if means.get(tuple(default)) and means.get(tuple(config)):
        return (means[tuple(default)] / means[tuple(config)] - 1.0) * 100, "decode geomean"
    return None, None


def build_comparisons(document: dict, tune_doc: TuneInput) -> list[dict]:
    """verify.json's "comparisons", as written (comparison_records)."""
    return [c.to_dict() for c in comparison_records(document, tune_doc)]


def comparison_records(document: dict, tune_doc: TuneInput) -> list[Comparison]:
    """One entry per (candidate other than vLLM's default) x shape, its keys in the order written."""
    tune_doc = tune_record(tune_doc)  # read once: each shape of each candidate looks its kernels up
    annotate_attention(document, tune_doc)
    base = default_row(document)
    base_config = run_config(base) if base else None
    layers = document["model"].get("attention_layers")
    kernels = kernel_times(tune_doc)
    out = []
    for row in document["candidates"]:
        if row is base:
            continue
        for index, (batch, context) in enumerate(document["options"]["shapes"]):
            entry = Comparison.new(candidate=row["name"], short=row.get("short"), roles=row["roles"], flags=row["flags"],
                                   shape=_label(batch, context), batch=batch, context=context)
            mine, theirs = _figures(row, index), _figures(base, index)
            if mine and theirs:
                for name, judged in EC.compare_shape(mine, theirs).items():  # decode, end_to_end, prefill
                    setattr(entry, name, Judged.new(**judged))
            else:
                entry.missing = _missing(row, base, index)
            pct, source = predicted_margin(tune_doc, base_config, run_config(row), batch, context)
            entry.predicted_kernel_margin_pct, entry.predicted_source = pct, source
            k_default = kernels.get((*base_config, batch, context)) if base_config else None
            mine_config = run_config(row)
            k_mine = kernels.get((*mine_config, batch, context)) if mine_config else None
            step_default = ((theirs or {}).get("decode_step_ms") or {}).get("median")
            gain = EC.expected_step_gain(k_default, k_mine, layers, step_default)
            entry.expected_step_margin_pct = None if gain is None else gain * 100
            out.append(entry)
    return out


def engine_start_spreads(document: dict) -> list[dict]:
    """verify.json's "engine_starts", as written (start_spread_records)."""
    return [s.to_dict() for s in start_spread_records(document)]


def start_spread_records(document: dict) -> list[StartSpread]:
    """Per pair started more than once (--repeat-engine) and shape: each start's median, the spread
    between the starts beside the within-engine noise the gate uses (compare.py across_starts)."""
    out = []
    for row in document["candidates"]:
        if "restarts" not in row:
            continue
        for index, (batch, context) in enumerate(document["options"]["shapes"]):
            across = _figures(row, index) or {}
            entry = StartSpread.new(candidate=row["name"], short=row.get("short"), shape=_label(batch, context),
                                    batch=batch, context=context, starts=1 + len(row["restarts"]),
                                    measured=across.get("measured", 0))
            for name, key in (("decode", "decode_step_ms"), ("end_to_end", "output_tokens_per_s")):
                fig = across.get(key)
                if fig:
                    setattr(entry, name, StartFigure.new(
                        medians=fig["medians"], median=fig["median"], start_spread_pct=_pct(fig["start_spread"]),
                        within_noise_pct=_pct(fig["spread"]), gate_pct=EC.noise_bar(fig, None) * 100))
            out.append(entry)
    return out


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100


def is_aa_check(document: dict, starts: Sequence[StartSpread] | None = None) -> bool:
    """Only vLLM's default, started several times (`--candidates default --repeat-engine N`), and
    some shape measured on two of its starts: an A/A check, whose answer is the spread, not a verdict."""
    rows = document["candidates"]
    return (len(rows) == 1 and "restarts" in rows[0]
            and any(s.end_to_end is not None and s.end_to_end.start_spread_pct is not None
                    for s in (_start_records(document) if starts is None else starts)))


def _comparison_records(document: dict) -> list[Comparison]:
    """The document's comparisons as records (as read from a file, or as written by run.py)."""
    return [Comparison.from_dict(c) for c in document.get("comparisons") or []]


def _start_records(document: dict) -> list[StartSpread]:
    return [StartSpread.from_dict(s) for s in document.get("engine_starts") or []]


def _missing(row: dict, base: dict | None, index: int) -> str:
    for who, r in (("this candidate", row), ("vLLM's default", base)):
        if r is None:
            return f"{who} was not run"
        if r.get("status") != RunStatus.OK:
            return f"{who}: {r.get('status')}: {r.get('error') or ''}".strip()
        shape = (r.get("shapes") or [{}])[index] if index < len(r.get("shapes") or []) else {}
        if shape.get("status") != RunStatus.OK:
            return f"{who}: {shape.get('status')}: {shape.get('error') or ''}".strip()
    return "no complete N1/N2 pair"


def _subject(document: dict) -> tuple[dict | None, bool]:
    """(the candidate whose comparisons decide the verdict, whether tune's pick is vLLM's default)."""
    rows = document["candidates"]
    base = default_row(document)
    if base and ROLE_PICK in base["roles"]:
        return next((r for r in rows if ROLE_RUNNER_UP in r["roles"]), None), True
    for role in (ROLE_PICK, ROLE_FASTEST, ROLE_NAMED):
        found = next((r for r in rows if role in r["roles"] and r is not base), None)
        if found:
            return found, False
    return None, False


def best_end_to_end(document: dict, comparisons: Sequence[Comparison], min_gain_pct: float = 0.0) -> BestPair | None:
    """The measured pair with the best tokens/s across shapes (geometric mean of its gains over
    vLLM's default; the default itself is 1.0), counted only when it beat the default beyond noise
    at one shape, lost at none, and gained at least `min_gain_pct` overall (tune's --min-gain:
    below it, changing flags is not worth it)."""
    best, best_ratio = None, 1.0
    for row in document["candidates"]:
        mine = [c.end_to_end for c in comparisons if c.candidate == row["name"] and c.end_to_end]
        if not mine or any(e.result == Judgement.SLOWER for e in mine):
            continue
        ratio = EC.geomean_ratio(1 + (e.margin_pct or 0) / 100 for e in mine)
        if ratio and ratio > best_ratio and (ratio - 1) * 100 >= min_gain_pct \
                and any(e.result == Judgement.FASTER for e in mine):
            best, best_ratio = row, ratio
    row = best or default_row(document)
    return BestPair.new(name=row["name"], flags=row["flags"], gain_pct=(best_ratio - 1) * 100) if row else None


def tune_advice(document: dict) -> tuple[bool | None, float]:
    """(whether tune advised passing flags, the gain in % worth changing flags for); None: no tune
    result (pairs the user named)."""
    tune = TuneAdvice.from_dict(document.get("tune") or {})
    given = tune.min_gain_pct
    min_gain = float(given) if isinstance(given, (int, float)) else REC.DEFAULT_MIN_GAIN * 100
    if "advised_flags" not in tune.to_dict() and not tune.verdict:  # absent, not null: no tune advice
        return None, min_gain
    return advised_flags(tune) is not None, min_gain


def summarize(document: dict) -> dict:
    """verify.json's "verdict", as written (verdict_record), from the document's comparisons."""
    return verdict_record(document, _comparison_records(document), _start_records(document)).to_dict()


def verdict_record(document: dict, comparisons: Sequence[Comparison], starts: Sequence[StartSpread]) -> VerdictRecord:
    """The verdict on tune's advice, in words, with the flags to paste. Two questions, by what tune
    advised: flags (is the pick faster end to end? holds / within noise / reversed), or keeping
    vLLM's default, which includes a fastest pair within noise or below --min-gain (does any pair
    beat the default end to end by the gain worth changing flags for? reversed if so, else holds)."""
    subject, pick_is_default = _subject(document)
    if subject is None:
        if is_aa_check(document, starts):
            return _not_measured(_aa_text(document, starts))
        return _not_measured("there is no second candidate to compare with vLLM's default")
    advised, min_gain = tune_advice(document)
    keeps_default = pick_is_default or advised is False
    mine = [c for c in comparisons if c.candidate == subject["name"]]
    shapes = [ShapeVerdict.new(shape=c.shape, end_to_end=_shape_verdict(c.end_to_end, keeps_default, min_gain),
                               decode=_shape_verdict(c.decode, keeps_default, min_gain)) for c in mine]
    word = EC.overall_verdict(s.end_to_end for s in shapes)
    if word is None:
        why = next((c.missing for c in mine if c.missing), None) or subject.get("error")
        return _not_measured(why or "nothing could be compared")
    best = best_end_to_end(document, comparisons, min_gain)
    if keeps_default:
        pick_row = default_row(document)
        assert pick_row is not None  # a subject to compare exists only beside vLLM's default (_subject)
        worth = best if best and best.name != pick_row["name"] else None
        word = EngineVerdict.REVERSED if worth else EngineVerdict.HOLDS
        flags = (worth.flags or "") if worth else ""
    else:
        pick_row = subject
        if word is EngineVerdict.HOLDS:
            flags = pick_row["flags"]
        else:  # within noise: keep the default; reversed: the best pair end to end, if any beat it
            flags = "" if word.keeps_default or best is None else (best.flags or "")
    text = (_keep_default_text(word, subject, mine, pick_is_default, best, min_gain, flags) if keeps_default
            else _verdict_text(word, pick_row, mine, flags)) + _starts_note(mine)
    return VerdictRecord.new(verdict=word, pick=pick_row["name"], pick_is_default=pick_is_default,
                             tune_advised_flags=not keeps_default, min_gain_pct=min_gain, compared=subject["name"],
                             shapes=shapes, flags=flags, best_end_to_end=best, text=text)


def _shape_verdict(comparison: Judged | None, keeps_default: bool, min_gain: float) -> EngineVerdict | None:
    """One shape's word on tune's advice: with flags advised, the pick faster / slower / within
    noise; with the default advised, reversed only where the other pair wins by --min-gain or more."""
    result = comparison.result if comparison else None
    if not keeps_default:
        return EC.recommendation_verdict(result, pick_is_default=False)
    if result is None or comparison is None:
        return None
    wins = result == Judgement.FASTER and (comparison.margin_pct or 0) >= min_gain
    return EngineVerdict.REVERSED if wins else EngineVerdict.HOLDS


def _not_measured(why: str) -> VerdictRecord:
    return VerdictRecord.new(verdict=EngineVerdict.NOT_MEASURED, flags=None, shapes=[], best_end_to_end=None,
                             text=f"no verdict: {why}")


def _aa_text(document: dict, starts: Sequence[StartSpread]) -> str:
    """The A/A check's answer: how far two starts of vLLM's default drift apart, against the noise gate."""
    parts = []
    for entry in starts:
        e2e = entry.end_to_end
        if e2e and e2e.start_spread_pct is not None:
            parts.append(f"{entry.shape}: {e2e.start_spread_pct:.1f}% tokens/s between starts "
                         f"(within one engine {_pct_words(e2e.within_noise_pct)}, gate {e2e.gate_pct:.1f}%)")
    first = document["candidates"][0]
    return (f"only vLLM's default was started ({1 + len(first['restarts'])} engine starts, an A/A check): "
            + "; ".join(parts))


def _pct_words(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}%"


def _starts_note(comparisons: Sequence[Comparison]) -> str:
    """With several engine starts per pair: where a gap beat the within-engine noise but not the
    start-to-start spread, and so was counted as within noise. Empty with one start per pair. A
    comparison judged over several starts is the one with a within-engine noise (compare.py compare_shape)."""
    judged = [(c, c.end_to_end) for c in comparisons if c.end_to_end and c.end_to_end.within_noise_pct is not None]
    if not judged:
        return ""
    swallowed = [f"at {c.shape} the {e.margin_pct:+.1f}% gap exceeds the within-engine noise "
                 f"({e.within_noise_pct:.1f}%) but not the start-to-start spread ({e.start_spread_pct:.1f}%)"
                 for c, e in judged if e.margin_pct is not None and e.start_spread_pct is not None
                 and e.within_noise_pct is not None and e.within_noise_pct < abs(e.margin_pct) <= e.start_spread_pct]
    spreads = [e.start_spread_pct for _c, e in judged if e.start_spread_pct is not None]
    note = (f"; engine starts: each pair's figure is the median over its starts; a gap must also exceed the "
            f"start-to-start spread (up to {max(spreads):.1f}% here)") if spreads else "; engine starts: no pair measured twice"
    return note + ("; " + "; ".join(swallowed) + ": counted as within noise" if swallowed else "")


def _gain_words(comparisons: Sequence[Comparison]) -> str:
    parts = []
    for c in comparisons:
        e2e = c.end_to_end
        if e2e and e2e.margin_pct is not None:
            parts.append(f"{e2e.margin_pct:+.1f}% tokens/s at {c.shape} (noise {e2e.noise_pct:.1f}%)")
    return "; ".join(parts)


def _verdict_text(word: EngineVerdict, pick: dict, comparisons: Sequence[Comparison], flags: str) -> str:
    gains = _gain_words(comparisons)
    paste = f"pass {flags}" if flags else "no flags needed (vLLM's default)"
    if word is EngineVerdict.HOLDS:
        return f"holds end to end: {pick['name']} against vLLM's default: {gains}: {paste}"
    if word is EngineVerdict.WITHIN_NOISE:
        return f"within noise end to end: {pick['name']} against vLLM's default: {gains}: keep vLLM's default, {paste}"
    return f"reversed end to end: {pick['name']} is slower than vLLM's default ({gains}): {paste}"


def _keep_default_text(word: EngineVerdict, subject: dict, comparisons: Sequence[Comparison], pick_is_default: bool,
                       best: BestPair | None, min_gain: float, flags: str) -> str:
    gains = _gain_words(comparisons)
    advice = ("vLLM's default, tune's pick" if pick_is_default else
              f"keeping vLLM's default, as tune advised (its fastest pair was within noise or below --min-gain "
              f"{min_gain:.0f}% at kernel level)")
    if word is EngineVerdict.HOLDS:
        return (f"holds: {advice}; end to end {subject['name']} gives {gains}: no pair gains the {min_gain:.0f}% "
                f"worth changing flags for without a loss at some shape: no flags needed (vLLM's default)")
    assert best is not None  # reversed: a pair beat the default (summarize)
    return (f"reversed: {best.name} beats vLLM's default end to end by {best.gain_pct:+.1f}% tokens/s "
            f"(geometric mean over the shapes, none slower), at least the {min_gain:.0f}% worth changing flags for, "
            f"against {advice} ({subject['name']}: {gains}): pass {flags}")
