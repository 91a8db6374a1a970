"""What the wheel holds (pyproject.toml [tool.setuptools]): every runtime subpackage, no developer
scripts, no tests, and package data whose globs find files. .ci/wheel builds the wheel and runs it
from a clean environment; these checks catch the list drifting from the folders first."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the lowest-version job (3.10) skips this file

ROOT = Path(__file__).resolve().parents[1]
# Never in the wheel: the tests and the developer scripts (python -m attnsel.bench.tools.X).
NOT_SHIPPED = ("tests", "bench/tools")


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _folder(package: str) -> Path:
    return ROOT.joinpath(*package.split(".")[1:])


def _runtime_packages() -> set[str]:
    found = set()
    for init in ROOT.rglob("__init__.py"):
        folder = init.parent.relative_to(ROOT)
        text = folder.as_posix()
        if any(text == skip or text.startswith(skip + "/") for skip in NOT_SHIPPED) or text.startswith("."):
            continue
        found.add(".".join(("attnsel", *folder.parts)) if folder.parts else "attnsel")
    return found


def test_every_runtime_subpackage_is_in_the_wheel_and_no_developer_tool_is():
    listed = set(_setuptools()["packages"])
    missing = sorted(_runtime_packages() - listed)
    assert not missing, f"add to pyproject.toml [tool.setuptools] packages: {missing}"
    stale = sorted(p for p in listed if not (_folder(p) / "__init__.py").is_file())
    assert not stale, f"listed in pyproject.toml but no such package: {stale}"
    shipped_tools = sorted(p for p in listed if any(p == "attnsel." + s.replace("/", ".") or
                                                    p.startswith("attnsel." + s.replace("/", ".") + ".")
                                                    for s in NOT_SHIPPED))
    assert not shipped_tools, f"developer scripts or tests would ship in the wheel: {shipped_tools}"


def test_every_package_data_glob_finds_a_file():
    config = _setuptools()
    for package, globs in config["package-data"].items():
        assert package in config["packages"], f"package-data for an unlisted package {package}"
        for glob in globs:
            assert list(_folder(package).glob(glob)), f"package-data {package}: {glob!r} matches nothing"


def test_the_files_read_at_run_time_are_package_data():
    """The bundled model configs and the per-release data are read from the installed package."""
    from attnsel.attention.model.source import CATALOG_DIR
    from attnsel.attention.versions.registry import VERSIONS_DIR

    data = _setuptools()["package-data"]
    for folder, package in ((CATALOG_DIR, "attnsel.attention"), (VERSIONS_DIR, "attnsel.attention.versions")):
        shipped = {p for glob in data[package] for p in _folder(package).glob(glob)}
        needed = {p for p in folder.iterdir() if p.suffix == ".json"}
        assert needed and needed <= shipped, f"not package data: {sorted(str(p) for p in needed - shipped)}"


def test_the_license_is_an_spdx_expression_with_its_file_and_the_package_is_typed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    for name in project["license-files"]:
        assert "Apache License" in (ROOT / name).read_text(encoding="utf-8")
    assert (ROOT / "py.typed").is_file() and "py.typed" in _setuptools()["package-data"]["attnsel"]
