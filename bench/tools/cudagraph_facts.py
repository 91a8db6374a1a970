"""A release's CUDA-graph facts (attention/versions/*.json `cudagraph`, read by attention/selector/cudagraph.py),
from the installed wheel's source: each modelled backend's metadata builder `_cudagraph_support` /
`get_cudagraph_support`, and where VllmConfig settles the default mode and the largest capture size.

    python -m attnsel.bench.tools.release_env run 0.25.0 -- -m attnsel.bench.tools.cudagraph_facts [--profile vllm_0_25]

Run it with the release's Python. It prints, per backend of the profile's `cudagraph.support`, the
lines of the builder's module that set or compute the support level (the class attribute is
evaluated at import, and a `get_cudagraph_support` override decides per GPU, e.g. FA3 or TRT-LLM),
then the config lines for the mode and sizes, and the profile's recorded facts to compare. Reading
the lines and writing the data stays a person's job: the level can depend on the GPU.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
from typing import Any

SUPPORT_LINE = re.compile(r"_cudagraph_support|def get_cudagraph_support|AttentionCGSupport\.\w+")
CONFIG_LINE = re.compile(r"FULL_AND_PIECEWISE|max_cudagraph_capture_size\s*=|max_num_seqs \* 2|2 \* .*max_num_seqs|, 512")


def _matching_lines(source: str, pattern: re.Pattern, context: int = 1) -> list[str]:
    lines = source.splitlines()
    keep = sorted({j for i, line in enumerate(lines) if pattern.search(line)
                   for j in range(max(0, i - context), min(len(lines), i + context + 1))})
    return [f"{j + 1:5d}: {lines[j]}" for j in keep]


def builder_lines(backend: str) -> dict[str, Any]:
    from attnsel.attention.explain import vllm_runtime

    enum = vllm_runtime(offline=True).registry.AttentionBackendEnum
    try:
        builder = enum[backend].get_class().get_builder_cls()
    except Exception as exc:  # noqa: BLE001 -- reported: the release lacks or cannot import it
        return {"error": f"{type(exc).__name__}: {exc}"}
    module = sys.modules[builder.__module__]
    level = getattr(builder, "_cudagraph_support", None)
    return {"builder": f"{builder.__module__}.{builder.__qualname__}",
            "class_attribute_here": getattr(level, "name", level),
            "lines": _matching_lines(inspect.getsource(module), SUPPORT_LINE)}


def config_lines() -> dict[str, list[str]]:
    import importlib

    found = {}
    for name in ("vllm.config.vllm", "vllm.config.compilation", "vllm.config.scheduler", "vllm.engine.arg_utils"):
        try:
            source = inspect.getsource(importlib.import_module(name))
        except Exception:  # noqa: BLE001 -- a module this release does not have
            continue
        found[name] = _matching_lines(source, CONFIG_LINE, context=0)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="the profile whose recorded facts to compare (default: the installed vLLM's)")
    ns = parser.parse_args(argv)
    import logging

    from attnsel.attention.versions import select_profile

    logging.getLogger("vllm").setLevel(logging.CRITICAL)
    profile = select_profile(ns.profile).profile
    recorded = profile.data.get("cudagraph", {})
    for backend in recorded.get("support", {}):
        print(json.dumps({backend: {"recorded": recorded["support"][backend], **builder_lines(backend)}}, indent=1))
    print(json.dumps({"recorded": {k: v for k, v in recorded.items() if k != "support"}, **config_lines()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
