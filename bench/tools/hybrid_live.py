"""Hybrid block sizes: attnsel's answer vs the installed vLLM's own code, on CPU.

    python -m attnsel.bench.tools.hybrid_live [--vllm-version 0.33] [--record tests/fixtures/hybrid/hybrid_033.json]

For each bundled hybrid config, GPU and flag set, on a stand-in VllmConfig (attention/explain/live_runtime.py,
offline) with the backend attnsel selected as every attention layer's (`_find_non_ssm_backend(s)` reads
a built model: docs/vllm-rules.md §10; GLM-5-Next's indexer cache backends ahead of it) and the model's real class from vLLM's registry, vLLM decides:
- prefix caching (`ModelConfig.is_prefix_caching_supported` unless the flag is given), the Mamba cache
  mode and the state dtypes (`MambaModelConfig` and the architecture's own hook in `MODELS_CONFIG_MAP`;
  0.33 parses --mamba-cache-mode and drops it: `_MAMBA_CACHE_MODE_DEPRECATION_MESSAGE`);
- the block size and the padded Mamba page (`Platform.update_block_size_for_backend`; 0.18-0.19
  `HybridAttentionMambaModelConfig` at config time), with the GDN
  prefill-checkpoint grid from its own `_resolve_gdn_prefill_backend` (the layers that would report it
  are not built here);
- the state page (`get_mamba_state_shape_from_config` / `..._dtype_from_config`, `MambaSpec`);
- the KV-cache groups (`unify_kv_cache_spec_page_size`, `_get_kv_cache_groups_uniform_page_size`) and
  the blocks a one-token request holds (every group's `max_memory_usage_bytes` at max_model_len 1);
  the block size compared is the attention groups', which the engine runs with (`_initialize_kv_caches`).
Exit 0 when everything matches, 1 otherwise, 2 without vLLM.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MODELS = ("jamba-v0.1", "nemotron-h-8b", "granite-4.0-h-350m", "falcon-h1-7b", "qwen3-next-80b-a3b", "qwen3.5-9b",
          "glm-5-next")
FLAG_SETS: tuple[dict[str, Any], ...] = (
             {}, {"block_size": 64}, {"block_size": 128}, {"kv_cache_dtype": "fp8"}, {"prefix_caching": True},
             {"prefix_caching": False}, {"prefix_caching": True, "mamba_cache_mode": "align"},
             {"prefix_caching": False, "mamba_cache_mode": "align"}, {"mamba_ssm_cache_dtype": "float32"},
             {"prefix_caching": True, "mamba_cache_mode": "all"})
CAPABILITIES = ((9, 0), (8, 0), (10, 0))


def _attnsel(model: str, version: str | None, cc: tuple[int, int], flags: dict) -> Any:
    from attnsel.attention.model import config as model_config
    from attnsel.attention.selector import (
        SelectionRequest,
        build_selection,
        explain_selection,
    )
    from attnsel.attention.versions import get_profile

    profile = get_profile(version)
    config = model_config.load_model_config(model)
    facts = model_config.derive_model_facts(config, capability=cc, profile=profile.model_rules,
                                            mamba_ssm_cache_dtype=flags.get("mamba_ssm_cache_dtype", "auto"))
    inputs, ctx, notes = build_selection(profile, SelectionRequest(**flags), model_facts=facts, capability=cc)
    return inputs, ctx, explain_selection(profile, inputs, ctx, notes), config


def _text_namespace(config: dict) -> Any:
    inner = config.get("text_config")
    text = inner if isinstance(inner, dict) else config
    return types.SimpleNamespace(**dict(text))


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _optional(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _decide_cache_mode(vllm_config: Any, model_cls: Any, flags: dict) -> None:
    """What vLLM's config step leaves in CacheConfig: prefix caching, cache mode, Mamba dtypes."""
    model, cache = vllm_config.model_config, vllm_config.cache_config
    model.attn_type, model.pooler_config = "hybrid", None
    prefix = flags.get("prefix_caching")
    if prefix is None:
        prefix = importlib.import_module("vllm.config.model").ModelConfig.is_prefix_caching_supported.fget(model)
    dropped = _optional("vllm.engine.arg_utils", "_MAMBA_CACHE_MODE_DEPRECATION_MESSAGE") is not None
    cache.enable_prefix_caching = bool(prefix)
    cache.mamba_cache_mode = "none" if dropped else flags.get("mamba_cache_mode", "none")
    cache.mamba_ssm_cache_dtype = flags.get("mamba_ssm_cache_dtype", "auto")
    cache.mamba_cache_dtype = "auto"
    supports_all = _optional("vllm.model_executor.models.interfaces", "supports_mamba_prefix_caching")
    model.supports_mamba_prefix_caching = bool(supports_all(model_cls)) if supports_all else False
    hooks = importlib.import_module("vllm.model_executor.models.config")
    own = hooks.MODELS_CONFIG_MAP.get(model.architecture)
    at_config_time = getattr(hooks, "HybridAttentionMambaModelConfig", None)
    if at_config_time is not None:
        # 0.18-0.19 config/vllm.py try_verify_and_update_config: the architecture's hook, then the
        # hybrid one (MambaModelConfig, then the block size from --block-size or the default 16; from
        # 0.20 on it sizes nothing: interface.py _align_hybrid_block_size does, after the layers)
        cache.block_size = cache.block_size or 16  # CacheConfig._apply_block_size_default
        if own is not None:
            own.verify_and_update_config(vllm_config)
        at_config_time.verify_and_update_config(vllm_config)
        return
    hooks.MambaModelConfig.verify_and_update_config(vllm_config)
    if own is not None and own is not hooks.MambaModelConfig:
        own.verify_and_update_config(vllm_config)


def _checkpoint_alignment(vllm_config: Any, layout_kind: str) -> int | None:
    """abstract.py `get_mamba_prefill_checkpoint_alignment` asks the built GDN layers, which take 64
    in align mode when `_resolve_gdn_prefill_backend` picks FlashInfer (qwen_gdn_linear_attn.py)."""
    resolve = _optional("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn", "_resolve_gdn_prefill_backend")
    if resolve is None or layout_kind != "gdn" or vllm_config.cache_config.mamba_cache_mode != "align":
        return None
    if resolve(vllm_config)[1] != "flashinfer":
        return None
    return _optional("vllm.v1.attention.backends.gdn_attn", "FLASHINFER_GDN_CHECKPOINT_ALIGNMENT")


@contextmanager
def _patched(target: Any, name: str, value: Any):
    had = name in vars(target)
    saved = vars(target).get(name)
    setattr(target, name, value)
    try:
        yield
    finally:
        if had:
            setattr(target, name, saved)
        else:
            delattr(target, name)


def _mamba_spec(vllm_config: Any, model_cls: Any, checkpoint: int | None) -> Any:
    iface = importlib.import_module("vllm.v1.kv_cache_interface")
    cache = vllm_config.cache_config
    extra = {"num_prefill_checkpoint_blocks": 1, "prefill_checkpoint_alignment": checkpoint} if checkpoint else {}
    return iface.MambaSpec(shapes=tuple(model_cls.get_mamba_state_shape_from_config(vllm_config)),
                           dtypes=tuple(model_cls.get_mamba_state_dtype_from_config(vllm_config)),
                           block_size=cache.mamba_block_size or vllm_config.model_config.max_model_len,
                           page_size_padded=cache.mamba_page_size_padded, mamba_cache_mode=cache.mamba_cache_mode,
                           **extra)


def _groups(vllm_config: Any, mamba: Any, layout: Any) -> dict:
    iface = importlib.import_module("vllm.v1.kv_cache_interface")
    try:  # 0.33 moved the grouping out of kv_cache_utils.py
        planning = importlib.import_module("vllm.v1.core.kv_cache_planning")
    except ImportError:
        planning = importlib.import_module("vllm.v1.core.kv_cache_utils")
    model, cache = vllm_config.model_config, vllm_config.cache_config
    torch_dtype = importlib.import_module("vllm.utils.torch_utils").STR_DTYPE_TO_TORCH_DTYPE
    kv_dtype = model.dtype if cache.cache_dtype == "auto" else torch_dtype[cache.cache_dtype]
    spec_cls = iface.MLAAttentionSpec if model.use_mla else iface.FullAttentionSpec
    attention = spec_cls(block_size=cache.block_size, num_kv_heads=1 if model.use_mla else model.get_num_kv_heads(),
                         head_size=model.get_head_size(), dtype=kv_dtype)
    specs = {f"layers.{i}.attn": attention for i in range(layout.attention_layers)}
    specs.update({f"layers.{layout.attention_layers + i}.mixer": mamba for i in range(layout.mamba_layers)})
    groups = planning._get_kv_cache_groups_uniform_page_size(planning.unify_kv_cache_spec_page_size(specs))
    is_mamba = [isinstance(g.kv_cache_spec, iface.MambaSpec) for g in groups]
    with _patched(model, "max_model_len", 1):  # the least a running request holds: a one-token request
        per_request = sum(g.kv_cache_spec.max_memory_usage_bytes(vllm_config) // g.kv_cache_spec.page_size_bytes
                          for g in groups)
    # the attention groups' block size, which engine/core.py _initialize_kv_caches runs with (0.18-0.19 reset
    # a hybrid model's cache_config.block_size to 16; unify_kv_cache_spec_page_size raises it again). Not
    # the Mamba groups': theirs is max_model_len outside "all"/"align" mode, the stand-in's 8192 here
    attention_blocks = [g.kv_cache_spec.block_size for g, mamba in zip(groups, is_mamba) if not mamba]
    return {"block_size": min(attention_blocks),
            "group_size": max(len(g.layer_names) for g in groups), "attention_groups": is_mamba.count(False),
            "mamba_groups": is_mamba.count(True), "blocks_pinned_per_request": per_request}


def _indexer_backends(layout: Any) -> list[Any]:
    """GLM-5-Next's DSA indexer K cache and kpool tail cache: non-SSM layers built ahead of each MLA
    layer, so `_find_non_ssm_backend(s)` lists them first. Each cache layer's own `get_attn_backend`
    names its backend (0.33 glm5next/common/attention.py: Glm5NextIndexerBackend; 0.30
    glm5next/nvidia/attention.py: DeepseekV32IndexerCache's DeepseekV32IndexerBackend)."""
    if not layout.indexer_kpool:
        return []
    for module in ("vllm.models.glm5next.common.attention", "vllm.models.glm5next.nvidia.attention"):
        caches = _optional(module, "Glm5NextIndexerCache"), _optional(module, "Glm5NextTailCache")
        if all(caches):
            return [cache.get_attn_backend(None) for cache in caches]
    raise ImportError("no Glm5NextIndexerCache / Glm5NextTailCache in this vLLM")


def _vllm(runtime: Any, inputs: Any, ctx: Any, expl: Any, config: dict, flags: dict) -> dict:
    registry = importlib.import_module("vllm.model_executor.models")
    platform = runtime.platform_cls
    backend = runtime.registry.AttentionBackendEnum[expl.selected].get_class()
    arch = config["architectures"][0]
    model_cls = registry.ModelRegistry._try_load_model_cls(arch)
    layout = ctx.hybrid.layout
    backends = [*_indexer_backends(layout), backend]
    with runtime.case(inputs, ctx) as vllm_config:
        model, cache = vllm_config.model_config, vllm_config.cache_config
        text = _text_namespace(config)
        model.hf_config = model.hf_text_config = text
        model.architecture, model.is_hybrid = arch, True
        model.get_mamba_chunk_size = lambda: getattr(text, "mamba_chunk_size", None) or getattr(text, "chunk_size", None) or 2048
        cache.mamba_block_size, cache.user_specified_mamba_block_size = None, False
        cache.mamba_page_size_padded, cache.use_replayssm, cache.prefix_match_unit = None, False, None
        cache.calculate_kv_scales = False  # 0.19 HybridAttentionMambaModelConfig turns it off for hybrids
        vllm_config.num_speculative_tokens, vllm_config.speculative_config = 0, None
        # 0.34 VllmConfig property (config/vllm.py:580 @ 0.34.0): --use-replayssm with the FlashInfer Mamba
        # backend; mamba_state_alignment (mamba_utils.py:31) reads it for the state page
        vllm_config.use_flashinfer_replayssm = False
        vllm_config.additional_config = {}
        vllm_config.scheduler_config.enable_chunked_prefill = True
        vllm_config.parallel_config.tensor_parallel_size = ctx.hybrid.tensor_parallel_size
        with _patched(registry.ModelRegistry, "resolve_model_cls", lambda *a, **k: (model_cls, arch)):
            _decide_cache_mode(vllm_config, model_cls, flags)
        checkpoint = _checkpoint_alignment(vllm_config, layout.kind)
        abstract = _optional("vllm.model_executor.layers.mamba", "abstract")
        # 0.17.0 has no update_block_size_for_backend: HybridAttentionMambaModelConfig sized the block
        # at config time (above) and the layers select with block_size=None (cuda.py:351)
        if hasattr(platform, "update_block_size_for_backend"):
            with _patched(platform, "_find_non_ssm_backends", classmethod(lambda cls, cfg: backends)), \
                    _patched(platform, "_find_non_ssm_backend", classmethod(lambda cls, cfg: backends[0])), \
                    _patched(registry.ModelRegistry, "resolve_model_cls", lambda *a, **k: (model_cls, arch)), \
                    _patched(abstract or types.SimpleNamespace(), "get_mamba_prefill_checkpoint_alignment",
                             lambda cfg: checkpoint):
                platform.update_block_size_for_backend(vllm_config)
        mamba = _mamba_spec(vllm_config, model_cls, checkpoint)
        state_page = importlib.import_module("vllm.v1.kv_cache_interface").MambaSpec(
            shapes=mamba.shapes, dtypes=mamba.dtypes, block_size=-1).page_size_bytes
        groups = _groups(vllm_config, mamba, layout)
        return {"block_size": groups.pop("block_size"), "state_page_bytes": state_page,
                "mamba_page_size_padded": cache.mamba_page_size_padded,
                "prefix_caching": bool(cache.enable_prefix_caching), "mamba_cache_mode": cache.mamba_cache_mode,
                "state_dtypes": [_dtype_name(d) for d in mamba.dtypes],
                "kv_cache_groups": groups}


def _ours(expl: Any) -> dict:
    h = expl.hybrid
    groups = h.groups.to_dict()
    groups.pop("padding_layers")
    return {"block_size": expl.block_size, "state_page_bytes": h.state_page_bytes,
            "mamba_page_size_padded": h.attention_page_bytes if h.padding_pct is not None else None,
            "prefix_caching": h.prefix_caching, "mamba_cache_mode": h.mamba_cache_mode,
            "state_dtypes": list(h.state_dtypes), "kv_cache_groups": groups}


def _without_cutlass_probe() -> None:
    """MoE model modules import quantization utils that ask a compiled op at import time
    (w8a8_utils.py `cutlass_fp8_supported()`); without a GPU the stub extension lacks it. The
    answer cannot change a state shape, so the probe says False."""
    ops = importlib.import_module("vllm._custom_ops")
    ops.cutlass_scaled_mm_supports_fp8 = lambda *args, **kwargs: False  # type: ignore[attr-defined]
    ops.cutlass_scaled_mm_supports_block_fp8 = lambda *args, **kwargs: False  # type: ignore[attr-defined]


def _case(runtime: Any, model: str, version: str | None, cc: tuple[int, int], flags: dict) -> dict | None:
    inputs, ctx, expl, config = _attnsel(model, version, cc, flags)
    if expl.hybrid is None or expl.selected is None:
        return None
    case = {"model": model, "capability": f"{cc[0]}.{cc[1]}", "flags": flags, "backend": expl.selected,
            "attnsel": _ours(expl)}
    try:
        case["vllm"] = _vllm(runtime, inputs, ctx, expl, config, flags)
    except Exception as exc:  # noqa: BLE001 -- recorded, not a verdict
        case["vllm_error"] = f"{type(exc).__name__}: {exc}"
    return case


def _known_models(version: str | None, models: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The models the profile knows (GLM-5-Next's model type came with 0.33), and the others."""
    from attnsel.attention.model import config as model_config
    from attnsel.attention.versions import get_profile
    from attnsel.errors import UserInputError

    rules = get_profile(version).model_rules
    known, unknown = [], []
    for model in models:
        try:
            model_config.derive_model_facts(model_config.load_model_config(model), capability=(9, 0), profile=rules)
            known.append(model)
        except UserInputError:
            unknown.append(model)
    return tuple(known), unknown


def _unparsed_mode(version: str | None, flags: dict) -> dict | None:
    """A --mamba-cache-mode the profile does not parse: skipped when vLLM's `MambaCacheMode` (config/cache.py)
    lacks it too, a mismatch when vLLM takes it."""
    from typing import get_args

    from attnsel.attention.versions import get_profile

    mode = flags.get("mamba_cache_mode")
    ours = (get_profile(version).data.get("hybrid") or {}).get("mamba_cache_modes", ())
    if mode is None or mode in ours:
        return None
    theirs = get_args(importlib.import_module("vllm.config.cache").MambaCacheMode)
    return {"flags": flags, "attnsel_modes": list(ours), "vllm_modes": list(theirs), "vllm_takes_it": mode in theirs}


def run(version: str | None, models: tuple[str, ...] = MODELS) -> dict:
    from attnsel.attention.explain import vllm_runtime

    runtime = vllm_runtime(offline=True)
    _without_cutlass_probe()
    models, unknown = _known_models(version, models)
    cases: list[dict[str, Any]] = []
    mismatches: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = [{"model": m, "reason": "model type unknown to this profile"} for m in unknown]
    for model in models:
        for cc in CAPABILITIES:
            for flags in FLAG_SETS:
                unparsed = _unparsed_mode(version, flags)
                if unparsed is not None:
                    (mismatches if unparsed["vllm_takes_it"] else skipped).append(
                        {"model": model, "capability": f"{cc[0]}.{cc[1]}", **unparsed})
                    continue
                case = _case(runtime, model, version, cc, flags)
                if case is None:
                    skipped.append({"model": model, "capability": f"{cc[0]}.{cc[1]}", "flags": flags})
                    continue
                cases.append(case)
                if case.get("vllm") != case["attnsel"]:
                    mismatches.append(case)
    return {"vllm_version": runtime.version, "profile_version": version, "cases": cases, "skipped": skipped,
            "compared": len(cases), "mismatches": len(mismatches),
            "unparsed_modes": [m for m in mismatches if "vllm_takes_it" in m]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-version", default=None, help="the rule profile (default: the installed vLLM's)")
    parser.add_argument("--models", default=None, help="comma list (default: every bundled hybrid config)")
    parser.add_argument("--record", type=Path, default=None)
    ns = parser.parse_args(argv)
    try:
        doc = run(ns.vllm_version, tuple(ns.models.split(",")) if ns.models else MODELS)
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
