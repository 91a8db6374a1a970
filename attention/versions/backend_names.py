"""What `--attention-backend NAME` says when vLLM has no backend of that name: the CUDA backends of
this release, the close ones among them, and, for a name an older release had, which release
removed it (from the version data). vLLM itself lists every enum member of every platform
(docs/vllm-rules.md §7); a user asking for a CUDA GPU is better served by the ones that can run there.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from attnsel.attention.versions.registry import release_profiles, resolved_data

if TYPE_CHECKING:
    from attnsel.attention.versions.profile import RuleProfile

# Backends vLLM had before the oldest release attnsel models (vLLM's V0 engine): the version data
# cannot say which release removed them, only that none of the modelled ones has them.
REMOVED_BEFORE_MODELLED = frozenset({"XFORMERS"})


def unknown_backend_message(profile: RuleProfile, typed: str) -> str:
    """One line: the name is unknown, why (removed, and when), what this release runs on CUDA."""
    here = profile.backend_names
    message = f"Unknown attention backend: {typed!r}."
    removed = removed_in(profile, typed)
    if removed is not None:
        message += f" {removed}."
    close = close_backend_names(typed, here)
    if close:
        message += f" Did you mean {', '.join(close)}?"
    return message + f" CUDA backends of vLLM {profile.vllm_version}: {', '.join(here)}"


def close_backend_names(typed: str, names: list[str]) -> list[str]:
    """Names that read like `typed` once spelling habits are set aside ("FLASH_ATTENTION" is FLASH_ATTN,
    not FLEX_ATTENTION): the same letters after ATTENTION -> ATTN and without separators first."""
    key = _spelling_key(typed)
    keys = {_spelling_key(name): name for name in names}
    same = [name for k, name in keys.items() if k == key]
    return same or [keys[k] for k in difflib.get_close_matches(key, list(keys), n=3, cutoff=0.75)]


def _spelling_key(name: str) -> str:
    return "".join(ch for ch in name.upper().replace("ATTENTION", "ATTN") if ch.isalnum())


def removed_in(profile: RuleProfile, typed: str) -> str | None:
    """"vLLM 0.20.0 removed X (0.19.0 had it)" or "vLLM 0.25.0 added X" from the releases' registries;
    None when no modelled release had it and it is not a known older backend."""
    names = release_profiles()
    versions = [".".join(str(part) for part in resolved_data(name)["vllm_release"]) for name in names]
    had = [i for i, name in enumerate(names) if typed in {n for n, _ in resolved_data(name)["registry"]}]
    if not had:
        if typed in REMOVED_BEFORE_MODELLED:
            return (f"vLLM removed {typed} before {versions[0]}, the oldest release attnsel models "
                    f"(no release from {versions[0]} to {versions[-1]} has it)")
        return None
    asked = names.index(profile.name) if profile.name in names else len(names) - 1
    if had[0] > asked:
        return f"vLLM {versions[had[0]]} added {typed}; this answer is for vLLM {profile.vllm_version} (--vllm-version)"
    removed = next((i for i in range(asked, 0, -1) if i - 1 in had and i not in had), None)
    if removed is not None:
        return f"vLLM {versions[removed]} removed {typed} ({versions[removed - 1]} had it)"
    return None
