"""report.md of the release kit (bench/tools/release_kit.py): "what changed since the previous release",
rendered from summary.json (release_kit_report.summarize) and nothing else."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return "`" + text.replace("`", "'") + "`"


def _steps(summary: dict) -> list[str]:
    lines = ["## Steps", "", "| step | exit | seconds | log | outputs |", "|---|---|---|---|---|"]
    for s in summary["steps"]:
        outputs = ", ".join(s.get("outputs", {}).values()) or "-"
        note = f" ({s['note']})" if s.get("note") else ""
        lines.append(f"| {s['name']} | {s['exit']}{note} | {s['seconds']} | {s['log']} | {outputs} |")
    lines += ["", "Command lines:", ""] + [f"- {s['name']}: {_code(' '.join(s['argv']))}" for s in summary["steps"]]
    return lines


def _derive(d: dict, summary: dict) -> list[str]:
    lines = [f"Data keys the release changes against {summary['previous']} (derive_profile's patch, "
             f"{summary['profile_name']}.json in this folder): " + (", ".join(d["changed_keys"]) or "none") + "."]
    lines += [f"- backend {name}: {_code(keys)}" for name, keys in d["backends_changed"].items()]
    if d.get("report"):
        lines += ["", "What derive_profile found:", ""] + [f"- {line}" for line in d["report"]]
    if d["needs_code"]:
        lines += ["", f"Differences that depend on the context, so need code ({len(d['needs_code'])}):", ""]
        lines += [f"- {_code(item)}" for item in d["needs_code"][:20]]
    return lines


def _parity(d: dict, summary: dict) -> list[str]:
    lines = [f"vLLM {d.get('vllm_installed')} (commit {d.get('vllm_commit')}) against the rule profile "
             f"{d.get('profile')}: {d.get('cases_compared')} cases compared (seed {d.get('seed')}), "
             f"**{d.get('mismatching_cases')} mismatching**, ViT mismatches {d.get('vit_mismatches')}, "
             f"{d.get('seconds')} s."]
    if d.get("mismatch_kinds"):
        lines += ["", "| mismatch | cases |", "|---|---|"]
        lines += [f"| {kind} | {n} |" for kind, n in d["mismatch_kinds"].items()]
    if d.get("examples"):
        lines += ["", "What differs, first case of each kind (the profile's answer -> vLLM's):", ""]
        lines += [f"- {e['what']}{' ' + e['backend'] if e['backend'] else ''}: {_code(e['ours'])} -> {_code(e['vllm'])}"
                  for e in d["examples"]]
    if d.get("samples"):
        lines += ["", "First mismatching cases:", ""]
        lines += [f"- CC {s['capability']}: {', '.join(map(str, s['what']))} for {_code(s['inputs'])}" for s in d["samples"]]
    return lines


def _cudagraph(d: dict, summary: dict) -> list[str]:
    lines = ["| backend | recorded in the data | builder's class attribute in the wheel |", "|---|---|---|"]
    for name, b in d["backends"].items():
        here = b.get("error") or b.get("class_attribute")
        lines.append(f"| {name} | {_code(b.get('recorded'))} | {here} |")
    for module, found in d["config_lines"].items():
        lines += ["", f"{module}:", ""] + [f"    {line}" for line in found[:12]]
    return lines


def _hybrid(d: dict, summary: dict) -> list[str]:
    lines = [f"{d['compared']} cases compared, **{d['mismatches']} mismatching** (attnsel's answer vs the release's own "
             f"code; {d['unparsed_modes']} Mamba cache modes the release parses differently)."]
    if d.get("vllm_errors"):
        lines += ["", "The harness could not ask the release (bench/tools/hybrid_live.py needs adapting to it):", ""]
        lines += [f"- {n} cases: {_code(error)}" for error, n in d["vllm_errors"].items()]
    if d["vllm_block_sizes"]:
        lines += ["", "vLLM's block sizes per model and GPU:", ""]
        lines += [f"- {key}: {sizes}" for key, sizes in d["vllm_block_sizes"].items()]
    shown = [s for s in d["samples"] if not s.get("vllm_error")]
    if shown:
        lines += ["", "First mismatches:", ""]
        lines += [f"- {s['model']} CC {s['capability']} {_code(s['flags'])}: {_code(s['differs'])}" for s in shown]
    return lines


def _memory(d: dict, summary: dict) -> list[str]:
    lines = []
    for release, facts in d["releases"].items():
        lines.append(f"{release}: gpu_memory_utilization default {facts['gpu_memory_utilization']}, errors in "
                     f"{facts['error_module']}, CUDA-graph estimate applied {facts['cudagraph_estimate_applied']}.")
        differs = facts["differs_from_previous"]
        lines += ["", f"Where {d['previous']}'s `memory` data says otherwise ({len(differs)}):", ""]
        lines += [f"- {line}" for line in differs] or ["- nothing"]
    return lines


def _adapters(d: dict, summary: dict) -> list[str]:
    source = f"From {d['from']}: " if d.get("from") else f"vLLM {d.get('vllm')} (commit {d.get('wheel_commit')}): "
    lines = [source + ", ".join(f"{n} {k}" for k, n in sorted(d["counts"].items())) + "."]
    if d["samples"]:
        lines += ["", "| backend | kv | block | shape | status | rel. error | cubin | error |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['backend']} | {r['kv_cache_dtype']} | {r['block_size']} | {r['shape']} | {r['status']} | "
                  f"{r.get('rel_error')} | {r.get('flashinfer_cubin')} | {(r.get('error') or '')[:80]} |" for r in d["samples"]]
    return lines


def _engine(d: dict, summary: dict) -> list[str]:
    lines = [f"Checked {d.get('mode')} (profile {d.get('profile')}): log patterns found: "
             f"{', '.join(dict.fromkeys(d['log_patterns_found'])) or 'none'}."]
    if d["log_patterns_missing"]:
        lines += ["", "Log patterns not where the data says:", ""]
        lines += [f"- {m['field']}: not in {m['source']}" + (f" (in {', '.join(m['found_in'])})" if m.get("found_in") else "")
                  for m in d["log_patterns_missing"]]
    if d["arguments_off"]:
        lines += ["", "Engine arguments that did not land where verify expects: " + ", ".join(d["arguments_off"])]
    lines += ["", f"Problems ({len(d['problems'])}):", ""] + ([f"- {p}" for p in d["problems"]] or ["- none"])
    return lines


SECTIONS: tuple[tuple[str, str, Callable[[dict, dict], list[str]]], ...] = (
    ("derive", "Data patch", _derive),
    ("parity", "Selector parity", _parity),
    ("cudagraph", "CUDA-graph facts", _cudagraph),
    ("hybrid", "Hybrid block sizes", _hybrid),
    ("memory", "Memory facts", _memory),
    ("adapters", "Adapter check (tune's adapters on vLLM's classes, CPU)", _adapters),
    ("engine", "Engine arguments and log lines (verify)", _engine),
)


def render(summary: dict) -> str:
    facts = summary["facts"]
    failed = [s["name"] for s in summary["steps"] if s["exit"] != 0]
    lines = [f"# vLLM {summary['vllm_version']}: what changed since {summary['previous']}", "",
             f"Made by `python -m attnsel.bench.tools.release_kit {summary['vllm_version']}` "
             f"(bench/tools/release_kit.py; options {_code(summary['options'])}). The steps checked the rule profile "
             f"that answers for {summary['vllm_version']} here: {summary['profile_checked']}"
             + (f" (no data file of its own yet: {summary['previous']}'s data)." if summary['profile_checked'] == summary['previous']
                else f" (based on {summary['previous']})."),
             "", ("Every step exited 0." if not failed else f"Steps that failed: {', '.join(failed)} (see their logs)."), ""]
    lines += _steps(summary)
    for role, title, section in SECTIONS:
        lines += ["", f"## {title}", ""]
        lines += section(facts[role], summary) if role in facts else ["No output (the step failed or was skipped)."]
    return "\n".join(lines) + "\n"
