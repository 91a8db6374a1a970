"""Doors: a package's public names, each loaded on first use (PEP 562).

Every room (a subpackage such as `attnsel.bench.tune`) names what the rest of attnsel may import
from it in its `__init__`: `__all__`, and the same names imported under `TYPE_CHECKING` so that
readers and type checkers see where each one is defined. At run time a name is imported from its
module only when first asked for, so `from attnsel.attention.model import check_size` costs one
module, not the room: `attnsel probe` must start in well under a second and never import torch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_door(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level `__getattr__` of `package`: `exports` maps each public name to the
    submodule (relative to `package`) that defines it."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__ rather than importlib.import_module: the C import path, so `python -X
        # importtime` lists the module like any other import. Not cached on the package, so a
        # test that patches the defining module is seen by every later import through the door.
        full = f"{package}.{module}"
        __import__(full)
        return getattr(sys.modules[full], name)

    return __getattr__
