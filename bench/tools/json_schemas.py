"""Developer script: the JSON Schemas of attnsel's JSON documents, in docs/schemas/, derived from real
documents: what today's commands print (`probe --json` over every recorded NVML scenario, `explain
--json` over every bundled model, `preflight --json`, `tune --dry-run --json`, `report --format json` of
every recorded run) and the recorded GPU runs (tests/fixtures: tune.json, verify.json, NVML scenarios).

    python -m attnsel.bench.tools.json_schemas            # (re)write docs/schemas/*.schema.json
    python -m attnsel.bench.tools.json_schemas --check    # exit 1 if docs/schemas/ is stale

A schema says what every document of that kind held: the type of each field (null where it was ever
null), the fields every one of them had (`required`), and nothing about fields it never saw (a newer
attnsel may add fields). An object whose keys are names (backends, GPUs, libraries, NVML calls) is a
map: `additionalProperties` describes its values. `validate` checks the subset of JSON Schema these
files use (type, const, properties, required, additionalProperties, items, anyOf), so the tests need no
jsonschema package (tests/test_json_schemas.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SCHEMAS = ROOT / "docs" / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Written before the `schema` names (reports/explain/table.py): `schema_version: 1` still reads. A
# `probe --json` document of then has neither (its schema does not require `schema`).
LEGACY = {"attnsel-explain/1", "attnsel-explain-matrix/1", "attnsel-explain-history/1",
          "attnsel-preflight/1", "attnsel-report/1"}
# The documents attnsel writes for users; other `schema` names in tests/fixtures are internal records.
PUBLISHED = ("attnsel-probe/1", "attnsel-explain/1", "attnsel-explain-matrix/1", "attnsel-explain-history/1",
             "attnsel-preflight/1", "attnsel-tune-plan/1", "attnsel-tune/1", "attnsel-verify/1",
             "attnsel-report/1", "attnsel-nvml-scenario/1")
INTERNAL = ("attnsel-memory-record/1", "attnsel-release-kit/1")  # developer records (bench/tools)
# Fields whose type follows the machine, not attnsel: each library's version or null.
FIXED = {("attnsel-probe/1", "libraries"): {"type": "object", "additionalProperties": {"type": ["null", "string"]}}}
FIELD = re.compile(r"^_?[a-z][a-z0-9_]*$")  # a field name (`_source`: a fixture's note); else a map key


def file_name(schema: str) -> str:
    return schema.replace("/", "-") + ".schema.json"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def infer(values: list, name: str = "", path: tuple = ()) -> dict:
    """The schema every value of `values` meets (values: the same field across documents)."""
    fixed = FIXED.get((name, ".".join(path)))
    if fixed is not None:
        return fixed
    types = {_json_type(v) for v in values}
    if {"integer", "number"} <= types:
        types.discard("integer")
    out: dict[str, Any] = {"type": sorted(types)[0] if len(types) == 1 else sorted(types)} if types else {}
    objects = [v for v in values if isinstance(v, dict)]
    if objects:
        keys = sorted({k for o in objects for k in o})
        if not path or all(FIELD.match(k) for k in keys):  # a document itself is never a map
            out["properties"] = {k: infer([o[k] for o in objects if k in o], name, (*path, k)) for k in keys}
            required = [k for k in keys if all(k in o for o in objects)]
            if required:
                out["required"] = required
        else:
            out["additionalProperties"] = infer([v for o in objects for v in o.values()], name, (*path, "*"))
    arrays = [v for v in values if isinstance(v, list)]
    items = [item for a in arrays for item in a]
    if items:
        out["items"] = infer(items, name, (*path, "[]"))
    return out


def schema_for(name: str, documents: list[dict]) -> dict:
    body = infer(documents, name)
    props = body["properties"]
    props["schema"] = {"const": name}
    required = [k for k in body.get("required", []) if k != "schema_version"]
    if name in LEGACY:
        props["schema_version"] = {"const": 1}
        body["anyOf"] = [{"required": ["schema"]}, {"required": ["schema_version"]}]
        required = [k for k in required if k != "schema"]
    body["required"] = required
    return {"$schema": DIALECT, "title": name,
            "description": f"attnsel's {name} JSON document (derived from real documents by "
                           "bench/tools/json_schemas.py)", **body}


def document_name(doc: Any) -> str | None:
    """A document's schema name; the older explain/preflight/report files by their fields."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("schema"), str):
        return doc["schema"]
    if "schema_version" not in doc and {"source", "gpus", "nvlink", "errors"} <= set(doc):
        return "attnsel-probe/1"  # probe --json before it named itself (tests/fixtures/probe/device_*)
    if doc.get("schema_version") != 1:
        return None
    if "checks" in doc and "gpu_source" in doc:
        return "attnsel-preflight/1"
    if "sources" in doc:
        return "attnsel-report/1"
    if "releases" in doc and "changes" in doc:
        return "attnsel-explain-history/1"
    if isinstance(doc.get("rows"), list):
        return "attnsel-explain-matrix/1"
    return "attnsel-explain/1" if "backends" in doc else None


def recorded_documents() -> Iterable[tuple[Path, dict]]:
    """Every JSON document in tests/fixtures that names (or is recognized as) an attnsel document."""
    for path in sorted(FIXTURES.rglob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        if document_name(doc) is not None:
            yield path, doc


def _commands() -> list[tuple[list[str], str | None]]:
    models = sorted(p.stem for p in (ROOT / "attention" / "models").glob("*.json"))
    grid: list[tuple[list[str], str | None]] = []
    for m in models:
        grid += [(["explain", "--model", m, "--gpu", "H100", "--json"], None),
                 (["preflight", "--model", m, "--gpu", "H100", "--json"], None)]
    for m in ("llama-3.1-8b", "deepseek-v3"):
        grid += [(["explain", "--model", m, "--gpu", "all", "--json"], None),
                 (["explain", "--model", m, "--gpu", "H100", "--vllm-version", "all", "--json"], None),
                 (["tune", "--dry-run", "--model", m, "--gpu", "H100", "--json"], None)]
    grid += [(["explain", "--head-size", "128", "--dtype", "bf16", "--gpu", "T4", "--kv-cache-dtype", "fp8",
               "--json"], None), (["probe", "--json"], None)]
    for scenario in sorted((FIXTURES / "probe").glob("*.json")):
        grid += [(["probe", "--json"], str(scenario)),
                 (["preflight", "--model", "llama-3.1-8b", "--json"], str(scenario))]
    return grid


def command_documents() -> Iterable[dict]:
    """What today's commands print or write as JSON (in this process, as bench/tools/cli_replay.py)."""
    from typer.testing import CliRunner

    from attnsel.bench.tools.cli_replay import _run
    from attnsel.cli.app import app

    runner = CliRunner()
    for args, scenario in _commands():
        answer = _run(runner, app, args, {"ATTNSEL_NVML_SCENARIO": scenario} if scenario else None)
        if answer["out"].strip().startswith("{"):
            yield json.loads(answer["out"])
    runs = sorted(p.parent for p in list(FIXTURES.glob("tune/*/tune.json")) + list(FIXTURES.glob("verify/*/verify.json")))
    with tempfile.TemporaryDirectory() as tmp:
        for i, run in enumerate(runs):
            out = Path(tmp) / f"{i}.json"
            _run(runner, app, ["report", str(run), "--format", "json", "-o", str(out)])
            if out.exists():
                yield json.loads(out.read_text(encoding="utf-8"))


def build() -> dict[str, dict]:
    os.environ.update(NO_COLOR="1", COLUMNS="160")
    found: dict[str, list] = {name: [] for name in PUBLISHED}
    for doc in [d for _, d in recorded_documents()] + list(command_documents()):
        name = document_name(doc)
        if name in found:
            found[name].append(doc)
    missing = [name for name, docs in found.items() if not docs]
    if missing:
        raise SystemExit(f"json_schemas: no document of {missing}")
    return {name: schema_for(name, docs) for name, docs in found.items()}


def validate(doc: Any, schema: dict, where: str = "$") -> list[str]:
    """What in `doc` breaks `schema` (the subset above), one line per fault; [] if it matches."""
    faults: list[str] = []
    if "const" in schema and doc != schema["const"]:
        faults.append(f"{where}: {doc!r} is not {schema['const']!r}")
    types = schema.get("type")
    if types is not None:
        allowed = {types} if isinstance(types, str) else set(types)
        kind = _json_type(doc)
        if not (kind in allowed or (kind == "integer" and "number" in allowed)
                or (kind == "number" and "integer" in allowed and float(doc).is_integer())):
            return [*faults, f"{where}: {kind} where {sorted(allowed)} is expected"]
    for option_set in ([schema["anyOf"]] if "anyOf" in schema else []):
        if all(validate(doc, option, where) for option in option_set):
            faults.append(f"{where}: matches none of anyOf {option_set}")
    if isinstance(doc, dict):
        faults += [f"{where}: no {key!r}" for key in schema.get("required", []) if key not in doc]
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in doc.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                faults += validate(value, sub, f"{where}.{key}")
    if isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(doc):
            faults += validate(item, schema["items"], f"{where}[{i}]")
    return faults


def _text(schema: dict) -> str:
    return json.dumps(schema, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/schemas/ differs from what is derived now")
    args = parser.parse_args(argv)
    schemas = build()
    stale = [name for name, schema in schemas.items()
             if not (SCHEMAS / file_name(name)).is_file() or (SCHEMAS / file_name(name)).read_text() != _text(schema)]
    if args.check:
        print(f"json_schemas: {len(schemas)} schemas, {len(stale)} stale {stale}")
        return 1 if stale else 0
    SCHEMAS.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        (SCHEMAS / file_name(name)).write_text(_text(schema))
    print(f"json_schemas: wrote {len(schemas)} schemas to {SCHEMAS.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
