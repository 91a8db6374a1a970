"""Which packages a version's rules look at are present here, found WITHOUT importing them
(`explain --check-imports`)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from attnsel.errors import EnvironmentProblem

if TYPE_CHECKING:
    from attnsel.attention.versions import RuleProfile


def module_available(dotted: str) -> bool:
    """True if `dotted` can be found on sys.path, WITHOUT importing it or its parents.

    `importlib.util.find_spec("a.b")` imports `a`; vLLM's packages import torch, so we walk the
    package directories of the top-level spec instead.
    """
    parts = dotted.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    locations = list(spec.submodule_search_locations or [])
    for index, part in enumerate(parts[1:], start=1):
        is_last = index == len(parts) - 1
        next_locations: list[str] = []
        for location in locations:
            base = Path(location)
            if (base / part).is_dir():
                next_locations.append(str(base / part))
            elif is_last and any((base / f"{part}{suffix}").exists() for suffix in importlib.machinery.all_suffixes()):
                return True
        if not next_locations:
            return False
        locations = next_locations
    return True


def importable_map(profile: RuleProfile) -> dict[str, bool]:
    return {name: module_available(name) for name in profile.all_import_modules()}


def require_vllm_package() -> None:
    """`--check-imports` asks which of vLLM's own modules import here: without vLLM every backend
    would fail with ModuleNotFoundError, which says nothing about the backends (exit 3)."""
    if not module_available("vllm"):
        raise EnvironmentProblem("--check-imports asks which of vLLM's backend modules import here, and vLLM is "
                                 "not installed in this Python environment (pip install vllm, or drop --check-imports)")
