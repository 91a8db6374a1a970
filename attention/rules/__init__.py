"""vLLM's attention-backend rules, version by version: the engine that applies one version's rules.

- `spec`: the vocabulary (kernel block sizes, a backend's attributes as data);
- `profile`: `RuleProfile`, the version object -- data plus the `Rules` code class it names;
- `code`: the base of every version's `Rules` (dispatch from rule names in the data to code);
- `imports`: which packages are present here, without importing them.

The versions themselves (one data file each, a code module where a release brought new logic)
live in attention/versions/; `choose_profile` / `select_profile` pick one. Nothing outside
attention/versions/ tests for a vLLM version: it asks the version object.
"""

from attnsel.attention.rules.imports import importable_map, module_available
from attnsel.attention.rules.profile import RuleProfile, block_size_cli_error
from attnsel.attention.rules.spec import (
    BackendSpec,
    FlashAttnResolution,
    KernelBlockSize,
    MultipleOf,
    attn_type_str,
    is_quantized_kv_cache,
    kernel_sizes_display,
    kernel_sizes_repr,
)

# Picking a version lives with the versions (attention/versions/choice.py), which builds on this
# package; its names are re-exported lazily so either package can be imported first.
_FROM_VERSIONS = {
    "ProfileChoice": "choice",
    "choose_profile": "choice",
    "get_profile": "choice",
    "installed_vllm_version": "choice",
    "parse_vllm_version": "choice",
    "profile_for_version": "choice",
    "select_profile": "choice",
    "available_profiles": "registry",
}


def __getattr__(name: str):
    module = _FROM_VERSIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"attnsel.attention.versions.{module}"), name)


__all__ = [
    "BackendSpec",
    "FlashAttnResolution",
    "KernelBlockSize",
    "MultipleOf",
    "ProfileChoice",
    "RuleProfile",
    "attn_type_str",
    "available_profiles",
    "block_size_cli_error",
    "choose_profile",
    "get_profile",
    "importable_map",
    "installed_vllm_version",
    "is_quantized_kv_cache",
    "kernel_sizes_display",
    "kernel_sizes_repr",
    "module_available",
    "parse_vllm_version",
    "profile_for_version",
    "select_profile",
]
