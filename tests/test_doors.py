"""Every room's door (its package `__init__`, attnsel/doors.py) offers what the code imports through
it, and lists each public name once.

A door's one listing is its imports under TYPE_CHECKING (what readers and type checkers see);
`lazy_door` reads that block from the door's source and derives the name -> module map and
`__all__` from it. A name the door does not list is an ImportError at run time only on the path
that asks for it (a whole command can fail that way while every other test passes), so this checks
every import in the repository against the doors statically, and every door by loading each name
through it.
"""
import ast
import importlib
from pathlib import Path

import pytest

import attnsel
from attnsel.doors import door_exports, door_exports_from_tree

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


def _door_listing(package: str) -> dict[str, str]:
    """The names a door imports under TYPE_CHECKING -> the module each is imported from (read here
    on its own, not with doors.py's reader)."""
    tree = SOURCES[LAZY_DOORS[package]]
    return {a.asname or a.name: n.module for node in tree.body
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in node.body if isinstance(n, ast.ImportFrom) for a in n.names}


@pytest.mark.parametrize("package", sorted(LAZY_DOORS))
def test_a_door_lists_each_name_once_and_each_loads_from_where_it_is_listed(package):
    tree = SOURCES[LAZY_DOORS[package]]
    listed = [a.asname or a.name for node in tree.body
              if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
              for n in node.body if isinstance(n, ast.ImportFrom) for a in n.names]
    assert listed and len(listed) == len(set(listed)), package
    spelled = [node.targets[0].id for node in tree.body if isinstance(node, ast.Assign)
               and isinstance(node.targets[0], ast.Name)]
    assert spelled == ["__getattr__"], f"{package}: a door lists its names once, under TYPE_CHECKING"
    door = importlib.import_module(package)
    assert door.__all__ == sorted(listed)
    for name, module in _door_listing(package).items():
        assert getattr(door, name) is getattr(importlib.import_module(module), name), f"{package}.{name}"
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        door.not_a_name  # noqa: B018


@pytest.mark.parametrize("package", sorted(LAZY_DOORS))
def test_the_quick_reader_of_a_door_reads_what_the_syntax_tree_says(package):
    importlib.import_module(package)
    assert door_exports(package) == door_exports_from_tree(SOURCES[LAZY_DOORS[package]], package) != {}


def test_a_star_import_through_a_door_takes_its_listing():
    namespace: dict[str, object] = {}
    exec("from attnsel.attention.versions import *", namespace)
    assert {"RuleProfile", "release_profiles", "ModelRules"} <= set(namespace)


def test_every_import_through_a_door_names_what_the_door_offers():
    offered = {package: set(_door_listing(package)) for package in LAZY_DOORS}
    submodules = {package: {m.rsplit(".", 1)[1] for m in MODULES if m.rsplit(".", 1)[0] == package}
                  for package in LAZY_DOORS}
    missing = [f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name} from {node.module}"
               for path, tree in SOURCES.items() for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module in LAZY_DOORS
               for alias in node.names
               if alias.name not in offered[node.module] | submodules[node.module]]
    assert missing == []
