"""The hybrid table of docs/explain.md: for each bundled hybrid config and vLLM version, what `explain`
answers on one GPU with vLLM's defaults (state page, attention page per token, block size,
padding, cache mode, KV-cache groups, blocks one request pins).

    python -m attnsel.bench.tools.hybrid_table [--versions 0.33,0.24] [--gpu H100]
"""

from __future__ import annotations

import argparse
import sys

MODELS = ("jamba-v0.1", "nemotron-h-8b", "granite-4.0-h-350m", "falcon-h1-7b", "qwen3-next-80b-a3b", "qwen3.5-9b",
          "glm-5-next")
HEADER = ("| model | vLLM | state | state page | attn B/token | backend | block | padding | prefix / mode "
          "| groups (attn+state) | blocks / request |")


def row(model: str, version: str, gpu: str) -> str:
    from attnsel.attention.explain import model_facts, resolve_gpu
    from attnsel.attention.model import load_model_config
    from attnsel.attention.selector import (
        SelectionRequest,
        build_selection,
        explain_selection,
    )
    from attnsel.attention.versions import get_profile
    from attnsel.errors import UserInputError

    profile = get_profile(version)
    resolved = resolve_gpu(gpu, None)
    assert resolved is not None  # --gpu NAME always resolves (or is refused)
    gpu_name, cc = resolved
    try:
        facts = model_facts(load_model_config(model), None, 1, cc, gpu_name, profile.model_rules)
    except UserInputError as exc:
        return f"| {model} | {profile.vllm_version} | {exc} |" + " |" * 8
    inputs, ctx, notes = build_selection(profile, SelectionRequest(), model_facts=facts, capability=cc, gpu_name=gpu_name)
    expl = explain_selection(profile, inputs, ctx, notes)
    h = expl.hybrid
    if h is None:
        return f"| {model} | {profile.vllm_version} | {expl.error or 'not sized'} |" + " |" * 8
    padding = "-" if h.padding_pct is None else f"{h.padding_pct:.2f}%"
    groups = h.groups
    return (f"| {model} | {profile.vllm_version} | {h.kind} | {h.state_page_bytes:,} | {h.attention_page_bytes_per_token:,} "
            f"| {expl.selected} | {expl.block_size} | {padding} | {'on' if h.prefix_caching else 'off'} / "
            f"{h.mamba_cache_mode} | {groups.attention_groups}+{groups.mamba_groups} | {groups.blocks_pinned_per_request} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default="0.33,0.24")
    parser.add_argument("--gpu", default="H100")
    ns = parser.parse_args(argv)
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for model in MODELS:
        for version in ns.versions.split(","):
            print(row(model, version, ns.gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
