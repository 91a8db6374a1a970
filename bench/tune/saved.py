"""A saved sweep read back for `attnsel report`: tune.json carries the recommendation tune made at
the end; a sweep cut short (Ctrl-C, a lost machine) left only results.jsonl, and its
recommendation is made here, by bench, from the rows -- reports/ only render (docs/architecture.md, "Layers")."""

from __future__ import annotations

from collections.abc import Mapping

from attnsel.bench.sweep import results as R
from attnsel.bench.tune.recommend import recommend, stand_in_advice, stand_ins_among
from attnsel.bench.tune.records import Record, ResultRow
from attnsel.bench.tune.verdict import Verdict


def advised_flags(decision: Mapping | Record) -> str | None:
    """The flags a saved recommendation told the user to pass (a tune.json decision, or verify's
    summary of one, as JSON or as its record); None: keep vLLM's default. Documents from before
    `advised_flags` was written advised their flags only for a verdict that advises them (Verdict.FASTER)."""
    if isinstance(decision, Record):
        decision = decision.to_dict()  # the keys the document held: absent and null differ here
    if "advised_flags" in decision:
        return decision["advised_flags"]
    if "above_noise" in decision:
        faster = decision["above_noise"]
    else:
        verdict = Verdict.read(decision.get("verdict"))
        faster = verdict is not None and verdict.advises_flags
    return decision.get("flags") if faster else None


def with_recommendation(document: dict) -> dict:
    """A saved tune result as `attnsel report` renders it: tune.json carries its recommendation;
    a sweep cut short left only results.jsonl, so the recommendation is made here from its rows,
    the workload labels they name and (when the document has one) the plan's vLLM default."""
    if isinstance(document.get("recommendation"), dict):
        return with_todays_verdicts(document)
    rows = document.get("rows") or []
    labels: dict[str, list[str]] = {}
    for row in rows:
        if row.get("status") != R.STATUS_SKIPPED_BY_VLLM and row.get("kind") and row.get("workload_label"):
            kind_labels = labels.setdefault(row["kind"], [])
            if row["workload_label"] not in kind_labels:
                kind_labels.append(row["workload_label"])
    default = (document.get("plan") or {}).get("vllm_default") or {}
    named = default.get("backend") and default.get("block_size")
    vllm_default = (default["backend"], int(default["block_size"])) if named else None
    made = recommend(rows, workload_labels=labels, vllm_default=vllm_default)
    return dict(document, recommendation=made.to_dict())


def with_todays_verdicts(document: dict) -> dict:
    """A saved recommendation read with today's rules, which only ever take advice away: a margin
    that a stand-in for vLLM's own kernel measured (bench/sweep/results.py stand_in_provider)
    advises no flags, whatever the file says (files from before that rule said "faster")."""
    rec = document["recommendation"]
    rows = document.get("rows") or []
    today = dict(rec)
    if isinstance(rec.get("overall"), dict):
        today["overall"] = _todays_decision(rec["overall"], rows)
    if isinstance(rec.get("workloads"), dict):
        today["workloads"] = {kind: _todays_decision(d, rows) if isinstance(d, dict) else d
                              for kind, d in rec["workloads"].items()}
    return document if today == rec else dict(document, recommendation=today)


def _todays_decision(decision: dict, rows: list) -> dict:
    if Verdict.read(decision.get("verdict")) is not Verdict.FASTER:
        return decision
    best, default = decision.get("best"), decision.get("vllm_default")
    pairs = {(p.get("backend"), p.get("block_size")) for p in (best, default) if isinstance(p, dict)}
    scope = decision.get("scope")
    compared = [r for r in rows if isinstance(r, dict) and (r.get("backend"), r.get("block_size")) in pairs
                and scope in (None, "overall", r.get("kind"))]
    stand_in = stand_ins_among([ResultRow.from_dict(r) for r in compared])
    if stand_in is None or not isinstance(best, dict):
        return decision
    margin = decision.get("margin_pct")
    best_text = f"{best.get('backend')} with --block-size {best.get('block_size')}"
    return dict(decision, verdict=Verdict.STAND_IN.value, stand_in=stand_in, above_noise=False, advised_flags=None,
                advice=stand_in_advice(best_text, float(margin) if isinstance(margin, (int, float)) else 0.0, stand_in))
