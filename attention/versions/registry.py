"""The vLLM versions attnsel knows: one data file per version in this folder (README.md says how to add
one), read lazily. A data file either stands alone or names a `base` version and holds only what
changed since (a merge patch):

- an object merges key by key into the base's (recursively);
- `null` removes a key;
- `{"$add": [...], "$remove": [...]}` edits the base's list (model-type lists, cache dtypes);
- anything else replaces the base's value.

Keys that describe one version only (name, version, aliases, verification, sources) are never
inherited. `code` names the module in this folder whose `Rules` class implements the version's
rules that are code; it is inherited, so a release that brought no new logic names none.
"""

from __future__ import annotations

import copy
import importlib
import json
from functools import cache
from pathlib import Path
from typing import Any

VERSIONS_DIR = Path(__file__).resolve().parent
# describe one version: not inherited from the base
OWN_KEYS = frozenset(
    {"name", "base", "vllm_version", "vllm_release", "release", "answers_for", "close_versions", "description",
     "sources", "unverified", "verified", "changes_since_base"}
)
LIST_EDIT_KEYS = frozenset({"$add", "$remove"})


def available_profiles() -> list[str]:
    """Every version data file's name, sorted by name."""
    return sorted(p.stem for p in VERSIONS_DIR.glob("*.json"))


@cache
def raw_data(name: str) -> dict:
    """A data file as written (a patch when it names a base)."""
    path = VERSIONS_DIR / f"{name}.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KeyError(name) from None
    return json.loads(text)


@cache
def resolved_data(name: str) -> dict:
    """A version's full data: its base's, resolved, with this file's changes merged in."""
    raw = raw_data(name)
    base_name = raw.get("base")
    if base_name is None:
        return raw
    base = {k: v for k, v in resolved_data(base_name).items() if k not in OWN_KEYS}
    merged = merge_patch(base, {k: v for k, v in raw.items() if k != "base"})
    return merged


def merge_patch(base: Any, patch: Any) -> Any:
    """`patch` applied to a copy of `base` (the rules in this module's docstring)."""
    if isinstance(patch, dict) and set(patch) and set(patch) <= LIST_EDIT_KEYS:
        if not isinstance(base, list):
            raise ValueError(f"a list edit {sorted(patch)} needs a list to edit, got {type(base).__name__}")
        removed = patch.get("$remove", [])
        missing = [item for item in removed if item not in base]
        if missing:
            raise ValueError(f"list edit removes values the base does not have: {missing}")
        kept = [item for item in base if item not in removed]
        return kept + [item for item in patch.get("$add", []) if item not in kept]
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return copy.deepcopy(patch)
    merged = dict(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged:
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = merge_patch({}, value) if isinstance(value, dict) else copy.deepcopy(value)
    return merged


def diff_patch(base: Any, target: Any) -> Any:
    """The smallest patch that `merge_patch(base, patch)` turns into `target` (for the tools that
    derive a release from its predecessor). Lists of plain values become list edits when that is
    shorter than the whole list."""
    if isinstance(base, dict) and isinstance(target, dict):
        patch: dict = {}
        for key in base:
            if key not in target:
                patch[key] = None
        for key, value in target.items():
            if key not in base:
                patch[key] = copy.deepcopy(value)
            elif base[key] != value:
                patch[key] = diff_patch(base[key], value)
        return patch
    if isinstance(base, list) and isinstance(target, list) and _plain(base) and _plain(target):
        added = [v for v in target if v not in base]
        removed = [v for v in base if v not in target]
        keeps_order = [v for v in base if v in target] + added == target
        if keeps_order and len(added) + len(removed) < len(target):
            edit: dict = {}
            if added:
                edit["$add"] = added
            if removed:
                edit["$remove"] = removed
            return edit
    return copy.deepcopy(target)


def _plain(values: list) -> bool:
    return all(isinstance(v, (str, int, float, bool)) for v in values) and len(set(map(repr, values))) == len(values)


@cache
def code_class(module: str) -> type:
    """The `Rules` class of `attention/versions/<module>.py`."""
    return importlib.import_module(f"{__package__}.{module}").Rules


def release_of(name: str) -> tuple[int, int, int]:
    return tuple(resolved_data(name)["vllm_release"])  # type: ignore[return-value]


def release_profiles() -> list[str]:
    """Profiles of vLLM releases, oldest first (a profile of unreleased code is picked by name only)."""
    names = [n for n in available_profiles() if resolved_data(n).get("release", True)]
    return sorted(names, key=release_of)
