"""The release kit's findings (bench/tools/release_kit.py): each step's outputs read back into a digest
(`summarize`: summary.json) and rendered as Markdown (`render_markdown`: report.md, "what changed since
the previous release"). Reads only what the steps wrote into --out; a step that failed or wrote nothing
has no digest, and the report says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEADER_KEYS = ("name", "base", "vllm_version", "vllm_release", "answers_for", "description")
SAMPLES = 8  # mismatches / rows shown per step in the report


def _load_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def json_documents(text: str) -> list[Any]:
    """The JSON documents printed one after another (cudagraph_facts' stdout).

    >>> json_documents('{"a": 1}\\n{"b": [2]}\\n')
    [{'a': 1}, {'b': [2]}]
    """
    decoder, at = json.JSONDecoder(), 0
    docs: list[Any] = []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return docs
        try:
            doc, at = decoder.raw_decode(text, at)
        except ValueError:
            return docs
        docs.append(doc)


def derive_digest(doc: dict) -> dict:
    """The data patch and what in it changed: top-level keys, backends touched, rules that need code."""
    patch = doc.get("patch") or {}
    changed = sorted(k for k in patch if k not in HEADER_KEYS)
    raw = patch.get("backends")
    backends: dict = raw if isinstance(raw, dict) else {}
    return {"patch": patch, "changed_keys": changed,
            "backends_changed": {name: sorted(v) if isinstance(v, dict) else v for name, v in sorted(backends.items())},
            "needs_code": list(doc.get("needs_code") or []), "report": list(doc.get("report") or [])}


def parity_digest(doc: dict) -> dict:
    keep = ("vllm_installed", "vllm_commit", "profile", "profile_reason", "seed", "cases_compared", "cases_skipped",
            "mismatching_cases", "mismatch_kinds", "vit_cases", "seconds", "stubbed_extensions")
    vit = doc.get("vit_mismatches")
    return {**{k: doc.get(k) for k in keep}, "vit_mismatches": len(vit) if isinstance(vit, list) else vit,
            "samples": [_parity_sample(m) for m in (doc.get("mismatches") or [])[:SAMPLES]],
            "examples": _parity_examples(doc.get("mismatches") or [])}


def _parity_examples(mismatches: list[dict]) -> list[dict]:
    """The first mismatch of each kind (what, backend): what differs between the profile and vLLM --
    for lists, the items only one side has."""
    seen: dict[tuple, dict] = {}
    for case in mismatches:
        for m in case.get("mismatches") or []:
            key = (m.get("what"), m.get("backend") if m.get("what") != "config repr" else None)
            if key in seen or len(seen) >= 2 * SAMPLES:
                continue
            ours, live = m.get("ours"), m.get("live")
            if isinstance(ours, list) and isinstance(live, list):
                ours, live = [x for x in ours if x not in live], [x for x in live if x not in ours]
            elif isinstance(ours, str) and isinstance(live, str):
                ours, live = _differing_words(ours, live)
            seen[key] = {"what": key[0], "backend": key[1], "ours": ours, "vllm": live}
    return list(seen.values())


def _differing_words(ours: str, live: str) -> tuple[str, str]:
    """Two long texts (a config repr) cut to the comma-separated parts that differ."""
    a, b = ours.split(", "), live.split(", ")
    return ", ".join(x for x in a if x not in b)[:300], ", ".join(x for x in b if x not in a)[:300]


def _parity_sample(mismatch: dict) -> dict:
    what = [f"{m.get('what')}:{m.get('backend')}" for m in mismatch.get("mismatches") or []]
    return {"inputs": mismatch.get("inputs"), "capability": (mismatch.get("context") or {}).get("capability"),
            "what": what or [mismatch.get("live_exception", "?")]}


def cudagraph_digest(text: str) -> dict:
    """Per backend: the profile's recorded support level and the builder's class attribute in the wheel;
    then the config lines that settle the mode and capture sizes (cudagraph_facts' last document)."""
    backends, config = {}, {}
    for doc in json_documents(text):
        if not isinstance(doc, dict):
            continue
        if "recorded" in doc:  # the config document: {"recorded": {...}, "<module>": [lines]}
            config = {k: v for k, v in doc.items() if k != "recorded" and isinstance(v, list)}
            continue
        for name, facts in doc.items():
            if name.startswith("_"):  # a comment of the data (`_sparse`), not a backend
                continue
            error = facts.get("error")
            backends[name] = {"recorded": facts.get("recorded"), "class_attribute": facts.get("class_attribute_here"),
                              "builder": facts.get("builder"), "error": error[:160] if error else None}
    return {"backends": backends, "config_lines": config}


def hybrid_digest(doc: dict) -> dict:
    cases = doc.get("cases") or []
    block_sizes: dict[str, set] = {}
    for case in cases:
        vllm = case.get("vllm") or {}
        if isinstance(vllm, dict) and vllm.get("block_size") is not None:
            block_sizes.setdefault(f"{case['model']} {case.get('capability')}", set()).add(vllm["block_size"])
    wrong = [c for c in cases if c.get("vllm") != c.get("attnsel")]
    errors: dict[str, int] = {}
    for case in cases:
        if case.get("vllm_error"):  # the harness could not ask the release (a stand-in it lacks)
            errors[case["vllm_error"]] = errors.get(case["vllm_error"], 0) + 1
    return {"compared": doc.get("compared"), "mismatches": doc.get("mismatches"), "vllm_errors": errors,
            "vllm_block_sizes": {k: sorted(v) for k, v in sorted(block_sizes.items())},
            "samples": [_hybrid_sample(c) for c in wrong[:SAMPLES]],
            "unparsed_modes": len(doc.get("unparsed_modes") or [])}


def _hybrid_sample(case: dict) -> dict:
    ours, theirs = case.get("attnsel") or {}, case.get("vllm") or {}
    keys = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)) if isinstance(theirs, dict) else []
    return {"model": case.get("model"), "capability": case.get("capability"), "flags": case.get("flags"),
            "differs": {k: {"attnsel": ours.get(k), "vllm": theirs.get(k)} for k in keys},
            "vllm_error": case.get("vllm_error")}


def memory_digest(doc: dict, previous: str) -> dict:
    """The release's memory facts and where they differ from the previous release's data."""
    from attnsel.attention.versions import get_profile
    from attnsel.bench.tools.memory_facts import differences

    rules = get_profile(previous).memory
    out = {}
    for release, facts in doc.items():
        out[release] = {"gpu_memory_utilization": facts.get("gpu_memory_utilization"),
                        "error_module": facts.get("error_module"),
                        "cudagraph_estimate_applied": facts.get("cudagraph_estimate_applied"),
                        "differs_from_previous": differences(facts, rules)}
    return {"releases": out, "previous": previous}


def adapters_digest(doc: dict) -> dict:
    rows = doc.get("rows") or []
    counts: dict[str, int] = {}
    for row in rows:
        counts[_row_status(row)] = counts.get(_row_status(row), 0) + 1
    shown = [r for r in rows if _row_status(r) == "BAD"] + [r for r in rows if _row_status(r) == "vLLM fault"]
    return {"vllm": doc.get("vllm"), "wheel_commit": doc.get("wheel_commit"), "counts": counts,
            "samples": [{k: r.get(k) for k in ("backend", "kv_cache_dtype", "block_size", "shape", "rel_error",
                                               "flashinfer_cubin", "error")} | {"status": _row_status(r)}
                        for r in shown[:2 * SAMPLES]]}


# a row as vllm_cpu_check._print_row prints it: status, backend, bs=N, the shape, then the outcome
_PRINTED_ROW = re.compile(r"^(ok |BAD|vLLM|--) +(\S+) +bs=(\d+) +(.+?) +"
                          r"(err \S+.*|refused by vLLM.*|skipped.*|\w+(?:Error|Exception|Interrupt)\b.*)$")
_PRINTED_STATUS = {"ok": "ok", "BAD": "BAD", "vLLM": "vLLM fault", "--": "refused or skipped"}


def printed_rows_digest(stdout: str) -> dict | None:
    """The adapter check's rows as it printed them, where it wrote no recording (it stopped first).

    >>> printed_rows_digest("ok  FLASH_ATTN     bs=16  decode b3 ctx200 h8/2 d64 float16   err 2.08e-04 launch=eager (0.13 s)")["counts"]
    {'ok': 1}
    """
    rows: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        match = _PRINTED_ROW.match(line)
        if match:
            status, backend, block, shape, outcome = match.groups()
            rows.append({"status": _PRINTED_STATUS[status.strip()], "backend": backend, "block_size": int(block),
                         "shape": shape.strip(), "kv_cache_dtype": "fp8" if " kv fp8" in shape else "auto",
                         "error": outcome.strip(), "flashinfer_cubin": "(no cubin)" not in outcome})
    if not rows:
        return None
    counts: dict[str, int] = {}
    for row in rows:
        status = str(row["status"])
        counts[status] = counts.get(status, 0) + 1
    shown = [r for r in rows if r["status"] == "BAD"] + [r for r in rows if r["status"] == "vLLM fault"]
    return {"vllm": None, "wheel_commit": None, "counts": counts, "from": "the check's printed rows (no recording)",
            "samples": shown[:2 * SAMPLES]}


def log_stdout(path: Path) -> str:
    """The stdout section of a step's log (release_kit.run_step writes it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ""
    return text.split("\n--- stdout\n", 1)[-1].split("\n--- stderr\n", 1)[0]


def _row_status(row: dict) -> str:
    if row.get("vllm_fault"):
        return "vLLM fault"
    ok = row.get("ok")
    return "ok" if ok is True else "BAD" if ok is False else "refused or skipped"


def engine_digest(doc: dict) -> dict:
    patterns = doc.get("log_patterns") or []
    return {"vllm_version": doc.get("vllm_version"), "profile": doc.get("profile"), "mode": doc.get("mode"),
            "problems": list(doc.get("problems") or []),
            "log_patterns_found": [p["field"] for p in patterns if p.get("found")],
            "log_patterns_missing": [{"field": p["field"], "source": p.get("source"), "found_in": p.get("found_in")}
                                     for p in patterns if not p.get("found")],
            "arguments_off": [c["case"] for c in doc.get("cases") or [] if c.get("off") or c.get("error")]}


# role of a step's output -> how it is read
READERS: dict[str, Callable[[Path, str], dict | None]] = {
    "derive": lambda p, _prev: derive_digest(d) if isinstance(d := _load_json(p), dict) else None,
    "parity": lambda p, _prev: parity_digest(d) if isinstance(d := _load_json(p), dict) else None,
    "cudagraph": lambda p, _prev: cudagraph_digest(p.read_text(encoding="utf-8")) if p.is_file() else None,
    "hybrid": lambda p, _prev: hybrid_digest(d) if isinstance(d := _load_json(p), dict) else None,
    "memory": lambda p, prev: memory_digest(d, prev) if isinstance(d := _load_json(p), dict) else None,
    "adapters": lambda p, _prev: adapters_digest(d) if isinstance(d := _load_json(p), dict) else None,
    "engine": lambda p, _prev: engine_digest(d) if isinstance(d := _load_json(p), dict) else None,
}


def summarize(version: str, profile_name: str, previous: str, steps: list[dict], out: Path, *,
              options: dict | None = None) -> dict:
    """summary.json: the steps as run and, per output a step left, its digest."""
    from attnsel.attention.versions import select_profile

    facts: dict[str, Any] = {}
    for step in steps:
        for role, name in step.get("outputs", {}).items():
            reader = READERS.get(role)
            digest = reader(out / name, previous) if reader else None
            if digest is not None:
                facts[role] = digest
        if step["name"] == "adapters" and "adapters" not in facts:
            digest = printed_rows_digest(log_stdout(out / step["log"]))
            if digest is not None:
                facts["adapters"] = digest
    checked = select_profile(version).profile.name
    return {"schema": "attnsel-release-kit/1", "vllm_version": version, "profile_name": profile_name,
            "previous": previous, "profile_checked": checked, "options": options or {}, "steps": steps,
            "facts": facts}


def render_markdown(summary: dict) -> str:
    from attnsel.bench.tools.release_kit_markdown import render

    return render(summary)
