"""Rewrite a version's data file as a patch on another version (usually its new predecessor), keeping
what it resolves to unchanged: `registry.resolved_data(name)` is the same before and after.

    python -m attnsel.bench.tools.rebase_profile vllm_0_25 --base vllm_0_24
    python -m attnsel.bench.tools.rebase_profile vllm_0_33 --standalone      # no base: the full data

Used when a release is added between two existing ones (0.25 between 0.24 and 0.33: 0.33 is then
rebased on 0.25), so every file stays "what changed since the release before".
"""

from __future__ import annotations

import argparse
import json
import sys

from attnsel.attention.versions import (
    OWN_KEYS,
    VERSIONS_DIR,
    diff_patch,
    raw_data,
    resolved_data,
)


def rebased(name: str, base: str | None) -> dict:
    target = resolved_data(name)
    own = {k: v for k, v in raw_data(name).items() if k in OWN_KEYS and k != "base"}
    body = {k: v for k, v in target.items() if k not in OWN_KEYS}
    if base is None:
        return {**own, **body}
    base_body = {k: v for k, v in resolved_data(base).items() if k not in OWN_KEYS}
    name_first = {"name": own.pop("name"), "base": base}
    return {**name_first, **own, **diff_patch(base_body, body)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--base")
    group.add_argument("--standalone", action="store_true")
    ns = parser.parse_args(argv)
    before = resolved_data(ns.name)
    doc = rebased(ns.name, None if ns.standalone else ns.base)
    path = VERSIONS_DIR / f"{ns.name}.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    raw_data.cache_clear()
    resolved_data.cache_clear()
    after = resolved_data(ns.name)
    if {k: v for k, v in after.items() if k != "base"} != {k: v for k, v in before.items() if k != "base"}:
        print(f"error: {path} no longer resolves to the same data", file=sys.stderr)
        return 1
    print(f"rewrote {path} ({len(json.dumps(doc))} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
