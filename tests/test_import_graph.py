"""attnsel's modules import each other without circles, and never up a layer (issue 35, item 5).

bench/tools/import_graph.py reads every module's source: imports inside functions count (they hide
a circle at run time, not from a reader), `if TYPE_CHECKING:` ones do not, and an import through a
door counts as an import of the module that defines the name. The layers are the import-linter
contracts in pyproject.toml, read without their exemptions.
"""

from pathlib import Path

import pytest

import attnsel
from attnsel.bench.tools.import_graph import analyse, build_graph, circles

ROOT = Path(attnsel.__file__).resolve().parent


@pytest.fixture(scope="module")
def graph() -> dict[str, object]:
    return analyse(ROOT)


def test_no_module_is_part_of_an_import_circle(graph):
    assert graph["circles"] == []


def test_no_import_runs_up_a_layer(graph):
    assert graph["upward"] == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


DOOR = '''from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:
    from attnsel.room.low import helper

__getattr__ = lazy_door(__name__)
'''


def test_a_circle_through_a_door_and_a_function_level_import_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "room/__init__.py": DOOR,
        "room/low.py": "def helper():\n    from attnsel.top import thing\n    return thing\n",
        "room/unrelated.py": "X = 1\n",
        "top.py": "from attnsel.room import helper\n\nthing = 1\n",
    })
    found = circles(build_graph(root))
    assert found == [["attnsel.room.low", "attnsel.top"]]  # through the door to low.py, not to the room


def test_type_checking_imports_and_relative_imports(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from attnsel.b import B\n",
        "b.py": "from . import a\n\nB = 1\n",
    })
    graph = build_graph(root)
    assert circles(graph) == []
    assert [(e.source, e.target) for e in graph.edges] == [("attnsel.b", "attnsel.a")]


def test_an_import_from_a_lower_layer_to_a_higher_one_is_reported(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/calc.py": "def f():\n    from attnsel.high.show import g\n    return g\n",
        "high/__init__.py": "",
        "high/show.py": "def g():\n    return 1\n",
        "pyproject.toml": (
            '[[tool.importlinter.contracts]]\nname = "layers"\ntype = "layers"\n'
            'layers = ["attnsel.high", "attnsel.low"]\n'
            'ignore_imports = ["attnsel.low.calc -> attnsel.high.show"]\n'  # exemptions are still reported
        ),
    })
    ups = analyse(root)["upward"]
    assert [(u["from"], u["to"], u["deferred"]) for u in ups] == [("attnsel.low.calc", "attnsel.high.show", True)]
