"""Record what vLLM's own engine reports about its memory, for `attention/memory`'s replay test.

    python -m attnsel.bench.tools.memory_record --out DIR [--cases quick|full]
    python -m attnsel.bench.tools.memory_record --from-verify tests/fixtures/verify/X/verify.json --out DIR

On a GPU machine with vLLM installed: each case starts vLLM's `LLM` with dummy weights from a
bundled config.json (bench/verify's engine worker, one process per case so the next finds the GPU
empty), reads back the KV-cache blocks, tokens, GiB and concurrency (the engine and its log), or
vLLM's refusal, and writes one small JSON per case (`attnsel-memory-record/1`). Most cases run with
--enforce-eager (no compile, no graph capture: a start takes ~30 s instead of ~3 min); one keeps
vLLM's default CUDA graphs, whose memory estimate 0.26+ takes from the KV cache. A full run on one
H100 takes about 6 minutes. `--from-verify` turns a saved `attnsel verify` run into records (its
engines' KV figures at vLLM's defaults). tests/test_memory_recorded.py replays every record.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from attnsel.attention.memory.verdict import Verdict

SCHEMA = "attnsel-memory-record/1"
FLAG_KEYS = ("tensor_parallel_size", "attention_backend", "gpu_memory_utilization", "max_model_len", "kv_cache_dtype", "block_size",
             "enforce_eager", "max_num_seqs", "max_num_batched_tokens", "quantization", "enable_chunked_prefill",
             "enable_extensible_kv_cache")
FP8_CHECKPOINT = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
# name, bundled model, flags, config patch. Llama-3.1-8B at 0.3: 131072 tokens need 16 GiB of KV
# cache, ~6 GiB is left (vLLM refuses), 32768 fit; every other case runs at vLLM's default length.
CASES: list[tuple[str, str, dict, dict]] = [
    ("llama8b_u030_len131072", "llama-3.1-8b", {"gpu_memory_utilization": 0.3, "enforce_eager": True}, {}),
    ("llama8b_u030_len32768", "llama-3.1-8b", {"gpu_memory_utilization": 0.3, "max_model_len": 32768, "enforce_eager": True}, {}),
    ("qwen06_eager", "qwen3-0.6b", {"enforce_eager": True}, {}),
    ("granite_h_hybrid", "granite-4.0-h-350m", {"enforce_eager": True, "max_model_len": 32768}, {}),
    ("qwen06_graphs", "qwen3-0.6b", {"max_model_len": 16384}, {}),
    ("llama8b_fp8_kv", "llama-3.1-8b", {"kv_cache_dtype": "fp8", "max_model_len": 32768, "enforce_eager": True}, {}),
    ("phi3_mha", "phi-3-mini-4k", {"enforce_eager": True}, {}),
    ("qwen3_8b_fp8_checkpoint", "qwen3-8b", {"enforce_eager": True, "max_model_len": 32768}, {"quantization_config": FP8_CHECKPOINT}),
    ("deepseek_v2_lite_mla_moe", "deepseek-v2-lite", {"enforce_eager": True, "max_model_len": 32768}, {}),
    ("llama8b_tp2", "llama-3.1-8b", {"tensor_parallel_size": 2, "enforce_eager": True}, {}),
]
QUICK = ("llama8b_u030_len131072", "llama8b_u030_len32768", "qwen06_eager", "granite_h_hybrid")
AWQ_CHECKPOINT = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
QWEN3_MOE = "tests/fixtures/memory/models/qwen3-30b-a3b.json"  # a 30B-A3B MoE that fits one 80 GB GPU
# `--cases release`: one engine per model class a release's memory plan must get right (issue 32's list),
# most telling first so that a run cut short by its time limit keeps those: vLLM's defaults for the LLM
# class (max_num_seqs 1024 on an H100: a hybrid model may then be refused), sliding windows, sinks, MoE,
# hybrid Mamba, quantized checkpoints, fp8 KV, CUDA graphs, low utilization, and each kind of refusal.
RELEASE_CASES: list[tuple[str, str, dict, dict]] = [
    ("llama8b_default", "llama-3.1-8b", {"enforce_eager": True, "max_model_len": 32768}, {}),
    ("gemma2_swa", "gemma-2-9b", {"enforce_eager": True}, {}),
    ("qwen3_30b_a3b_moe", QWEN3_MOE, {"enforce_eager": True, "max_model_len": 32768}, {}),
    ("gpt_oss_20b_sinks", "gpt-oss-20b", {"enforce_eager": True, "max_model_len": 32768}, {}),
    # vLLM's FULL decode graphs need one Mamba block per sequence (config/compilation.py, "exceeds available
    # Mamba cache blocks"): at 0.4 of an H100 Nemotron-H's ~16 MiB blocks number fewer than 1024
    ("nemotron_h_graphs_u040", "nemotron-h-8b", {"gpu_memory_utilization": 0.4}, {}),
    ("llama8b_u030_len131072", "llama-3.1-8b", {"gpu_memory_utilization": 0.3, "enforce_eager": True}, {}),
    ("qwen06_graphs", "qwen3-0.6b", {"max_model_len": 16384}, {}),
    ("nemotron_h_default", "nemotron-h-8b", {"enforce_eager": True}, {}),
    ("granite_h_default", "granite-4.0-h-350m", {"enforce_eager": True, "max_model_len": 32768}, {}),
    ("qwen3_8b_awq", "qwen3-8b", {"enforce_eager": True, "max_model_len": 32768}, {"quantization_config": AWQ_CHECKPOINT}),
    ("deepseek_v2_lite_mla", "deepseek-v2-lite", {"enforce_eager": True, "max_model_len": 32768}, {}),
    ("llama8b_fp8_kv", "llama-3.1-8b", {"kv_cache_dtype": "fp8", "max_model_len": 32768, "enforce_eager": True}, {}),
    ("falcon_h1_7b", "falcon-h1-7b", {"enforce_eager": True, "max_model_len": 32768}, {}),
    ("llama8b_len_over_derived", "llama-3.1-8b", {"enforce_eager": True, "max_model_len": 200000}, {}),
    ("qwen06_batched_below_seqs", "qwen3-0.6b", {"enforce_eager": True, "max_num_batched_tokens": 128, "max_num_seqs": 256}, {}),
    ("nemotron_h_seqs256", "nemotron-h-8b", {"enforce_eager": True, "max_num_seqs": 256}, {}),
    ("qwen3_8b_fp8_checkpoint", "qwen3-8b", {"enforce_eager": True, "max_model_len": 32768}, {"quantization_config": FP8_CHECKPOINT}),
    ("phi3_mha", "phi-3-mini-4k", {"enforce_eager": True}, {}),
    ("llama8b_u030_len32768", "llama-3.1-8b", {"gpu_memory_utilization": 0.3, "max_model_len": 32768, "enforce_eager": True}, {}),
]
REFUSED = re.compile(r"To serve at least one request with the model'?s'? max seq len \((\d+)\)")
ESTIMATE = re.compile(r"estimated maximum model length is (\d+)")
# config/compilation.py (0.33.0, 0.34.0): FULL decode graphs need one Mamba block per sequence
MAMBA_BLOCKS = re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")
# vLLM's other start-up refusals (attention/memory/checks.py), by a phrase of their text
CONFIG_REFUSALS = {"is greater than the derived max_model_len": Verdict.DERIVED_MAX_LEN,
                   "must be greater than or equal to max_num_seqs": Verdict.BATCHED_TOKENS_BELOW_SEQS,
                   "is smaller than max_model_len": Verdict.BATCHED_TOKENS_BELOW_LEN}
# what a record keeps of the engine's facts (its log and its config, read back)
KEPT_FACTS = ("vllm_version", "block_size", "num_gpu_blocks", "kv_cache_tokens", "kv_cache_memory_gib", "max_concurrency",
              "model_memory_gib", "graph_memory_gib", "max_model_len", "max_num_batched_tokens", "max_num_seqs")


def vllm_verdict(status: str, error: str | None) -> tuple[str, int | None]:
    """attention/memory's verdict names for what the engine did, and the number vLLM's refusal names (its
    estimate of the longest length that fits, or the Mamba block bound on max_num_seqs)."""
    if status == "ok":
        return Verdict.FITS, None
    text = error or ""
    if REFUSED.search(text):
        found = ESTIMATE.search(text)
        return Verdict.MAX_MODEL_LEN, int(found.group(1)) if found else None
    if "No available memory for the cache blocks" in text:
        return Verdict.NO_CACHE_MEMORY, None
    found = MAMBA_BLOCKS.search(text)
    if found:  # the bound vLLM names ("lower max_num_seqs to at most N")
        return Verdict.MAMBA_BLOCKS, int(found.group(2))
    for phrase, verdict in CONFIG_REFUSALS.items():
        if phrase in text:
            return verdict, None
    if status == "oom":
        return Verdict.WEIGHTS, None
    return "error", None


def record_case(name: str, model: str, flags: dict, patch: dict, out: Path, gpu: dict,
                engine: str | None = None, start_timeout_s: float = 600.0) -> dict:
    """One engine start; `engine`: bench/verify's engine spec (default vLLM's LLM; CI passes a fake)."""
    from attnsel.attention.model import load_model_config
    from attnsel.bench.verify import (
        parse_engine_log,
        read_log,
        run_engine,
        write_model_dir,
    )

    config = {**load_model_config(model), **patch}
    with tempfile.TemporaryDirectory(prefix=f"memrec-{name}-") as tmp:
        job = {"model_dir": str(write_model_dir(config, Path(tmp) / "model")), "shapes": [], **flags}
        if engine:
            job["engine"] = engine
        log = out / f"{name}.log"
        run = run_engine(job, log, start_timeout_s=start_timeout_s)
    logged = parse_engine_log(read_log(log))
    facts = {**logged, **{k: v for k, v in run.facts.items() if v is not None}}
    verdict, estimate = vllm_verdict(run.status, run.error)
    return {"schema": SCHEMA, "name": name, "source": "bench/tools/memory_record.py", "model": model,
            "config_patch": patch, "gpu": gpu, "vllm_version": facts.get("vllm_version") or _installed_vllm(),
            "entrypoint": "llm", "flags": {k: flags.get(k) for k in FLAG_KEYS},
            "vllm": {**{k: facts.get(k) for k in KEPT_FACTS}, "status": run.status, "error": run.error,
                     **_named_bound(verdict, estimate)},
            "verdict": verdict}


def _named_bound(verdict: str, bound: int | None) -> dict:
    if verdict == Verdict.MAMBA_BLOCKS:
        return {"estimated_max_model_len": None, "mamba_block_bound": bound}
    return {"estimated_max_model_len": bound}


def _installed_vllm() -> str | None:
    from attnsel.attention.versions import installed_vllm_version

    return installed_vllm_version()


def this_gpu() -> dict:
    from attnsel.probe import collect_probe

    report = collect_probe()
    if not report.gpus:
        raise SystemExit("memory_record: no GPU visible (run it on the GPU machine)")
    first = report.gpus[0]
    return {"name": first.name, "memory_total_bytes": first.memory_total_bytes, "count": len(report.gpus)}


def from_verify(path: Path) -> list[dict]:
    """A saved `attnsel verify` run: one record per engine that started (vLLM's LLM-class defaults)."""
    doc = json.loads(path.read_text())
    records = []
    for candidate in doc["candidates"]:
        engine = candidate.get("engine") or {}
        if candidate.get("status") != "ok" or not engine.get("kv_cache_tokens"):
            continue
        flags = {"tensor_parallel_size": doc["model"]["tensor_parallel_size"],
                 "gpu_memory_utilization": engine["gpu_memory_utilization"], "max_model_len": engine["max_model_len"],
                 "kv_cache_dtype": None if doc["model"]["kv_cache_dtype"] == "auto" else doc["model"]["kv_cache_dtype"],
                 "block_size": candidate.get("block_size"), "attention_backend": candidate.get("backend")}
        name = f"{path.parent.name}_{candidate['short'].split()[0].replace('/', '_').lower()}"
        records.append({
            "schema": SCHEMA, "name": name, "source": f"attnsel verify run {doc['created']} ({path.parent.name})",
            "model": doc["model"]["name"], "config_patch": {},
            "gpu": {"name": doc["gpu"]["name"], "memory_total_bytes": doc["gpu"]["memory_total_bytes"], "count": 1},
            "vllm_version": engine["vllm_version"], "entrypoint": "llm", "flags": flags,
            "vllm": {**{k: engine.get(k) for k in KEPT_FACTS}, "status": "ok", "error": None, "estimated_max_model_len": None},
            "verdict": Verdict.FITS})
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cases", choices=("quick", "full", "release"), default="full")
    parser.add_argument("--from-verify", type=Path, help="a saved verify.json instead of running engines")
    parser.add_argument("--start-timeout", type=float, default=600.0, help="seconds one engine may take to start")
    parser.add_argument("--only", default="", help="comma-separated case names (of the chosen set) to run")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_verify:
        records = from_verify(args.from_verify)
    else:
        gpu = this_gpu()
        pool = RELEASE_CASES if args.cases == "release" else CASES
        chosen = [c for c in pool if args.cases in ("full", "release") or c[0] in QUICK]
        chosen = [c for c in chosen if c[2].get("tensor_parallel_size", 1) <= gpu["count"]]
        if args.only:
            wanted = [name.strip() for name in args.only.split(",") if name.strip()]
            by_name = {c[0]: c for c in pool}
            unknown = [name for name in wanted if name not in by_name]
            if unknown:
                parser.error(f"unknown case(s): {', '.join(unknown)}")
            chosen = [by_name[name] for name in wanted]  # in the order asked
        records = []
        for name, model, flags, patch in chosen:
            print(f"memory_record: {name} ...", file=sys.stderr, flush=True)
            records.append(record_case(name, model, flags, patch, args.out, gpu, start_timeout_s=args.start_timeout))
            # written as each engine finishes: a run stopped at its time limit keeps what it measured
            (args.out / f"{name}.json").write_text(json.dumps(records[-1], indent=1) + "\n")
            print(f"  {records[-1]['verdict']}: {records[-1]['vllm'].get('kv_cache_tokens')} tokens", file=sys.stderr)
    if args.from_verify:
        for record in records:
            (args.out / f"{record['name']}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"memory_record: {len(records)} record(s) in {args.out}")
    return 0



def predict_record(record: dict) -> Any:
    """attention/memory's plan for a record's model, GPU, release and flags (what the replay compares)."""
    from attnsel.attention.memory import MemoryFlags, memory_for
    from attnsel.attention.model import derive_model_facts, load_model_config
    from attnsel.attention.selector import (
        SelectionRequest,
        build_selection,
        explain_selection,
    )
    from attnsel.attention.versions import select_profile
    from attnsel.probe import find_gpu

    profile = select_profile(record["vllm_version"]).profile
    config = {**load_model_config(record["model"]), **record.get("config_patch", {})}
    flags = record["flags"]
    gpu = find_gpu(record["gpu"]["name"])
    tp = int(flags.get("tensor_parallel_size") or 1)
    facts = derive_model_facts(config, capability=gpu.compute_capability, dtype="auto", tensor_parallel_size=tp,
                               gpu_name=gpu.name, profile=profile.model_rules)
    # every record comes from attnsel's engine worker, which starts vLLM with enable_prefix_caching=False
    # (bench/verify/engine_worker.py): for a hybrid model that decides the block size (0.26's default
    # with prefix caching is Mamba cache mode 'all', block 512 for Granite-4.0-H; without it, 400)
    request = SelectionRequest(kv_cache_dtype=flags.get("kv_cache_dtype"), block_size=flags.get("block_size"),
                               attention_backend=flags.get("attention_backend"),
                               prefix_caching=bool(flags.get("enable_prefix_caching", False)))
    inputs, ctx, notes = build_selection(profile, request, model_facts=facts, capability=gpu.compute_capability,
                                         gpu_name=gpu.name)
    explanation = explain_selection(profile, inputs, ctx, notes)
    memory = MemoryFlags(**{k: flags.get(k) for k in FLAG_KEYS if k not in ("block_size", "attention_backend")
                            and flags.get(k) is not None}, entrypoint=record.get("entrypoint", "llm"))
    return memory_for(profile, config, facts, explanation, memory,
                      total_bytes=int(record["gpu"]["memory_total_bytes"]), gpu_name=gpu.name)


if __name__ == "__main__":
    sys.exit(main())
