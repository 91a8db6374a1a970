"""Write the source of everything the installed vLLM's backend selection reads, in one file, so two
releases can be compared with `diff -u` (what changed in selection logic, without the rest).

    python -m attnsel.bench.tools.selection_source --out /tmp/sel-0.24.0.py
    python -m attnsel.bench.tools.selection_source --compare /tmp/sel-0.24.0.py /tmp/sel-0.25.0.py [--show]

Collected (where the release has them): cuda.py's priority function, `get_valid_backends`,
`get_attn_backend_cls`, `check_and_update_config`, the ViT functions; interface.py's block-size
functions; `AttentionSelectorConfig`; the base `AttentionBackend`'s `supports_*` /
`validate_configuration`; for every CUDA backend class, the selection attributes and methods it
defines itself; fa_utils, utils/flashinfer.py and ops/flashmla.py helpers.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PLATFORM_METHODS = ("get_valid_backends", "get_attn_backend_cls", "check_and_update_config",
                    "get_supported_vit_attn_backends", "get_vit_attn_backend", "update_block_size_for_backend",
                    "_preferred_block_size_for_backends", "_check_aligned_block_size", "_find_non_ssm_backend",
                    "_find_non_ssm_backends")
MODULE_FUNCTIONS = {
    "vllm.platforms.cuda": ("_get_backend_priorities",),
    "vllm.v1.attention.backends.fa_utils": None,  # every function
    "vllm.utils.flashinfer": ("has_nvidia_artifactory", "supports_trtllm_attention", "can_use_trtllm_attention",
                              "force_use_trtllm_attention", "use_trtllm_attention", "flashinfer_disable_q_quantization"),
    "vllm.v1.attention.ops.flashmla": None,
    "vllm.vllm_flash_attn.flash_attn_interface": ("_is_fa2_supported", "_is_fa3_supported", "_is_fa4_supported",
                                                  "is_fa_version_supported", "fa_version_unsupported_reason"),
}
SELECTION_ATTRIBUTES = ("supported_dtypes", "supported_kv_cache_dtypes", "accept_output_buffer")


def _is_selection_member(name: str) -> bool:
    return (name.startswith(("supports_", "get_supported_", "is_", "validate_", "get_required_kv_cache_layout",
                             "get_preferred_block_size", "_supports", "_get_")) or name in SELECTION_ATTRIBUTES)


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return repr(obj)


def _functions(module_name: str, names: tuple | None) -> Iterator[str]:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001
        yield f"# {module_name}: cannot import ({type(exc).__name__})\n"
        return
    for name, value in sorted(vars(module).items()):
        if names is not None and name not in names:
            continue
        func = inspect.unwrap(value) if callable(value) else value
        if inspect.isfunction(func) and func.__module__ == module_name:
            yield f"# --- {module_name}.{name}\n{_source(func)}"


def _class_members(cls: Any) -> Iterator[str]:
    for name, value in sorted(vars(cls).items()):
        if not _is_selection_member(name):
            continue
        func = getattr(value, "__func__", value)
        if callable(func):
            yield f"# --- {cls.__module__}.{cls.__qualname__}.{name}\n{_source(func)}"
        else:
            yield f"# --- {cls.__module__}.{cls.__qualname__}.{name} = {value!r}\n"


def collect() -> str:
    from attnsel.attention.explain import vllm_runtime

    runtime = vllm_runtime(offline=True)
    parts = [f"# vLLM {runtime.version}\n"]
    base = runtime.cuda.CudaPlatformBase
    interface = runtime.interface.Platform
    for name in PLATFORM_METHODS:
        for owner in (base, interface):
            if name in vars(owner):
                parts.append(f"# --- {owner.__qualname__}.{name}\n{_source(getattr(vars(owner)[name], '__func__', vars(owner)[name]))}")
    for module_name, names in MODULE_FUNCTIONS.items():
        parts.extend(_functions(module_name, names))
    parts.append(f"# --- AttentionSelectorConfig\n{_source(runtime.selector.AttentionSelectorConfig)}")
    backend_module = importlib.import_module("vllm.v1.attention.backend")
    parts.extend(_class_members(backend_module.AttentionBackend))
    seen = set()
    for member in runtime.registry.AttentionBackendEnum:
        if not isinstance(member.value, str) or "." not in member.value or member.name.startswith(("ROCM", "CPU", "XPU", "AMX")):
            continue
        try:
            cls = member.get_class()
        except Exception as exc:  # noqa: BLE001
            parts.append(f"# {member.name}: cannot import ({type(exc).__name__})\n")
            continue
        for klass in cls.__mro__:
            if klass in seen or klass.__module__ == "builtins" or klass is backend_module.AttentionBackend:
                continue
            seen.add(klass)
            parts.append(f"# ===== {member.name}: {klass.__module__}.{klass.__qualname__} "
                         f"(bases {[b.__name__ for b in klass.__bases__]})\n")
            parts.extend(_class_members(klass))
    return "\n".join(parts)


def sections(text: str) -> dict[str, str]:
    """A dump split at its `# --- name` / `# ===== name` headers (attribute values cut off the key)."""
    import re

    found = {}
    for part in re.split(r"\n(?=# (?:---|=====) )", text):
        head = part.split("\n", 1)[0]
        found[re.sub(r" = .*", "", head)] = part
    return found


def compare(old_path: str, new_path: str, show: bool) -> str:
    """What changed between two dumps: sections only in one, and (with `show`) the diff of each changed one."""
    import difflib

    old, new = sections(Path(old_path).read_text()), sections(Path(new_path).read_text())
    lines = [f"only in {old_path}: {k}" for k in old if k not in new]
    lines += [f"only in {new_path}: {k}" for k in new if k not in old]
    for key in (k for k in old if k in new and old[k] != new[k]):
        lines.append(f"changed: {key}")
        if show:
            lines.extend(difflib.unified_diff(old[key].splitlines(), new[key].splitlines(), lineterm="", n=2))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write this release's dump here")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="list what changed between two dumps")
    parser.add_argument("--show", action="store_true", help="with --compare: the diff of every changed section")
    ns = parser.parse_args(argv)
    if ns.compare:
        old, new = ns.compare
        print(compare(old, new, ns.show))
        return 0
    import logging

    logging.getLogger("vllm").setLevel(logging.CRITICAL)
    Path(ns.out).write_text(collect(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
