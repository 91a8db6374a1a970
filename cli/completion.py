"""Shell completion of option values (`attnsel --install-completion`): --model (catalog names and
files), --gpu (the GPU table), --attention-backend (the CUDA backends of the chosen --vllm-version)
and --vllm-version. Each returns what starts with the typed text; none may fail (a completion that
raises prints a traceback into the user's shell), so errors complete nothing.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable

import typer


def _quietly(names: Callable[[typer.Context], list[str]]) -> Callable[[typer.Context, str], list[str]]:
    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        try:
            return [name for name in names(ctx) if name.lower().startswith(incomplete.lower())]
        except Exception:  # noqa: BLE001 -- completion offers nothing rather than a traceback
            return []

    complete.__name__ = names.__name__
    return complete


def _model_names(ctx: typer.Context) -> list[str]:
    from attnsel.attention.model import list_catalog

    return list_catalog()


def complete_model(ctx: typer.Context, incomplete: str) -> list[str]:
    """Catalog names, then files and folders (a folder ends with / so the shell goes on into it)."""
    paths = [path + os.sep if os.path.isdir(path) else path
             for path in sorted(glob.glob(glob.escape(os.path.expanduser(incomplete)) + "*"))
             if os.path.isdir(path) or path.endswith(".json")]
    return _quietly(_model_names)(ctx, incomplete) + paths[:200]


@_quietly
def complete_gpu(ctx: typer.Context) -> list[str]:
    from attnsel.probe import gpu_names

    return gpu_names() + (["all"] if ctx.info_name == "explain" else [])


@_quietly
def complete_vllm_version(ctx: typer.Context) -> list[str]:
    from attnsel.attention.versions import release_profiles, resolved_data

    versions = [".".join(str(part) for part in resolved_data(name)["vllm_release"]) for name in release_profiles()]
    return versions[::-1] + (["all"] if ctx.info_name == "explain" else [])


@_quietly
def complete_backend(ctx: typer.Context) -> list[str]:
    from attnsel.attention.versions import select_profile

    return select_profile(ctx.params.get("vllm_version")).profile.backend_names
