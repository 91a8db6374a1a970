"""Every JSON document attnsel writes names itself (`schema: "attnsel-<document>/<n>"`) and matches
its published JSON Schema in docs/schemas/ (bench/tools/json_schemas.py derives them from real
documents); documents written before the names (`schema_version: 1`) still match and still read.
`probe --json` carries the library versions a `vllm collect-env` reader looks for, without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from attnsel.bench.tools import json_schemas as J

ROOT = Path(__file__).resolve().parents[1]


def _schema(name: str) -> dict:
    return json.loads((J.SCHEMAS / J.file_name(name)).read_text(encoding="utf-8"))


def test_every_recorded_document_matches_its_published_schema():
    seen: dict[str, int] = {}
    for path, doc in J.recorded_documents():
        name = J.document_name(doc)
        assert name in J.PUBLISHED or name in J.INTERNAL, f"{path}: {name} has no schema in docs/schemas/"
        if name in J.PUBLISHED:
            faults = J.validate(doc, _schema(name))
            assert not faults, f"{path.relative_to(ROOT)}: {faults[:3]}"
            seen[name] = seen.get(name, 0) + 1
    assert {"attnsel-tune/1", "attnsel-verify/1", "attnsel-nvml-scenario/1"} <= set(seen)


def test_what_the_commands_print_today_names_its_schema_and_matches_it():
    names = set()
    for doc in J.command_documents():
        name = doc.get("schema")
        assert name in J.PUBLISHED, f"a document without a published schema name: {sorted(doc)[:6]}"
        assert not J.validate(doc, _schema(name)), (name, J.validate(doc, _schema(name))[:3])
        names.add(name)
    assert names == set(J.PUBLISHED) - {"attnsel-tune/1", "attnsel-verify/1", "attnsel-nvml-scenario/1"}


def test_the_published_schemas_are_current():
    built = J.build()
    stale = [n for n, s in built.items() if json.loads((J.SCHEMAS / J.file_name(n)).read_text()) != s]
    assert not stale, f"stale: python -m attnsel.bench.tools.json_schemas ({stale})"


def test_a_document_missing_a_field_everyone_had_is_refused():
    _path, doc = next((p, d) for p, d in J.recorded_documents() if J.document_name(d) == "attnsel-tune/1")
    schema = _schema("attnsel-tune/1")
    broken = {k: v for k, v in doc.items() if k != schema["required"][0]}
    assert J.validate(broken, schema) == [f"$: no {schema['required'][0]!r}"]
    assert J.validate({**doc, "rows": "none"}, schema)[0].startswith("$.rows: string where")


def test_an_explain_answer_from_before_the_schema_names_still_reports():
    from typer.testing import CliRunner

    from attnsel.cli.app import app

    old = [p for p, d in J.recorded_documents() if "schema" not in d and J.document_name(d) == "attnsel-explain/1"]
    assert old, "no schema_version explain answer recorded"
    result = CliRunner().invoke(app, ["report", str(ROOT / "tests/fixtures/verify/h100_llama8b"), str(old[0]),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["schema"] == "attnsel-report/1"


def _probe_json(pythonpath: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath + sys.path),
           "ATTNSEL_NVML_SCENARIO": str(ROOT / "tests/fixtures/probe/h200_x2_nvlink.json")}
    code = ("import sys, runpy; sys.argv = ['attnsel', 'probe', '--json']\n"
            "try:\n    runpy.run_module('attnsel', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'torch' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def test_probe_json_names_the_installed_libraries_without_importing_torch(tmp_path):
    """A CUDA build of torch, installed as pip lays it out: probe reads its version and CUDA from the
    files (torch/version.py), and the CUDA runtime wheel's version, as `vllm collect-env` shows them."""
    for dist, version in (("torch", "2.14.0"), ("nvidia_cuda_runtime", "13.0.96")):
        info = tmp_path / f"{dist}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.14.0'\n"
                                                   "cuda: Optional[str] = '13.0'\n")
    doc = _probe_json([str(tmp_path)])
    assert doc["schema"] == "attnsel-probe/1"
    libraries = doc["libraries"]
    assert (libraries["torch"], libraries["torch_cuda"], libraries["cuda_runtime"]) == ("2.14.0", "13.0", "13.0.96")
    assert {"vllm", "flashinfer-python", "triton", "python"} <= set(libraries)


def test_probe_json_says_null_for_a_library_not_installed():
    from importlib import metadata

    doc = _probe_json([])
    try:
        expected = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        expected = None
    assert doc["libraries"]["vllm"] == expected
