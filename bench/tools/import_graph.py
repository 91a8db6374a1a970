"""attnsel's import graph: the circles among its modules and the imports that run back up a layer.

    python -m attnsel.bench.tools.import_graph [--root DIR] [--json]

Every module of the package is read as source (AST; nothing is imported), except tests/ and the
developer scripts of bench/tools/. An edge is any import that can run: at the top of a module or
inside a function (those hide a circle at run time but not from a reader), never one under
`if TYPE_CHECKING:`. Relative imports are resolved, and `from <door> import Name` is followed
through the door (attnsel/doors.py) to the module that defines Name, as it happens at run time.
An import of `a.b.c` is an edge to `a.b.c` only, not to the packages above it: a door runs nothing
but `attnsel.doors` when it loads.

A circle is a strongly connected component of two or more modules. An upward import goes from a
lower layer to a higher one of the `layers` contracts in pyproject.toml (those lint-imports checks),
their `ignore_imports` NOT applied: each exemption there is a way up this tool still reports.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from attnsel.doors import door_exports_from_tree

PACKAGE = "attnsel"
SKIPPED_TOP = ("tests", "build", "dist")


@dataclass(frozen=True)
class Edge:
    """One import that can run: `source` imports `target` at `line` (inside a function when `deferred`)."""

    source: str
    target: str
    line: int
    deferred: bool


@dataclass
class Graph:
    modules: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)

    def successors(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for e in self.edges:
            out[e.source].add(e.target)
        return out


def module_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Module name -> file for every package module under `root` (the folder that *is* `package`)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        top = rel.parts[0]
        if top.startswith(".") or top.startswith(".whl") or top in SKIPPED_TOP or rel.parts[:2] == ("bench", "tools"):
            continue
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        parts = rel.with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((package, *parts))] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import statement that can run, and whether it sits inside a function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:  # the `else:` of `if TYPE_CHECKING:` runs
                yield from _imports(ast.Module(body=[child], type_ignores=[]), in_function)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
            continue
        nested = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _imports(node, nested)


def _resolve_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


class Resolver:
    """Turns an imported name into the package module it loads, doors followed."""

    def __init__(self, modules: Mapping[str, Path], trees: Mapping[str, ast.Module]) -> None:
        self.modules = modules
        self.doors: dict[str, dict[str, str]] = {}
        for name, path in modules.items():
            if path.name == "__init__.py":
                exports = door_exports_from_tree(trees[name], name)
                if exports:
                    self.doors[name] = exports

    def owner(self, dotted: str) -> str | None:
        """The deepest package module `dotted` names (`a.b.c` -> `a.b` when c is not a module)."""
        while dotted:
            if dotted in self.modules:
                return dotted
            if "." not in dotted:
                return None
            dotted = dotted.rsplit(".", 1)[0]
        return None

    def through_door(self, package: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """What `from package import name` loads: the submodule, the defining module behind a door,
        or the package itself."""
        sub = f"{package}.{name}"
        if sub in self.modules:
            return sub
        exports = self.doors.get(package)
        if exports and name in exports and package not in seen:
            target = exports[name]
            if target in self.doors:  # a door that points into a sub-door
                return self.through_door(target, name, seen | {package})
            return self.owner(target) or package
        return package


def build_graph(root: Path, package: str = PACKAGE) -> Graph:
    modules = module_files(root, package)
    trees = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in modules.items()}
    resolver = Resolver(modules, trees)
    graph = Graph(modules)
    seen: set[tuple[str, str, int]] = set()
    for name, tree in trees.items():
        is_package = modules[name].name == "__init__.py"
        for node, deferred in _imports(tree):
            targets: list[str | None]
            if isinstance(node, ast.Import):
                targets = [resolver.owner(alias.name) for alias in node.names]
            else:
                base = _resolve_base(name, is_package, node)
                owner = resolver.owner(base)
                if owner is None:
                    continue
                if owner != base:  # `from a.b.c import X` where a.b.c is no module of ours
                    targets = [owner]
                else:
                    targets = [resolver.through_door(base, alias.name) for alias in node.names]
            for target in targets:
                if target is not None and target != name and (name, target, node.lineno) not in seen:
                    seen.add((name, target, node.lineno))
                    graph.edges.append(Edge(name, target, node.lineno, deferred))
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of two or more modules, largest first (Tarjan, iterative)."""
    succ = {m: sorted(s) for m, s in graph.successors().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(succ):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if i < len(succ[node]):
                work.append((node, i + 1))
                nxt = succ[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found, key=lambda c: (-len(c), c))


@dataclass(frozen=True)
class Layers:
    """One `layers` contract: `containers` from the highest layer down, each a set of module prefixes."""

    name: str
    levels: tuple[tuple[str, ...], ...]

    def level_of(self, module: str) -> int | None:
        for depth, prefixes in enumerate(self.levels):
            if any(module == p or module.startswith(p + ".") for p in prefixes):
                return depth
        return None


def layer_contracts(pyproject: Path) -> list[Layers]:
    """The `layers` contracts of import-linter in `pyproject`, their exemptions left out on purpose."""
    tomllib = importlib.import_module("tomllib")  # Python 3.11+ (a developer tool; CI's 3.10 job skips it)
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    contracts = data.get("tool", {}).get("importlinter", {}).get("contracts", [])
    out = []
    for contract in contracts:
        if contract.get("type") != "layers":
            continue
        levels = tuple(
            tuple(p.strip() for p in level.replace(":", "|").split("|")) for level in contract["layers"]
        )
        out.append(Layers(contract.get("name", ""), levels))
    return out


def upward_imports(graph: Graph, contracts: Iterable[Layers]) -> list[tuple[Edge, str]]:
    """Each edge from a lower layer to a higher one (a smaller index is higher), with its contract."""
    found = []
    for edge in graph.edges:
        for contract in contracts:
            src, dst = contract.level_of(edge.source), contract.level_of(edge.target)
            if src is not None and dst is not None and dst < src:
                found.append((edge, contract.name))
    return found


def analyse(root: Path, package: str = PACKAGE) -> dict[str, object]:
    graph = build_graph(root, package)
    pyproject = root / "pyproject.toml"
    contracts = layer_contracts(pyproject) if pyproject.exists() else []
    ups = upward_imports(graph, contracts)
    return {
        "modules": len(graph.modules),
        "edges": len(graph.edges),
        "deferred_edges": sum(e.deferred for e in graph.edges),
        "circles": circles(graph),
        "upward": [
            {"from": e.source, "to": e.target, "line": e.line, "deferred": e.deferred, "contract": c} for e, c in ups
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = analyse(args.root)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    found = result["circles"]
    assert isinstance(found, list)
    print(f"{result['modules']} modules, {result['edges']} edges ({result['deferred_edges']} inside functions)")
    print(f"{len(found)} circles")
    for comp in found:
        print(f"  {len(comp)}: {', '.join(comp)}")
    ups = result["upward"]
    assert isinstance(ups, list)
    print(f"{len(ups)} upward imports")
    for up in ups:
        print(f"  {up['from']}:{up['line']} -> {up['to']}{' (in a function)' if up['deferred'] else ''}  [{up['contract']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
