"""What each engine ran, read back: the facts its worker sent, completed and cross-checked by
vLLM's own log lines (bench/verify/engine_log.py), and warnings where vLLM did something else than
asked or predicted."""

from __future__ import annotations

from attnsel.bench.verify.status import RunStatus


def engine_facts(facts: dict, log: dict, release_fields: tuple[str, ...] = ()) -> dict:
    """What the engine read back in-process, completed and cross-checked by its log lines (and the
    lines the release brought: `release_fields`, engine_log.release_patterns)."""
    out = dict(facts)
    backends = facts.get("attention_backends") or ([log["backend_selected"]] if log.get("backend_selected") else [])
    out["backend_used"] = backends[0] if len(backends) == 1 else (", ".join(backends) or None)
    out["backend_source"] = "engine" if facts.get("attention_backends") else ("log" if backends else None)
    out["block_size_used"] = facts.get("block_size") or log.get("block_size_set")
    if log.get("cudagraph_mode_set"):
        out["cudagraph_mode"] = log["cudagraph_mode_set"]  # the worker lowered it for this backend
    if not out.get("kv_cache_tokens") and log.get("kv_cache_tokens"):
        out["kv_cache_tokens"] = log["kv_cache_tokens"]
    for key in ("torch_compile_s", "compilation_s", "dynamo_s", "compile_cache", "compile_cache_dir",
                "graph_capture_s", "graph_memory_gib", "init_engine_s", "model_load_s", "model_memory_gib",
                "kv_cache_memory_gib", "cudagraph_captures", "flash_attn_version", "flashinfer_autotune_s",
                *release_fields):
        if key in log:
            out[key] = log[key]
    if out.get("num_gpu_blocks") and out.get("block_size_used"):
        out["kv_blocks_x_block_size"] = int(out["num_gpu_blocks"]) * int(out["block_size_used"])
    return out


def engine_warnings(document: dict) -> list[str]:
    """Where vLLM did something else than asked or predicted."""
    out = []
    predicted = document["vllm"].get("predicted_default")
    for row in [start for r in document["candidates"] for start in (r, *(r.get("restarts") or []))]:
        engine = row.get("engine") or {}
        used, size = engine.get("backend_used"), engine.get("block_size_used")
        if row.get("status") != RunStatus.OK or not used:
            continue
        if row.get("backend") and used != row["backend"]:
            out.append(f"{row['name']}: vLLM ran {used}, not the requested {row['backend']}")
        if row.get("block_size") and size and int(size) != int(row["block_size"]):
            out.append(f"{row['name']}: vLLM used block size {size}, not the requested {row['block_size']}"
                       + (" (a hybrid model's block size follows its Mamba state)" if document["model"].get("is_hybrid") else ""))
        if not row.get("backend") and predicted and (used, size) != (predicted[0], predicted[1]):
            out.append(f"explain predicted vLLM's default {predicted[0]} --block-size {predicted[1]}; "
                       f"vLLM {engine.get('vllm_version') or ''} chose {used} --block-size {size}")
    return out
