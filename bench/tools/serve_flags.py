"""The flags `vllm serve` accepts in a release, read from the release's own wheel source, compared with
(or written into) the release data's `serve_flags` (attention/versions/vllm_0_X.json; read by
attention/rules/serve_line.py through the version object).

    python -m attnsel.bench.tools.serve_flags 0.17.0 0.34.0 [--site-packages DIR] [--write] [--json]

Where the flags come from (each release's own files, read without installing anything: HTTP range requests
into the PyPI wheel, as memory_facts does):
- vllm/engine/arg_utils.py `EngineArgs.add_cli_args`: every `add_argument("--name", "-alias", ...)`;
- the OpenAI server's own arguments: the `*FrontendArgs` dataclasses, one `--field-name` per field
  (`make_arg_parser` adds them in a loop over `get_kwargs(cls)`), and the literal `add_argument` calls
  of that module (vllm/entrypoints/openai/cli_args.py; vllm/entrypoints/common/cli_args.py from 0.34);
- vllm/entrypoints/cli/serve.py and vllm/entrypoints/utils.py: serve's own literal flags, if any.
vLLM's parser (vllm/utils/argparse_utils.py FlexibleArgumentParser) also takes underscores for dashes,
`--no-X` for a boolean `--X`, dotted `--json-arg.key` forms and argparse's unique prefixes: the reader
(attention/rules/serve_line.py) applies those rules; the data is the declared names only.

`--write` puts the set into the data: the full list in a release whose base has none (vllm_0_33.json) and,
in every other release file, the list edit against its base's (`{"$add": [...], "$remove": [...]}`).
Exit status 1 when a release's data differs from its source (without --write).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from attnsel.bench.tools.memory_facts import wheel_sources_of

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "attention" / "versions"
SOURCES = ("vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py", "vllm/entrypoints/common/cli_args.py",
           "vllm/entrypoints/cli/serve.py", "vllm/entrypoints/utils.py")


def literal_flags(tree: ast.AST) -> set[str]:
    """The option strings of every `add_argument(...)` call."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            found.update(arg.value for arg in node.args
                         if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"))
    return found


def frontend_flags(tree: ast.AST) -> set[str]:
    """`--field-name` for every field of the FrontendArgs dataclasses (their base classes in the module too)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
            found.update("--" + item.target.id.replace("_", "-") for item in node.body
                         if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                         and not item.target.id.startswith("_"))
    return found


def serve_flags(sources: dict[str, str]) -> list[str]:
    flags: set[str] = set()
    for source in sources.values():
        tree = ast.parse(source)
        flags |= literal_flags(tree) | frontend_flags(tree)
    return sorted(flags)


def _release_file(version: str) -> Path:
    major, minor = version.split(".")[:2]
    return VERSIONS / f"vllm_{major}_{minor}.json"


def _data_flags(version: str) -> set[str]:
    from attnsel.attention.versions import get_profile

    return set(get_profile(version).serve_flags)


def _base_flags(base: str | None, found: dict[str, list[str]]) -> set[str] | None:
    """What a release's base holds: the set found for it in this run, else the base's data (None: none)."""
    if base is None:
        return None
    for version, flags in found.items():
        if _release_file(version).stem == base:
            return set(flags)
    from attnsel.attention.versions.registry import resolved_data

    inherited = resolved_data(base).get("serve_flags")
    return set(inherited) if inherited else None


def write(found: dict[str, list[str]]) -> None:
    """A release whose base has no set gets its full list; every other one the list edit against its base's
    (`{"$add": [...], "$remove": [...]}`, attention/versions/registry.py)."""
    for version, flags in found.items():
        path = _release_file(version)
        data = json.loads(path.read_text())
        inherited = _base_flags(data.get("base"), found)
        if inherited is None:
            data["serve_flags"] = list(flags)
        else:
            added, removed = sorted(set(flags) - inherited), sorted(inherited - set(flags))
            edit = {**({"$add": added} if added else {}), **({"$remove": removed} if removed else {})}
            if edit:
                data["serve_flags"] = edit
            else:
                data.pop("serve_flags", None)
        path.write_text(_with_serve_flags(path.read_text(), data.get("serve_flags")))


def _with_serve_flags(text: str, value: object) -> str:
    """The file's text with `serve_flags` as its last key (the rest of the file as it was written)."""
    marker = '\n "serve_flags": '
    if marker in text:  # written by an earlier run: that key and its value out, wherever they stand
        start = text.index(marker)
        _, end = json.JSONDecoder().raw_decode(text, start + len(marker))
        before, after = text[:start].rstrip(), text[end:].lstrip()
        text = (before.rstrip(",") + "\n" + after) if after.startswith("}") else (before + "\n" + after.lstrip(",").lstrip())
    if value is None:
        return text
    body = json.dumps(value, indent=1, ensure_ascii=False).replace("\n", "\n ")
    return text.rstrip().removesuffix("}").rstrip() + f',{marker}{body}\n}}\n'


def record_parser(out: Path) -> int:
    """Inside a release's environment (release_env run X -- -m attnsel.bench.tools.serve_flags --record-parser
    OUT): the option strings of that vLLM's own `vllm serve` parser, for tests/test_serve_flags.py to replay.
    The CPU platform stands in for CUDA (the parser's defaults may differ by platform, its options do not)."""
    from attnsel.attention.versions.serve_parser import serve_parsers

    cpu_platform_stands_in()
    version, _parser, serve = serve_parsers()
    options = sorted({option for action in serve._actions for option in action.option_strings})
    out.write_text(json.dumps({"vllm_version": version, "source": "bench/tools/serve_flags.py --record-parser",
                               "options": options}, indent=1) + "\n")
    print(f"{len(options)} option strings of vLLM {version}'s `vllm serve` in {out}")
    return 0


def cpu_platform_stands_in() -> None:
    """vLLM's serve parser asks the current platform while it is built ("Failed to infer device type" on a
    machine without a GPU): its CPU platform stands in, for the developer scripts that record the parser."""
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*")
    parser.add_argument("--record-parser", type=Path, metavar="OUT", help="write the installed vLLM's own serve options")
    parser.add_argument("--site-packages", type=Path, help="read this installed vLLM instead of the PyPI wheel")
    parser.add_argument("--write", action="store_true", help="write the sets into the release data")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.record_parser:
        return record_parser(args.record_parser)
    found = {}
    for version in args.versions:
        if args.site_packages:
            sources = {p: (args.site_packages / p).read_text() for p in SOURCES if (args.site_packages / p).is_file()}
        else:
            sources = wheel_sources_of(version, SOURCES)
        found[version] = serve_flags(sources)
    if args.write:
        write(found)
        return 0
    differs = False
    for version, flags in found.items():
        data = _data_flags(version)
        missing, extra = sorted(set(flags) - data), sorted(data - set(flags))
        differs |= bool(missing or extra)
        if args.json:
            print(json.dumps({"version": version, "flags": len(flags), "not_in_data": missing, "only_in_data": extra}))
        else:
            print(f"vllm {version}: {len(flags)} flags; not in the data: {missing or 'none'}; only in the data: {extra or 'none'}")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
