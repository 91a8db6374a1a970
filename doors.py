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

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ast


def _is_type_checking(test: ast.expr) -> bool:
    import ast

    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def door_exports_from_tree(tree: ast.Module, package: str) -> dict[str, str]:
    """A door's public names -> the full name of the module defining each, read from the door's
    parsed source: the `from X import A, B` statements under `if TYPE_CHECKING:` (relative ones
    resolved against `package`), or a mapping literal handed to `lazy_door` (the older doors'
    form, still read). Empty for a package that is no door."""
    import ast

    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    base = stmt.module or ""
                    if stmt.level:
                        parts = package.split(".")[: len(package.split(".")) - (stmt.level - 1)]
                        base = ".".join([*parts, *([base] if base else [])])
                    for alias in stmt.names:
                        exports[alias.asname or alias.name] = base
        value = node.value if isinstance(node, ast.Assign) else None
        if isinstance(value, ast.Call) and len(value.args) > 1 and isinstance(value.args[1], ast.Dict):
            old: dict[str, str] = {}
            for key, val in zip(value.args[1].keys, value.args[1].values):
                if isinstance(key, ast.Constant) and isinstance(val, ast.Constant):
                    old[str(key.value)] = f"{package}.{val.value}"
            return old
    return exports


def door_exports(package: str) -> dict[str, str]:
    """`door_exports_from_tree` of the door `package`, already imported, read from its file."""
    import ast

    path = sys.modules[package].__file__
    if path is None:
        raise ImportError(f"door {package!r} has no source file to read its names from")
    with open(path, encoding="utf-8") as fh:
        return door_exports_from_tree(ast.parse(fh.read(), path), package)


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
