"""Parity check: a rule profile vs the REAL vLLM installed here, over a large grid of selector inputs.

    python -m attnsel.bench.tools.parity_live [--vllm-version X] [--cases N] [--seed S]
                                        [--out FILE] [--record FILE] [--record-size N]

Run it with the Python of an environment where vLLM is installed (any machine: no GPU needed), e.g.
`/work/venv-vllm033/bin/python -m attnsel.bench.tools.parity_live --record tests/fixtures/parity/parity_033.json`.

What it drives is vLLM's own code, not a copy: `CudaPlatformBase.get_valid_backends(capability, cfg,
num_heads)` (vLLM's priority list for the target capability, then each backend's real
`validate_configuration`), `validate_configuration` of an explicit `--attention-backend`, and
`get_preferred_block_size(16)` of the winner. attention/live.py (`offline=True`) sets up what a real
start-up on the target GPU would give those functions, and nothing else:
- `current_platform` is a `CudaPlatformBase` subclass reporting the target capability (vLLM's FA
  version, FlashMLA, TRT-LLM and FlashInfer helpers read it instead of the argument);
- the current VllmConfig is a stand-in built from the case (attention_config with
  flash_attn_version / use_trtllm_attention / use_non_causal, a model config with the head size,
  head counts and MLA dims, the cache dtype and the DCP/PCP sizes), as `set_current_vllm_config`
  would give at start-up; VLLM_BATCH_INVARIANT follows the case;
- vLLM's functools caches (e.g. `supports_trtllm_attention`) are cleared when the target changes.
Assumptions aligned with attnsel's default `SelectionContext` ("every package vLLM ships with is
present"), because this machine has no GPU driver:
- compiled vLLM extensions that cannot be loaded without libcuda.so.1 (`vllm._C*`, `_flashmla_C`,
  `_vllm_fa2_C`/`_vllm_fa3_C`, ...) are empty stand-in modules: the selection path only imports them;
- `VLLM_HAS_FLASHINFER_CUBIN=1` (has_nvidia_artifactory() is true without its network probe) and
  `FLASHINFER_CUBINS_REPOSITORY` points at a closed local port, so no request leaves the machine.

Every case runs through the profile (`explain`) and through vLLM; the JSON document on stdout gives
the counts, per-dimension coverage and the mismatches (valid set, reasons, priority order, explicit
backend, selected backend, block size). `--record` writes the compact evidence that
tests/test_parity_recorded.py replays without vLLM. Exit 0 when everything matches, 1 otherwise,
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
from typing import Any, Iterator, Optional

CAPABILITIES = [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]
DENSE_HEADS = [16, 24, 32, 36, 40, 48, 64, 72, 80, 96, 100, 104, 112, 128, 130, 160, 192, 200, 256, 257, 320, 384, 512,
               576, 640]
MLA_HEADS = [128, 256, 320, 512, 576, 640]
DTYPES = ["float16", "bfloat16", "float32"]
# kv dtypes are filtered to the profile's CacheDType literal (vLLM asserts on unknown ones)
KV_DTYPES = [
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "nvfp4", "nvfp4_4over6", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "octave_k3v4", "ultraquant_4bit",
]
MLA_KV_DTYPES = ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla", "fp8_e5m2"]
BLOCK_SIZES = [None, None, None, 1, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024]
ATTN_TYPES = ["decoder", "decoder", "decoder", "encoder", "encoder_only", "encoder_decoder"]
# independent flags, each switched on with a small probability (so combinations occur too)
DENSE_FLAGS = ["has_sink", "use_mm_prefix", "has_sliding_window", "use_non_causal", "use_rswa",
               "use_kv_connector", "use_adaptive_verification", "use_per_head_quant_scales"]
MLA_FLAGS = ["use_non_causal", "use_kv_connector", "use_adaptive_verification", "use_mm_prefix", "has_sink"]
CUDA_BACKENDS_SEED = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TREE_ATTN", "FLASH_ATTN_MLA",
                      "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA_SPARSE",
                      "FLASHINFER_MLA_SPARSE"]


def _flag_probability(rng: random.Random) -> bool:
    return rng.random() < 0.12


def _ctx_common(rng: random.Random, inputs: dict, cc: tuple[int, int]) -> dict:
    ctx: dict[str, Any] = {"capability": cc}
    if rng.random() < 0.1:
        ctx["batch_invariant"] = True
        inputs["use_batch_invariant"] = True
    if rng.random() < 0.1:
        ctx["decode_context_parallel_size"] = rng.choice([2, 4])
        inputs["use_dcp"] = True
    if rng.random() < 0.06:
        ctx["prefill_context_parallel_size"] = 2
        inputs["use_pcp"] = True
    if rng.random() < 0.1:
        ctx["use_trtllm_attention"] = rng.choice([False, True])
    if rng.random() < 0.1:
        ctx["flash_attn_version_override"] = rng.choice([2, 3, 4])
    if rng.random() < 0.08:
        ctx["has_flashinfer_cubin"] = False  # no cubins and no artifactory: TRT-LLM attention is off
    return ctx


def dense_case(rng: random.Random, cc: tuple[int, int]) -> tuple[dict, dict]:
    inputs: dict[str, Any] = {
        "head_size": rng.choice(DENSE_HEADS),
        "dtype": rng.choice(DTYPES),
        "kv_cache_dtype": rng.choice(KV_DTYPES[:6] * 3 + KV_DTYPES),
        "block_size": rng.choice(BLOCK_SIZES),
        "attn_type": rng.choice(ATTN_TYPES),
    }
    for flag in DENSE_FLAGS:
        if _flag_probability(rng):
            inputs[flag] = True
    ctx = _ctx_common(rng, inputs, cc)
    if rng.random() < 0.4:
        heads = rng.choice([8, 16, 32, 64])
        ctx["num_heads"] = heads
        ctx["num_kv_heads"] = rng.choice([h for h in (1, 2, 4, 8, heads) if heads % h == 0])
    if rng.random() < 0.05:
        ctx["is_hybrid"] = True
        ctx["mamba_cache_float32"] = rng.random() < 0.5
    return inputs, ctx


def mla_case(rng: random.Random, cc: tuple[int, int]) -> tuple[dict, dict]:
    sparse = rng.random() < 0.4
    inputs: dict[str, Any] = {
        "head_size": rng.choice(MLA_HEADS[2:] * 4 + MLA_HEADS),
        "dtype": rng.choice(["bfloat16", "bfloat16", "float16", "float32"]),
        "kv_cache_dtype": rng.choice(MLA_KV_DTYPES),
        "block_size": rng.choice(BLOCK_SIZES),
        "use_mla": True,
        "use_sparse": sparse,
        "attn_type": "decoder" if rng.random() < 0.95 else "encoder_only",
    }
    for flag in MLA_FLAGS:
        if _flag_probability(rng):
            inputs[flag] = True
    ctx = _ctx_common(rng, inputs, cc)
    ctx["num_heads"] = rng.choice([None, 4, 8, 16, 32, 64, 128])
    # (qk_nope, qk_rope, v, kv_lora_rank): DeepSeek R1/V3, variants, GLM-5-Next-like NoPE; an MLA
    # model config always has all four
    dims = rng.choice([(128, 64, 128, 512), (128, 64, 128, 512), (64, 64, 128, 512), (192, 64, 128, 512),
                       (256, 0, 256, 512), (128, 0, 128, 512), (128, 64, 128, 256), (128, 32, 128, 512)])
    for name, value in zip(("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"), dims):
        if value is not None:
            ctx[name] = value
    if sparse or rng.random() < 0.1:
        if rng.random() < 0.85:
            ctx["has_index_topk"] = True
            ctx["index_topk"] = rng.choice([2048, 2048, 512, 1000])
    return inputs, ctx


def cases(
    count: int, seed: int, kv_dtypes: tuple[str, ...], backends: list[str], mla_backends: set[str]
) -> Iterator[tuple[dict, dict]]:
    """`count` cases, the same for a given seed: every capability in turn, 60 % dense, 40 % MLA,
    10 % with an explicit --attention-backend."""
    rng = random.Random(seed)
    produced = 0
    while produced < count:
        cc = CAPABILITIES[produced % len(CAPABILITIES)]
        inputs, ctx = (mla_case if rng.random() < 0.4 else dense_case)(rng, cc)
        if inputs["kv_cache_dtype"] not in kv_dtypes:
            inputs["kv_cache_dtype"] = rng.choice(["auto", "bfloat16", "fp8"])
        if rng.random() < 0.1:
            # an explicit backend of the same family: vLLM's MLA rules read MLA dims that a
            # non-MLA model config lacks (AttributeError inside vLLM, no answer to compare)
            family = [b for b in backends if (b in mla_backends) == bool(inputs.get("use_mla"))]
            ctx["user_backend"] = rng.choice(family)
        produced += 1
        yield inputs, ctx


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


def release_flow(runtime: Any, inputs: Any, ctx: Any) -> Optional[dict]:
    """For vLLM releases before 0.18 (0.16/0.17: no seed-era `select_attention_backend`): vLLM's own
    start-up path for the same inputs -- the real `CudaPlatformBase.check_and_update_config` on a
    stand-in VllmConfig (block size 16 when unset; MLA block forcing; FLASHINFER_MLA forced on
    Blackwell), then the layer selection of `get_attn_backend_cls`, which drops the block size
    (`cfg._replace(block_size=None)`). The seed differs here BY DESIGN (vllm-rules §5d, §5f, §5g)."""
    import types

    from attnsel.attention.live import dtype_error

    platform = runtime.platform_cls
    if runtime.api != "pairs" or not hasattr(platform, "check_and_update_config"):
        return None
    enum = runtime.registry.AttentionBackendEnum
    text = types.SimpleNamespace()
    for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"):
        if getattr(ctx, name) is not None:
            setattr(text, name, getattr(ctx, name))
    if ctx.has_index_topk:
        text.index_topk = ctx.index_topk or 2048
    user = enum[ctx.user_backend] if ctx.user_backend else None
    config = types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(worker_cls="auto"),
        cache_config=types.SimpleNamespace(block_size=inputs.block_size),
        model_config=types.SimpleNamespace(use_mla=inputs.use_mla, hf_config=text, hf_text_config=text,
                                           is_mm_prefix_lm=inputs.use_mm_prefix),
        attention_config=types.SimpleNamespace(backend=user),
        scheduler_config=types.SimpleNamespace(is_multimodal_model=False, disable_chunked_mm_input=False),
    )
    capability = runtime.capability(ctx.capability)
    layer_cfg = runtime.selector_config(inputs)._replace(block_size=None)
    with runtime.case(inputs, ctx):
        if dtype_error(runtime, layer_cfg) is not None:
            return {"selected": None, "block_size": inputs.block_size, "forced_backend": None}
        platform.check_and_update_config(config)
        backend = config.attention_config.backend
        if backend is not None:
            try:
                reasons = backend.get_class().validate_configuration(device_capability=capability, **layer_cfg._asdict())
            except ImportError:
                reasons = ["ImportError"]
            selected = None if reasons else backend.name
        else:
            valid, _invalid = runtime.cuda.CudaPlatformBase.get_valid_backends(capability, layer_cfg, ctx.num_heads)
            selected = min(valid, key=lambda item: item[1])[0].name if valid else None
    return {
        "selected": selected,
        "block_size": config.cache_config.block_size,
        "forced_backend": backend.name if backend is not None and user is None else None,
    }


VIT_HEADS = [8, 16, 24, 32, 40, 48, 64, 72, 80, 88, 96, 104, 112, 120, 128, 160, 192, 256, 264, 320, 512, 520, 640]


def vit_parity(runtime: Any, profile: Any) -> dict:
    """`CudaPlatformBase.get_vit_attn_backend(head_size, dtype)` (no override) on every capability,
    head size and dtype, against attention/vit.py."""
    import types

    from attnsel.attention.vit import vit_backend

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
    from attnsel.attention.selector import SelectionContext

    return SelectionContext(capability=cc)


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _flow_difference(ours: Any, flow: dict, inputs: Any, ctx: Any) -> Optional[str]:
    """Why a 0.16/0.17 release start-up differs from the seed's (None: it does not)."""
    if ours.selected is None and flow["selected"] is None:
        return None
    if flow["selected"] != ours.selected:
        if flow["forced_backend"]:
            return f"selected: 0.17 check_and_update_config forces {flow['forced_backend']} for MLA on 10.x"
        if inputs.block_size is not None:
            return "selected: 0.17 layers select with block_size=None; the seed selects with --block-size"
        return "selected: other"
    if flow["block_size"] != ours.block_size:
        if ctx.is_hybrid:
            return "block size: hybrid model (the seed leaves it to HybridAttentionMambaModelConfig; 0.17 sets 16)"
        if inputs.use_mla:
            return ("block size: 0.17 check_and_update_config forces MLA block sizes; the seed keeps --block-size "
                    "or uses the backend's preferred kernel size")
        return "block size: other"
    return None


def run(version_flag: Optional[str], count: int, seed: int, record_size: int) -> tuple[dict, list[dict]]:
    from attnsel.attention.live import Mismatch, ask_vllm, compare, require_vllm, vllm_runtime
    from attnsel.attention.rules import select_profile
    from attnsel.attention.selector import SelectionContext, SelectorInputs, explain, strip_unknown_inputs
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
    flow_differences: Counter = Counter()
    flow_examples: dict[str, list] = {}
    checked = 0
    start = time.perf_counter()
    all_cases = sorted(
        cases(count, seed, profile.cache_dtypes, _cuda_backends(profile),
              {n for n in profile.backend_names if profile.backend(n).mla}),
        key=lambda case: (case[1]["capability"], bool(case[1].get("batch_invariant"))),
    )
    for inputs_kw, ctx_kw in all_cases:
        inputs, _notes = strip_unknown_inputs(profile, SelectorInputs(**inputs_kw))
        if inputs.use_per_head_quant_scales and not profile.has_selector_field("use_per_head_quant_scales"):
            inputs = inputs.replace(use_per_head_quant_scales=False)
        ctx = SelectionContext(**ctx_kw)
        try:
            ours = explain(profile, inputs, ctx)
        except AttnselError as exc:  # e.g. a flag value this profile rejects as bad input
            skipped[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
            continue
        try:
            live = ask_vllm(inputs, ctx, offline=True)
        except Exception as exc:  # noqa: BLE001 -- a vLLM crash is itself a finding
            mismatches.append({"inputs": inputs.to_dict(), "context": ctx_kw,
                               "live_exception": f"{type(exc).__name__}: {exc}"})
            kinds["live exception"] += 1
            continue
        checked += 1
        flow = release_flow(runtime, inputs, ctx)
        if flow is not None:
            why = _flow_difference(ours, flow, inputs, ctx)
            if why is not None:
                flow_differences[why] += 1
                if len(flow_examples.setdefault(why, [])) < 3:
                    flow_examples[why].append({"inputs": {k: v for k, v in inputs.to_dict().items() if v not in (False, None)},
                                               "context": ctx_kw, "seed": [ours.selected, ours.block_size],
                                               "release": [flow["selected"], flow["block_size"]]})
        for key, value in _coverage_key(inputs, ctx).items():
            for item in value if isinstance(value, list) else [value]:
                coverage.setdefault(key, Counter())[str(item)] += 1
        found = compare(ours, live)
        if live.config_repr is not None and inputs.vllm_repr(profile) != live.config_repr:
            # the config text inside vLLM's "No valid attention backend found ... with {cfg}" messages
            found.append(Mismatch("config repr", None, inputs.vllm_repr(profile), live.config_repr))
        if found:
            for m in found:
                kinds[f"{m.what}:{m.backend}"] += 1
            mismatches.append({
                "inputs": {k: v for k, v in inputs.to_dict().items() if v not in (False, None)},
                "context": ctx_kw,
                "mismatches": [m.to_dict() for m in found],
            })
        else:
            records.append(_record_case(inputs, ctx_kw, live))
    vit = vit_parity(runtime, profile)
    commit = getattr(importlib_version(), "commit_id", None)
    doc = {
        "vllm_installed": installed,
        "vllm_commit": commit,
        "api": runtime.api,
        "profile": profile.name,
        "profile_reason": choice.reason,
        "seed": seed,
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
        "release_flow_differences": dict(flow_differences.most_common()),
        "release_flow_examples": flow_examples,
        "mismatches": mismatches,
    }
    return doc, _pick_records(records, record_size, seed)


def importlib_version() -> Any:
    import importlib

    try:
        return importlib.import_module("vllm._version")
    except ImportError:
        return None


def evidence(doc: dict, records: list[dict]) -> dict:
    """The compact document tests/test_parity_recorded.py replays."""
    return {
        "what": "vLLM's own selector answers (get_valid_backends / validate_configuration / "
                "get_preferred_block_size on CUDA), recorded by bench/tools/parity_live.py",
        "vllm_version": doc["vllm_installed"],
        "vllm_commit": doc["vllm_commit"],
        "profile": doc["profile"],
        "seed": doc["seed"],
        "cases_compared": doc["cases_compared"],
        "mismatching_cases": doc["mismatching_cases"],
        "stubbed_extensions": doc["stubbed_extensions"],
        "release_flow_differences": doc["release_flow_differences"],
        "release_flow_examples": doc["release_flow_examples"],
        "vit": {k: doc["vit"][k] for k in ("heads", "answers", "cases")},
        "vit_mismatches": len(doc["vit"]["mismatches"]),
        "coverage": {k: len(v) for k, v in doc["coverage"].items()},
        "coverage_values": {k: sorted(v) for k, v in doc["coverage"].items()
                            if k in ("capability", "head_size", "dtype", "kv_cache_dtype", "block_size",
                                     "attn_type", "flags", "context", "explicit_backend")},
        "cases": records,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-version", default=None, help="profile to check (default: the installed vLLM's)")
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--out", default=None, help="also write the full JSON document to this file")
    parser.add_argument("--record", default=None, help="write compact replay evidence to this file")
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument("--max-print", type=int, default=50, help="mismatches printed on stdout")
    ns = parser.parse_args(argv)
    from attnsel.errors import UserInputError

    try:
        doc, records = run(ns.vllm_version, ns.cases, ns.seed, ns.record_size)
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
