"""The spine's numbers (issue 35): how loose the data between attnsel's layers still is.

    python -m attnsel.bench.tools.spine_metrics [--root DIR] [--json]

Over the package's code (tests/ and the developer scripts of bench/tools/ left out):
- `any`: each `Any` named in the code (`Any` or `typing.Any`, annotations and casts alike);
- `get_literal`: each `.get("literal", ...)` call, a dict looked up by a key spelled in place;
- `mypy`: the modules mypy checks for errors over all modules it could check (the whole package but
  tests/): those its `files` reach, less those an override sets `ignore_errors` on; and their lines;
- `circles`, `upward`: bench/tools/import_graph.py's import circles and imports that run back up a layer.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib
import json
import sys
from pathlib import Path

from attnsel.bench.tools.import_graph import PACKAGE, analyse, module_files


def _load_toml(path: Path) -> dict:
    tomllib = importlib.import_module("tomllib")  # Python 3.11+ (a developer tool; CI's 3.10 job skips it)
    return tomllib.loads(path.read_text(encoding="utf-8"))


def code_counts(root: Path) -> dict[str, int]:
    anys = gets = 0
    for path in module_files(root).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Name) and node.id == "Any") or (
                isinstance(node, ast.Attribute) and node.attr == "Any"
            ):
                anys += 1
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                gets += 1
    return {"any": anys, "get_literal": gets}


def mypy_scope(root: Path) -> dict[str, int]:
    """Modules (and lines) mypy reports errors for, over all the package's modules but the tests."""
    config = _load_toml(root / "pyproject.toml").get("tool", {}).get("mypy", {})
    every: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in ("tests", "build") or any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
            continue
        parts = rel.with_suffix("").parts
        every[".".join((PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    files = [f.replace("$MYPY_CONFIG_FILE_DIR", str(root)).rstrip("/") for f in config.get("files", [str(root)])]
    if isinstance(config.get("files"), str):
        files = [config["files"].replace("$MYPY_CONFIG_FILE_DIR", str(root))]
    reached = {m for m, p in every.items() if any(str(p) == f or str(p).startswith(f + "/") for f in files)}
    ignored: set[str] = set()
    for override in config.get("overrides", []):
        if override.get("ignore_errors"):
            patterns = override["module"] if isinstance(override["module"], list) else [override["module"]]
            ignored |= {m for m in reached if any(fnmatch.fnmatchcase(m, pat) for pat in patterns)}
    checked = reached - ignored

    def lines(mods: set[str] | dict[str, Path]) -> int:
        return sum(len(every[m].read_text(encoding="utf-8").splitlines()) for m in mods)

    return {"checked": len(checked), "modules": len(every), "checked_lines": lines(checked), "lines": lines(every)}


def metrics(root: Path) -> dict[str, object]:
    graph = analyse(root)
    circles, upward = graph["circles"], graph["upward"]
    assert isinstance(circles, list) and isinstance(upward, list)
    return {
        **code_counts(root),
        "mypy": mypy_scope(root),
        "circles": len(circles),
        "largest_circle": max((len(c) for c in circles), default=0),
        "upward": len(upward),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    m = metrics(args.root)
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    scope = m["mypy"]
    assert isinstance(scope, dict)
    print(f"Any: {m['any']}")
    print(f".get(\"literal\"): {m['get_literal']}")
    print(f"mypy checks {scope['checked']}/{scope['modules']} modules, "
          f"{scope['checked_lines']}/{scope['lines']} lines ({100 * scope['checked_lines'] / scope['lines']:.0f}%)")
    print(f"import circles: {m['circles']} (largest {m['largest_circle']} modules)")
    print(f"upward imports: {m['upward']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
