"""Every room's door (its package `__init__`, attnsel/doors.py) offers what the code imports through
it, and says the same thing in its three places.

A door lists each public name three times: imported under TYPE_CHECKING (what readers and type
checkers see), in `__all__`, and in the lazy map that loads the name's module on first use. A name
missing from the map is an ImportError at run time only on the path that asks for it (a whole
command can fail that way while every other test passes), so this checks every import in the
repository against the doors statically, and every door's map by loading each name through it.
"""
import ast
import importlib
from pathlib import Path

import pytest

import attnsel

ROOT = Path(attnsel.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = ["attnsel", *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[Path, ast.Module]:
    paths = [p for p in ROOT.rglob("*.py") if "fixtures" not in p.parts and not any(
        part.startswith(".") or part == "build" for part in p.relative_to(ROOT).parts)]
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in paths}


SOURCES = _sources()
MODULES = {_module_name(p): p for p in SOURCES if "tests" not in p.relative_to(ROOT).parts}
LAZY_DOORS = {name: path for name, path in MODULES.items()
              if path.name == "__init__.py" and "lazy_door" in path.read_text(encoding="utf-8")}


def _door_parts(package: str) -> tuple[set[str], set[str], dict[str, str]]:
    """(names imported under TYPE_CHECKING, __all__, the lazy map) of one door."""
    tree = SOURCES[LAZY_DOORS[package]]
    typed: set[str] = set()
    listed: set[str] = set()
    lazy: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typed |= {a.asname or a.name for n in node.body if isinstance(n, ast.ImportFrom) for a in n.names}
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "__all__":
                listed = set(ast.literal_eval(node.value))
            elif node.targets[0].id == "__getattr__":
                lazy = ast.literal_eval(node.value.args[1])
    return typed, listed, lazy


@pytest.mark.parametrize("package", sorted(LAZY_DOORS))
def test_a_door_lists_the_same_names_in_its_three_places_and_each_loads(package):
    typed, listed, lazy = _door_parts(package)
    assert typed == listed == set(lazy), package
    door = importlib.import_module(package)
    for name, module in lazy.items():
        defined_in = importlib.import_module(f"{package}.{module}")
        assert getattr(door, name) is getattr(defined_in, name), f"{package}.{name}"


def test_every_import_through_a_door_names_what_the_door_offers():
    offered = {package: set(_door_parts(package)[2]) for package in LAZY_DOORS}
    submodules = {package: {m.rsplit(".", 1)[1] for m in MODULES if m.rsplit(".", 1)[0] == package}
                  for package in LAZY_DOORS}
    missing = [f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name} from {node.module}"
               for path, tree in SOURCES.items() for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module in LAZY_DOORS
               for alias in node.names
               if alias.name not in offered[node.module] | submodules[node.module]]
    assert missing == []
