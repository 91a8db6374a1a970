"""Where a model's config.json comes from: `--model` as users give it.

    a file            config.json (any name), read bounded (files.py)
    a folder          its config.json
    `-`               standard input (`curl -sL URL | attnsel explain --model -`)
    a /dev/fd path    `--model <(jq ... config.json)`: a pipe, read bounded
    a catalog name    attention/models/<name>.json (llama-3.1-8b, ...)
    org/name          a Hugging Face model id: config.json through huggingface_hub (extra `[hf]`),
                      the local Hugging Face cache first (HF_HUB_OFFLINE=1 works offline)
    a URL             one line saying what to pass instead (attnsel downloads nothing itself)

A local path always wins over a catalog name or a Hugging Face id of the same spelling, as it does
for vLLM and transformers. Nothing here runs model code (a config's `auto_map` is never followed).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from attnsel import files
from attnsel.errors import UserInputError

CATALOG_DIR = Path(__file__).resolve().parents[1] / "models"
CONFIG_LIMIT = 16 * 2**20  # the largest real config.json files are a few hundred KiB
WHAT = "a model config.json"
HF_EXTRA_HINT = "pip install 'attnsel[hf]'"

# huggingface_hub's repo-id rule (validate_repo_id): two parts of [A-Za-z0-9_.-], at most 96 each
_HF_ID = re.compile(r"^(?P<org>[A-Za-z0-9][A-Za-z0-9_.-]{0,95})/(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]{0,95})$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_HF_HOSTS = ("huggingface.co", "hf.co", "www.huggingface.co")


@dataclass(frozen=True)
class ModelSource:
    """A config and where it came from (the `source` explain prints next to the name)."""

    name: str
    source: str  # "path" | "folder" | "stdin" | "pipe" | "catalog" | "Hugging Face cache" | "Hugging Face Hub"
    text: str
    where: str  # how messages name it


def catalog_names() -> list[str]:
    return sorted(p.stem for p in CATALOG_DIR.glob("*.json"))


def read_model(spec: str) -> ModelSource:
    """The config.json text for a --model value (see the module docstring for the forms)."""
    spec = str(spec)
    if spec == files.STDIN:
        return _stdin_source()
    if not spec.strip():
        raise UserInputError("--model is empty: pass a config.json, a folder, a catalog name or a Hugging Face id")
    info = files.path_info(spec, "--model")
    if info.kind == "dir":
        return _folder_source(spec)
    if info.kind in ("file", "pipe"):
        text = files.read_input(spec, what=WHAT, limit=CONFIG_LIMIT, flag="--model")
        return ModelSource(spec, "pipe" if info.kind == "pipe" else "path", text, spec)
    if spec in catalog_names():
        path = CATALOG_DIR / f"{spec}.json"
        return ModelSource(spec, "catalog", path.read_text(encoding="utf-8"), f"catalog model {spec!r}")
    if _URL.match(spec):
        raise UserInputError(_url_message(spec))
    if _HF_ID.match(spec) and not spec.endswith(".json"):
        return _hub_source(spec)
    raise UserInputError(_not_found_message(spec))


# (the stdin stream, its text): held with a strong reference, so the identity test below cannot
# match a new stream that happens to reuse a freed one's id()
_STDIN_READ: list = []


def _stdin_text() -> str:
    # Standard input can be read once: a command that loads the model twice gets the same text.
    # A new stdin (an embedding caller, a test runner) is read anew.
    if not _STDIN_READ or _STDIN_READ[0] is not sys.stdin:
        text = files.read_input(files.STDIN, what=WHAT, limit=CONFIG_LIMIT, flag="--model")
        _STDIN_READ[:] = [sys.stdin, text]
    return _STDIN_READ[1]


def _stdin_source() -> ModelSource:
    return ModelSource("-", "stdin", _stdin_text(), "standard input")


def _folder_source(folder: str) -> ModelSource:
    candidate = os.path.join(folder, "config.json")
    info = files.path_info(candidate, "--model")
    if info.kind == "missing":
        raise UserInputError(f"{folder} is a directory without config.json: pass the model's folder or its config.json")
    text = files.read_input(candidate, what=WHAT, limit=CONFIG_LIMIT, flag="--model")
    return ModelSource(folder, "folder", text, candidate)


def closest_names(name: str, valid: list[str], cutoff: float = 0.4) -> list[str]:
    """Up to three suggestions: names that extend what was typed first, then look-alikes."""
    extending = [v for v in valid if name and v.startswith(name)]
    similar = difflib.get_close_matches(name, valid, n=3, cutoff=cutoff)
    return list(dict.fromkeys(extending + similar))[:3]


def _not_found_message(spec: str) -> str:
    looks_like_path = os.sep in spec or "/" in spec or spec.endswith(".json") or spec.startswith(".")
    if looks_like_path:
        return f"Model config not found: {files.shown_path(spec)} is not a file or a folder"
    close = closest_names(spec, catalog_names(), cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (f"Model {files.shown_path(spec)} is not a file, a folder, a catalog name or a Hugging Face id (org/name).{hint} "
            f"Catalog: {', '.join(catalog_names())}")


def _url_message(url: str) -> str:
    parsed = urlparse(url)
    if (parsed.hostname or "").lower() in _HF_HOSTS:
        parts = [p for p in parsed.path.split("/") if p]
        if parts and parts[0] in ("models",):
            parts = parts[1:]
        if len(parts) >= 2 and _HF_ID.match(f"{parts[0]}/{parts[1]}"):
            repo = f"{parts[0]}/{parts[1]}"
            return (f"attnsel reads no URLs: pass the Hugging Face id instead, --model {repo} "
                    f"(needs huggingface_hub: {HF_EXTRA_HINT}), or a downloaded config.json")
    return ("attnsel reads no URLs: download the config.json and pass its path, or pipe it in: "
            f"curl -sL '{url[:200]}' | attnsel explain --model -")


# ---------------------------------------------------------------------------------------------
# Hugging Face Hub


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _cache_dir() -> str | None:
    """The cache huggingface_hub would use, read at call time (its own constants are fixed at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _hub_source(repo_id: str) -> ModelSource:
    try:
        import huggingface_hub  # noqa: F401 -- optional extra
    except ImportError:
        raise UserInputError(
            f"{repo_id!r} is not a local file or folder; as a Hugging Face model id it needs huggingface_hub "
            f"({HF_EXTRA_HINT}), or pass a downloaded config.json"
        ) from None
    path, source = _hub_config_path(repo_id)
    text = files.read_input(path, what=WHAT, limit=CONFIG_LIMIT, flag="--model")
    return ModelSource(repo_id, source, text, f"{repo_id} (config.json from the {source})")


def _hub_config_path(repo_id: str) -> tuple[str, str]:
    """config.json of a Hub model: from the local cache when it is there, else downloaded."""
    import logging

    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cache_dir = _cache_dir()
    cached = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    if isinstance(cached, str):
        return cached, "Hugging Face cache"
    if _offline():
        raise UserInputError(f"{repo_id}: config.json is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
                             "download it once online (or pass a config.json)")
    if not _hub_reachable():
        raise UserInputError(_unreachable(repo_id))
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)  # its retry lines would break the one-line promise
    try:
        return hf_hub_download(repo_id, "config.json", cache_dir=cache_dir), "Hugging Face Hub"
    except Exception as exc:  # noqa: BLE001 -- every Hub failure is one line, named below
        raise UserInputError(_hub_error(repo_id, exc)) from None
    finally:
        hub_logger.setLevel(level)


# huggingface_hub retries a failed connection five times, 1 + 2 + 4 + 8 + 8 s apart (utils/_http.py
# http_backoff): an offline machine waited 24 s for its answer. One connection attempt first, with a short
# timeout, answers in well under that; behind a proxy the Hub's own host need not be reachable, so not then.
HUB_CONNECT_TIMEOUT_S = 5.0
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


def _hub_reachable() -> bool:
    """False only when the Hub's host cannot be resolved or connected to (no proxy configured)."""
    import socket

    from huggingface_hub import constants

    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return True
    url = urlparse(constants.ENDPOINT)
    if not url.hostname:
        return True  # an endpoint we cannot read: let huggingface_hub answer
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=HUB_CONNECT_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def _unreachable(repo_id: str) -> str:
    return (f"{repo_id}: the Hugging Face Hub cannot be reached and config.json is not in the local cache "
            "(pass a downloaded config.json, or run once with network access)")


def _hub_error(repo_id: str, exc: Exception) -> str:
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "GatedRepoError" in names:
        return (f"{repo_id} is a gated model: accept its licence on its Hugging Face page and log in "
                "(`hf auth login` or HF_TOKEN), or pass a downloaded config.json")
    if "RepositoryNotFoundError" in names:
        return f"no Hugging Face model {repo_id} (or it is private: log in with `hf auth login` or HF_TOKEN)"
    if "RevisionNotFoundError" in names:
        return f"{repo_id}: the revision asked for does not exist"
    if "LocalEntryNotFoundError" in names:
        return _unreachable(repo_id)
    if "EntryNotFoundError" in names:
        return f"{repo_id} has no config.json (is it a model repository vLLM can serve?)"
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"{repo_id}: cannot read config.json from the Hugging Face Hub ({type(exc).__name__}: {first})"
