"""Parity check: a rule profile vs the REAL vLLM installed here, over a large random grid of selector inputs.

    python -m attnsel.bench.tools.parity_live [--vllm-version X] [--cases N] [--seed S] [--focus fp8-blackwell]
                                              [--case JSON|FILE ...] [--out FILE] [--record FILE] [--record-size N]

Run it with the Python of an environment where vLLM is installed (any machine: no GPU needed); for a
release other than the installed one, `python -m attnsel.bench.tools.release_env run 0.24.0 --
-m attnsel.bench.tools.parity_live ...` builds and uses that release's environment.

What it drives is vLLM's own code, not a copy (attention/explain/live.py `ask_vllm`): the release's
start-up on a stand-in VllmConfig -- `check_and_update_config` where the block size is settled at
config time (0.17 and older), `get_attn_backend_cls` for the layers' choice, `get_valid_backends`
(vLLM's priority list for the target capability, then each backend's real `validate_configuration`)
with the selector config the layers really pass, `validate_configuration` of an explicit
`--attention-backend`, and `Platform.update_block_size_for_backend` (0.18 on) with the selected
backend as every layer's (`_find_non_ssm_backend(s)` reads the built model, which a harness without a
model lacks: docs/vllm-rules.md §10; a hybrid model's Mamba alignment is left out, phase 1 only).
attention/explain/live_runtime.py (`offline=True`) sets up what a real start-up on the target GPU would give
those functions, and nothing else:
- `current_platform` is a `CudaPlatformBase` subclass reporting the target capability;
- the current VllmConfig is a stand-in built from the case (attention_config with the backend,
  flash_attn_version / use_trtllm_attention / use_non_causal, a model config with the head size,
  head counts and MLA dims, the cache dtype and block size, the DCP/PCP sizes);
  VLLM_BATCH_INVARIANT follows the case; vLLM's functools caches are cleared when the target changes.
Assumptions aligned with attnsel's default `SelectionContext` ("every package vLLM ships with is
present"), because this machine has no GPU driver (docs/vllm-rules.md §10):
- compiled vLLM extensions that cannot be loaded without libcuda.so.1 are empty stand-in modules
  (the selection path only imports them);
- `VLLM_HAS_FLASHINFER_CUBIN=1`, and `FLASHINFER_CUBINS_REPOSITORY` points at a closed local port,
  so no request leaves the machine.

Every case runs through the profile (`explain`) and through vLLM; the JSON document gives the counts,
per-dimension coverage and the mismatches (valid set, reasons, priority order, explicit backend,
selected backend, block size, the selector config text). `--record` writes the compact evidence that
tests/test_parity_recorded.py replays without vLLM. `--case` (repeatable) asks about given cases instead
of the random grid: a JSON object `{"inputs": {SelectorInputs fields}, "context": {SelectionContext
fields}}` (a mismatch or a recorded case of an earlier run has this form), or a file holding one or a
list of them; every given case is recorded (tests/test_parity_corners.py replays such corners). Exit 0 when everything matches, 1 otherwise,
2 without vLLM.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from attnsel.bench.tools.parity_grid import CAPABILITIES, DTYPES, FOCUS, cases


def _cuda_backends(profile: Any) -> list[str]:
    """Backends an explicit --attention-backend may name in the sweep: those the profile models."""
    not_modelled = set(profile.data.get("not_modelled", {}))
    return [n for n in profile.backend_names if n not in not_modelled]


def _coverage_key(inputs: Any, ctx: Any) -> dict[str, Any]:
    keys: dict[str, Any] = {
        "capability": f"{ctx.capability[0]}.{ctx.capability[1]}",
        "head_size": inputs.head_size,
        "dtype": inputs.dtype,
        "kv_cache_dtype": inputs.kv_cache_dtype,
        "block_size": inputs.block_size,
        "attn_type": inputs.attn_type,
        "mla": inputs.use_mla,
        "explicit_backend": ctx.user_backend,
    }
    for name in ("has_sink", "use_sparse", "use_mm_prefix", "use_per_head_quant_scales", "has_sliding_window",
                 "use_non_causal", "use_batch_invariant", "use_kv_connector", "use_pcp",
                 "use_adaptive_verification", "use_dcp", "use_rswa"):
        if getattr(inputs, name, False):
            keys.setdefault("flags", []).append(name)
    for name in ("use_trtllm_attention", "flash_attn_version_override", "num_heads", "num_kv_heads", "is_hybrid",
                 "decode_context_parallel_size", "prefill_context_parallel_size", "batch_invariant"):
        value = getattr(ctx, name)
        shown = value is not None and (name == "use_trtllm_attention" or value is not False)
        if shown and not (type(value) is int and value == 1):
            keys.setdefault("context", []).append(f"{name}={value}")
    if not ctx.has_flashinfer_cubin:
        keys.setdefault("context", []).append("has_flashinfer_cubin=False")
    return keys


def _record_case(inputs: Any, ctx_kw: dict, live: Any) -> dict:
    return {
        "inputs": {k: v for k, v in inputs.to_dict().items() if v not in (False,) or k in ("use_mla",)},
        "context": {k: (list(v) if isinstance(v, tuple) else v) for k, v in ctx_kw.items()},
        "vllm": {
            "backends": [[b.name, b.priority, list(b.reasons)] for b in live.backends],
            "explicit_backend": [live.explicit_backend.name, list(live.explicit_backend.reasons)]
            if live.explicit_backend else None,
            "selected": live.selected,
            "block_size": live.block_size,
            "config_repr": live.config_repr,
        },
    }


def _pick_records(records: list[dict], size: int, seed: int) -> list[dict]:
    """Up to `size` recorded cases: every mismatch-free case class represented (capability x MLA x
    explicit x valid/no-valid), then random others; deterministic for a seed."""
    rng = random.Random(seed)
    by_class: dict[tuple, list[dict]] = {}
    for record in records:
        cls = (
            tuple(record["context"]["capability"]),
            bool(record["inputs"].get("use_mla")),
            record["context"].get("user_backend") is not None,
            record["vllm"]["selected"],
        )
        by_class.setdefault(cls, []).append(record)
    picked = [rng.choice(group) for _cls, group in sorted(by_class.items(), key=lambda kv: repr(kv[0]))]
    rng.shuffle(picked)
    picked = picked[:size]
    chosen = {id(r) for r in picked}
    rest = [r for r in records if id(r) not in chosen]
    picked += rng.sample(rest, min(len(rest), size - len(picked)))
    return picked


VIT_HEADS = [8, 16, 24, 32, 40, 48, 64, 72, 80, 88, 96, 104, 112, 120, 128, 160, 192, 256, 264, 320, 512, 520, 640]


def vit_parity(runtime: Any, profile: Any) -> dict:
    """`CudaPlatformBase.get_vit_attn_backend(head_size, dtype)` (no override) on every capability,
    head size and dtype, against attention/selector/vit.py."""
    import types

    from attnsel.attention.selector import vit_backend

    answers: dict[str, list[str]] = {}
    mismatches = []
    for cc in CAPABILITIES:
        for dtype in DTYPES:
            row = []
            inputs = types.SimpleNamespace(head_size=128, dtype=dtype, use_mm_prefix=False, use_mla=False,
                                           kv_cache_dtype="auto", block_size=None, use_rswa=False,
                                           use_non_causal=False)
            ctx = _vit_context(cc)
            with runtime.case(inputs, ctx):
                for head in VIT_HEADS:
                    theirs = runtime.platform_cls.get_vit_attn_backend(head, _torch_dtype(dtype)).name
                    ours = vit_backend(profile, head, dtype, cc).backend
                    row.append(theirs)
                    if ours != theirs:
                        mismatches.append({"capability": list(cc), "dtype": dtype, "head_size": head,
                                           "ours": ours, "vllm": theirs})
            answers[f"{cc[0]}.{cc[1]}/{dtype}"] = row
    return {"heads": VIT_HEADS, "answers": answers, "cases": len(CAPABILITIES) * len(DTYPES) * len(VIT_HEADS),
            "mismatches": mismatches}


def _vit_context(cc: tuple[int, int]) -> Any:
    from attnsel.attention.rules import SelectionContext

    return SelectionContext(capability=cc)


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _compare_case(profile: Any, inputs: Any, ctx: Any) -> tuple[Any, Any, list]:
    from attnsel.attention.explain import Mismatch, ask_vllm, compare
    from attnsel.attention.selector import explain

    ours = explain(profile, inputs, ctx)
    live = ask_vllm(inputs, ctx, offline=True)
    found = compare(ours, live)
    # the config text inside vLLM's "No valid attention backend found ... with {cfg}" messages
    evaluated = profile.block_size_flow.layer_inputs(inputs).vllm_repr(profile)
    if live.config_repr is not None and evaluated != live.config_repr:
        found.append(Mismatch("config repr", None, evaluated, live.config_repr))
    return ours, live, found


def given_cases(specs: list[str]) -> list[tuple[dict, dict]]:
    """`--case` values: inline JSON objects or files of one object or a list, as (inputs, context) kwargs."""
    found: list[tuple[dict, dict]] = []
    for spec in specs:
        text = spec if spec.lstrip().startswith(("{", "[")) else Path(spec).read_text(encoding="utf-8")
        loaded = json.loads(text)
        for case in loaded if isinstance(loaded, list) else [loaded]:
            ctx = dict(case.get("context", {}))
            ctx["capability"] = tuple(ctx["capability"])
            found.append((dict(case["inputs"]), ctx))
    return found


def run(version_flag: str | None, count: int, seed: int, record_size: int,
        focus: str = "all", chosen: list[tuple[dict, dict]] | None = None) -> tuple[dict, list[dict]]:
    from attnsel.attention.explain import require_vllm, vllm_runtime
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.selector import strip_unknown_inputs
    from attnsel.attention.versions import select_profile
    from attnsel.errors import AttnselError

    installed = require_vllm()
    choice = select_profile(version_flag)
    profile = choice.profile
    runtime = vllm_runtime(offline=True)
    logging.getLogger("vllm").setLevel(logging.CRITICAL)  # vLLM's FA-version errors etc.: noise here
    mismatches: list[dict] = []
    kinds: Counter = Counter()
    skipped: Counter = Counter()
    coverage: dict[str, Counter] = {}
    records: list[dict] = []
    checked = 0
    start = time.perf_counter()
    grid = chosen if chosen is not None else cases(
        count, seed, profile.cache_dtypes, _cuda_backends(profile),
        {n for n in profile.backend_names if profile.backend(n).mla}, focus)
    all_cases = sorted(grid, key=lambda case: (case[1]["capability"], bool(case[1].get("batch_invariant"))))
    for inputs_kw, ctx_kw in all_cases:
        inputs, _notes = strip_unknown_inputs(profile, SelectorInputs(**inputs_kw))
        ctx = SelectionContext(**ctx_kw)
        shown_inputs = {k: v for k, v in inputs.to_dict().items() if v not in (False, None)}
        try:
            _ours, live, found = _compare_case(profile, inputs, ctx)
        except AttnselError as exc:  # e.g. a flag value this profile rejects as bad input
            skipped[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 -- a vLLM crash is itself a finding
            mismatches.append({"inputs": shown_inputs, "context": ctx_kw,
                               "live_exception": f"{type(exc).__name__}: {exc}"})
            kinds["live exception"] += 1
            continue
        checked += 1
        for key, value in _coverage_key(inputs, ctx).items():
            for item in value if isinstance(value, list) else [value]:
                coverage.setdefault(key, Counter())[str(item)] += 1
        if found:
            for m in found:
                kinds[f"{m.what}:{m.backend}"] += 1
            mismatches.append({"inputs": shown_inputs, "context": ctx_kw, "mismatches": [m.to_dict() for m in found]})
        else:
            records.append(_record_case(inputs, ctx_kw, live))
    vit = vit_parity(runtime, profile)
    doc = {
        "vllm_installed": installed,
        "vllm_commit": getattr(importlib_version(), "commit_id", None),
        "api": runtime.api,
        "profile": profile.name,
        "profile_reason": choice.reason,
        "seed": seed,
        "focus": "given cases" if chosen is not None else focus,
        "cases_compared": checked,
        "cases_skipped": dict(skipped),
        "mismatching_cases": len(mismatches),
        "mismatch_kinds": dict(kinds.most_common()),
        "vit_cases": vit["cases"],
        "vit_mismatches": vit["mismatches"],
        "stubbed_extensions": runtime.stubbed,
        "seconds": round(time.perf_counter() - start, 1),
        "coverage": {k: dict(sorted(v.items())) for k, v in coverage.items()},
        "vit": vit,
        "mismatches": mismatches,
    }
    return doc, records if chosen is not None else _pick_records(records, record_size, seed)


def importlib_version() -> Any:
    import importlib

    try:
        return importlib.import_module("vllm._version")
    except ImportError:
        return None


def evidence(doc: dict, records: list[dict]) -> dict:
    """The compact document tests/test_parity_recorded.py replays."""
    return {
        "what": "vLLM's own start-up answers (get_valid_backends / validate_configuration / "
                "get_attn_backend_cls / the block-size flow on CUDA), recorded by bench/tools/parity_live.py",
        "vllm_version": doc["vllm_installed"],
        "vllm_commit": doc["vllm_commit"],
        "profile": doc["profile"],
        "seed": doc["seed"],
        "cases_compared": doc["cases_compared"],
        "mismatching_cases": doc["mismatching_cases"],
        "focus": doc["focus"],
        "stubbed_extensions": doc["stubbed_extensions"],
        "vit": {k: doc["vit"][k] for k in ("heads", "answers", "cases")},
        "vit_mismatches": len(doc["vit"]["mismatches"]),
        "coverage": {k: len(v) for k, v in doc["coverage"].items()},
        "coverage_values": {k: sorted(v) for k, v in doc["coverage"].items()
                            if k in ("capability", "head_size", "dtype", "kv_cache_dtype", "block_size",
                                     "attn_type", "flags", "context", "explicit_backend")},
        "cases": records,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-version", default=None, help="profile to check (default: the installed vLLM's)")
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--out", default=None, help="also write the full JSON document to this file")
    parser.add_argument("--record", default=None, help="write compact replay evidence to this file")
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument("--focus", choices=sorted(FOCUS), default="all",
                        help="bias half the grid towards one corner (fp8-blackwell: CC 10.x, fp8 KV, FA overrides)")
    parser.add_argument("--case", action="append", default=[],
                        help='a case instead of the grid: {"inputs": {...}, "context": {...}} or a file of them')
    parser.add_argument("--max-print", type=int, default=50, help="mismatches printed on stdout")
    ns = parser.parse_args(argv)
    from attnsel.errors import UserInputError

    try:
        doc, records = run(ns.vllm_version, ns.cases, ns.seed, ns.record_size, ns.focus,
                           given_cases(ns.case) if ns.case else None)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ns.out:
        Path(ns.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if ns.record:
        Path(ns.record).write_text(json.dumps(evidence(doc, records), separators=(",", ":")) + "\n",
                                   encoding="utf-8")
    shown = {**doc, "coverage": {k: len(v) for k, v in doc["coverage"].items()}, "vit": None,
             "mismatches": doc["mismatches"][: ns.max_print]}
    print(json.dumps(shown, indent=1))
    return 0 if doc["mismatching_cases"] == 0 and not doc["vit_mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
