"""Doors: a package's public names, each loaded on first use (PEP 562).

Every room (a subpackage such as `attnsel.bench.tune`) names what the rest of attnsel may import
from it in its `__init__`, ONCE: the imports under `if TYPE_CHECKING:`, which readers and type
checkers follow to where each name is defined. That block is the door's one listing: `lazy_door`
reads it from the door's own source the first time a name is asked for and derives both the
name -> module map and `__all__` from it. At run time a name is imported from its module only
when first asked for, so `from attnsel.attention.model import check_size` costs one module, not
the room: `attnsel probe` must start in well under a second and never import torch.
"""

from __future__ import annotations

import ast  # already loaded wherever attnsel runs (dataclasses imports inspect, which imports it)
import sys
from collections.abc import Callable, Mapping
from typing import Any


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def door_exports_from_tree(tree: ast.Module, package: str) -> dict[str, str]:
    """A door's public names -> the full name of the module defining each, read from the door's
    parsed source: the `from X import A, B` statements under `if TYPE_CHECKING:` (relative ones
    resolved against `package`), or a mapping literal handed to `lazy_door` (the older doors'
    form, still read). Empty for a package that is no door."""
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    base = _absolute("." * stmt.level + (stmt.module or ""), package)
                    for alias in stmt.names:
                        exports[alias.asname or alias.name] = base
        value = node.value if isinstance(node, ast.Assign) else None
        if isinstance(value, ast.Call) and len(value.args) > 1 and isinstance(value.args[1], ast.Dict):
            old: dict[str, str] = {}
            for key, val in zip(value.args[1].keys, value.args[1].values):
                if isinstance(key, ast.Constant) and isinstance(val, ast.Constant) and isinstance(val.value, str):
                    old[str(key.value)] = f"{package}.{val.value}"
            return old
    return exports


def _absolute(module: str, package: str) -> str:
    """`module` as written in `package`'s door (`.sub` relative to it) as a full module name."""
    dots = len(module) - len(module.lstrip("."))
    if not dots:
        return module
    base = package.split(".")[: len(package.split(".")) - (dots - 1)]
    return ".".join([*base, *([module[dots:]] if module[dots:] else [])])


def door_exports(package: str) -> dict[str, str]:
    """The public names of the door `package` (already imported) -> the full name of the module
    defining each, read from the door's file: its `from X import ...` lines under `if TYPE_CHECKING:`.
    A plain line scan, not `ast` (a tenth of the time on probe's start-up path); it reads what
    `door_exports_from_tree` reads (tests/test_doors.py holds both to the same answer)."""
    path = sys.modules[package].__file__
    if path is None:
        raise ImportError(f"door {package!r} has no source file to read its names from")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    block = text.partition("\nif TYPE_CHECKING:")[2]
    exports: dict[str, str] = {}
    module = ""
    for line in block.splitlines()[1:]:
        if line and not line[0].isspace():
            break  # the block ends at the first line back at the left margin
        code = line.split("#", 1)[0].replace("(", " ").replace(")", " ").strip()
        if code.startswith("from "):
            module, _, code = code[len("from "):].partition(" import")
            module = _absolute(module.strip(), package)
        for name in code.split(","):
            if name.strip():
                exports[name.split(" as ")[-1].strip()] = module
    return exports


def lazy_door(package: str, exports: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """The module-level `__getattr__` of the door `package`. Its names are those its source imports
    under `if TYPE_CHECKING:`, read on first use; `__all__` is served from the same listing.
    (`exports`, each public name -> the submodule relative to `package`, is the older form.)"""
    table: dict[str, str] = {} if exports is None else {k: f"{package}.{v}" for k, v in exports.items()}

    def names() -> dict[str, str]:
        if not table:
            table.update(door_exports(package))
        return table

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            return sorted(names())
        module = names().get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__ rather than importlib.import_module: the C import path, so `python -X
        # importtime` lists the module like any other import. Not cached on the package, so a
        # test that patches the defining module is seen by every later import through the door.
        __import__(module)
        return getattr(sys.modules[module], name)

    return __getattr__
