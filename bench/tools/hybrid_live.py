"""Hybrid block sizes: attnsel's answer vs the installed vLLM's own code, on CPU.

    python -m attnsel.bench.tools.hybrid_live [--record tests/fixtures/hybrid/hybrid_024.json]

For each bundled hybrid config and a few flag sets it runs vLLM's `Platform.update_block_size_for_backend`
on a stand-in VllmConfig (attention/live_runtime.py, offline) with the backend attnsel selected as every
layer's (`_find_non_ssm_backend(s)` reads a built model: vllm-rules §10), the model's real class from
vLLM's registry (its own `get_mamba_state_shape_from_config` / `..._dtype_from_config` and `MambaSpec`),
and compares the block size, the Mamba state page and the padded page with attnsel's. Prefix caching
and the cache mode are resolved by attnsel first (MambaModelConfig) and handed to vLLM as set.
Exit 0 when everything matches, 1 otherwise, 2 without vLLM.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import Any, Optional

MODELS = ("jamba-v0.1", "nemotron-h-8b", "granite-4.0-h-350m", "falcon-h1-7b", "qwen3-next-80b-a3b", "qwen3.5-9b")
FLAG_SETS = ({}, {"block_size": 64}, {"kv_cache_dtype": "fp8"}, {"prefix_caching": True},
             {"prefix_caching": True, "mamba_cache_mode": "align"})
CAPABILITIES = ((9, 0), (8, 0), (10, 0))


def _attnsel(model: str, version: Optional[str], cc: tuple[int, int], flags: dict) -> Any:
    from attnsel.attention import model_config
    from attnsel.attention.request import SelectionRequest, build_selection, explain_selection
    from attnsel.attention.versions.choice import get_profile

    profile = get_profile(version)
    facts = model_config.derive_model_facts(model_config.load_model_config(model), capability=cc,
                                            profile=profile.model_rules)
    inputs, ctx, notes = build_selection(profile, SelectionRequest(**flags), model_facts=facts, capability=cc)
    return inputs, ctx, explain_selection(profile, inputs, ctx, notes), model_config.load_model_config(model)


def _namespace(config: dict) -> Any:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return types.SimpleNamespace(**{k: v for k, v in text.items()})


def _vllm(runtime: Any, inputs: Any, ctx: Any, expl: Any, config: dict) -> dict:
    import importlib

    registry = importlib.import_module("vllm.model_executor.models")
    platform = runtime.platform_cls
    backend = runtime.registry.AttentionBackendEnum[expl.selected].get_class()
    arch = config["architectures"][0]
    model_cls = registry.ModelRegistry._try_load_model_cls(arch)
    with runtime.case(inputs, ctx) as vllm_config:
        model, cache = vllm_config.model_config, vllm_config.cache_config
        text = _namespace(config)
        model.hf_config = model.hf_text_config = text
        model.architecture, model.is_hybrid = arch, True
        model.get_mamba_chunk_size = lambda: getattr(text, "mamba_chunk_size", None) or getattr(text, "chunk_size", None) or 2048
        hybrid = expl.hybrid
        cache.mamba_cache_mode = hybrid.mamba_cache_mode
        cache.mamba_block_size, cache.user_specified_mamba_block_size = None, False
        cache.mamba_page_size_padded, cache.use_replayssm = None, False
        cache.mamba_ssm_cache_dtype = ctx.hybrid.mamba_ssm_cache_dtype
        cache.mamba_cache_dtype = ctx.hybrid.mamba_cache_dtype
        vllm_config.num_speculative_tokens, vllm_config.speculative_config = 0, None
        vllm_config.parallel_config.tensor_parallel_size = ctx.hybrid.tensor_parallel_size
        saved = {name: platform.__dict__.get(name) for name in ("_find_non_ssm_backends", "_find_non_ssm_backend")}
        platform._find_non_ssm_backends = classmethod(lambda cls, cfg: [backend])
        platform._find_non_ssm_backend = classmethod(lambda cls, cfg: backend)
        resolve = registry.ModelRegistry.resolve_model_cls
        registry.ModelRegistry.resolve_model_cls = lambda *a, **k: (model_cls, arch)
        try:
            platform.update_block_size_for_backend(vllm_config)
            spec = importlib.import_module("vllm.v1.kv_cache_interface").MambaSpec(
                shapes=model_cls.get_mamba_state_shape_from_config(vllm_config),
                dtypes=model_cls.get_mamba_state_dtype_from_config(vllm_config), block_size=-1)
        finally:
            registry.ModelRegistry.resolve_model_cls = resolve
            for name, value in saved.items():
                if value is None:
                    delattr(platform, name)
                else:
                    setattr(platform, name, value)
        return {"block_size": cache.block_size, "state_page_bytes": spec.page_size_bytes,
                "mamba_page_size_padded": cache.mamba_page_size_padded}


def _ours(expl: Any) -> dict:
    h = expl.hybrid
    padded = h.attention_page_bytes if h.padding_pct is not None else None
    return {"block_size": expl.block_size, "state_page_bytes": h.state_page_bytes, "mamba_page_size_padded": padded}


def _without_cutlass_probe() -> None:
    """MoE model modules import quantization utils that ask a compiled op at import time
    (w8a8_utils.py `cutlass_fp8_supported()`); without a GPU the stub extension lacks it. The
    answer cannot change a state shape, so the probe says False."""
    import importlib

    ops = importlib.import_module("vllm._custom_ops")
    ops.cutlass_scaled_mm_supports_fp8 = lambda *args, **kwargs: False
    ops.cutlass_scaled_mm_supports_block_fp8 = lambda *args, **kwargs: False


def run(version: Optional[str]) -> dict:
    from attnsel.attention.live_runtime import vllm_runtime

    runtime = vllm_runtime(offline=True)
    _without_cutlass_probe()
    cases, mismatches = [], []
    for model in MODELS:
        for cc in CAPABILITIES:
            for flags in FLAG_SETS:
                inputs, ctx, expl, config = _attnsel(model, version, cc, flags)
                if expl.hybrid is None or expl.selected is None:
                    continue
                case = {"model": model, "capability": f"{cc[0]}.{cc[1]}", "flags": flags, "backend": expl.selected,
                        "mamba_cache_mode": expl.hybrid.mamba_cache_mode, "attnsel": _ours(expl)}
                try:
                    case["vllm"] = _vllm(runtime, inputs, ctx, expl, config)
                except Exception as exc:  # noqa: BLE001 -- recorded, not a verdict
                    case["vllm_error"] = f"{type(exc).__name__}: {exc}"
                cases.append(case)
                if case.get("vllm") != case["attnsel"]:
                    mismatches.append(case)
    return {"vllm_version": runtime.version, "profile_version": version, "cases": cases,
            "compared": len(cases), "mismatches": len(mismatches)}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-version", default=None, help="the rule profile (default: the installed vLLM's)")
    parser.add_argument("--record", type=Path, default=None)
    ns = parser.parse_args(argv)
    try:
        doc = run(ns.vllm_version)
    except ImportError as exc:
        print(f"needs vLLM: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=1)
    if ns.record:
        ns.record.parent.mkdir(parents=True, exist_ok=True)
        ns.record.write_text(text + "\n", encoding="utf-8")
    print(json.dumps({k: doc[k] for k in ("vllm_version", "compared", "mismatches")}))
    return 0 if doc["mismatches"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
