"""Parity check: a rule profile vs the vLLM installed here, over a sweep of selector inputs.

    python -m attnsel.bench.parity_live [--vllm-version X] [--max-cases N] [--out FILE]

Needs vLLM installed (no GPU: vLLM's CUDA platform takes the compute capability as an argument;
attention/live.py makes `current_platform` report the target capability meanwhile). Sweeps
capabilities 7.0-12.1 x head sizes x dtypes x kv-cache dtypes x block sizes x flags, for non-MLA
and MLA inputs, runs each through the profile (`explain`) and through vLLM's own selector, and
prints ONE JSON document on stdout: counts plus every mismatch (valid set, reasons, priority list,
selected backend, block size). Exit 0 when everything matches, 1 otherwise, 2 without vLLM.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from typing import Iterator

CAPABILITIES = [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]
DENSE_HEADS = [32, 64, 80, 96, 128, 192, 256, 512]
MLA_HEADS = [512, 576]
DTYPES = ["float16", "bfloat16", "float32"]
KV_DTYPES = ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "turboquant_k8v4", "int8_per_token_head"]
MLA_KV_DTYPES = ["auto", "bfloat16", "fp8", "fp8_ds_mla"]
BLOCK_SIZES = [None, 16, 32, 48, 64, 128]
DENSE_FLAGS = [
    {},
    {"has_sink": True},
    {"use_mm_prefix": True},
    {"has_sliding_window": True},
    {"use_non_causal": True},
    {"attn_type": "encoder_only"},
    {"use_batch_invariant": True},
    {"use_dcp": True},
]
MLA_FLAGS = [{}, {"use_sparse": True}, {"use_dcp": True}]


def cases() -> Iterator[tuple[tuple[int, int], dict, dict]]:
    """(capability, SelectorInputs kwargs, SelectionContext kwargs)."""
    for cc, head, dtype, kv, block, flags in itertools.product(
        CAPABILITIES, DENSE_HEADS, DTYPES, KV_DTYPES, BLOCK_SIZES, DENSE_FLAGS
    ):
        ctx = {"batch_invariant": True} if flags.get("use_batch_invariant") else {}
        if flags.get("use_dcp"):
            ctx["decode_context_parallel_size"] = 2
        yield cc, {"head_size": head, "dtype": dtype, "kv_cache_dtype": kv, "block_size": block, **flags}, ctx
    for cc, head, kv, block, flags, heads in itertools.product(
        CAPABILITIES, MLA_HEADS, MLA_KV_DTYPES, BLOCK_SIZES, MLA_FLAGS, [16, 128]
    ):
        ctx = {"num_heads": heads, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
               "has_index_topk": bool(flags.get("use_sparse")), "index_topk": 2048 if flags.get("use_sparse") else None}
        if flags.get("use_dcp"):
            ctx["decode_context_parallel_size"] = 2
        inputs = {"head_size": head, "dtype": "bfloat16", "kv_cache_dtype": kv, "block_size": block,
                  "use_mla": True, **flags}
        yield cc, inputs, ctx


def run(version_flag: str | None, max_cases: int | None) -> dict:
    from attnsel.attention.live import ask_vllm, compare, require_vllm
    from attnsel.attention.rules import select_profile
    from attnsel.attention.selector import SelectionContext, SelectorInputs, explain, strip_unknown_inputs
    from attnsel.errors import AttnselError

    installed = require_vllm()
    choice = select_profile(version_flag)
    profile = choice.profile
    mismatches: list[dict] = []
    skipped: dict[str, int] = {}
    checked = 0
    start = time.perf_counter()
    for cc, inputs_kw, ctx_kw in itertools.islice(cases(), max_cases):
        inputs, _notes = strip_unknown_inputs(profile, SelectorInputs(**inputs_kw))
        ctx = SelectionContext(capability=cc, **ctx_kw)
        try:
            ours = explain(profile, inputs, ctx)
        except AttnselError as exc:  # e.g. a kv dtype this profile does not know
            skipped[type(exc).__name__] = skipped.get(type(exc).__name__, 0) + 1
            continue
        try:
            live = ask_vllm(inputs, ctx)
        except Exception as exc:  # noqa: BLE001 -- a vLLM crash is itself a finding
            mismatches.append({"capability": f"{cc[0]}.{cc[1]}", "inputs": inputs.to_dict(),
                               "context": ctx_kw, "live_exception": f"{type(exc).__name__}: {exc}"})
            continue
        checked += 1
        found = compare(ours, live)
        if found:
            mismatches.append({
                "capability": f"{cc[0]}.{cc[1]}",
                "inputs": inputs.to_dict(),
                "context": ctx_kw,
                "mismatches": [m.to_dict() for m in found],
            })
    return {
        "vllm_installed": installed,
        "profile": profile.name,
        "profile_reason": choice.reason,
        "cases_checked": checked,
        "cases_skipped": skipped,
        "mismatching_cases": len(mismatches),
        "seconds": round(time.perf_counter() - start, 1),
        "mismatches": mismatches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-version", default=None, help="profile to check (default: the installed vLLM's)")
    parser.add_argument("--max-cases", type=int, default=None)
    parser.add_argument("--out", default=None, help="also write the JSON document to this file")
    ns = parser.parse_args(argv)
    from attnsel.errors import UserInputError

    try:
        doc = run(ns.vllm_version, ns.max_cases)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=1)
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    return 0 if doc["mismatching_cases"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
