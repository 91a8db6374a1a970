"""A release's memory facts (attention/versions/*.json `memory`, read by attention/memory/plan.py), read
from the release's own wheel source and compared with the data.

    python -m attnsel.bench.tools.memory_facts 0.17.0 0.33.0 [--site-packages DIR] [--json]

For each release it reads, without installing anything (HTTP range requests into the PyPI wheel, or a
local site-packages given with --site-packages):
- the module that raises vLLM's KV-cache errors (v1/core/kv_cache_utils.py or kv_cache_planning.py),
  the exact text of "No available memory for the cache blocks" and of the max_model_len ValueError,
  as the templates the data holds ({max_model_len}, {needed_gib}, {available_gib}, {estimated_msg},
  {estimated});
- how estimate_max_model_len searches (the binary search's first line);
- CacheConfig.gpu_memory_utilization's default (config/cache.py); from 0.34.0 the field defaults to None
  and `resolved_gpu_memory_utilization` settles it: DEFAULT_GPU_MEMORY_UTILIZATION (0.92) with the
  cache sized by profiling, `gpu_memory_utilization_extensible` (1.0) with the extensible KV cache;
- the advice both errors end with from 0.34.0 (`{hint}`: kv_cache_planning.py
  _more_kv_cache_memory_hint), as `kv_cache_hints`: its returned texts in source order (extensible
  cache below 1.0, extensible cache at 1.0, sized by profiling) and the words it fills in;
- the scheduler defaults per usage context and GPU tier (engine/arg_utils.py get_batch_defaults);
- whether the CUDA-graph memory estimate is taken off the KV cache by default
  (envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; absent before 0.18).
It prints them, then each place where the release's data (the profile `vllm_0_X`) says otherwise.
Exit status 1 when some release differs. The fitted constants (non_torch_gib, activation_spread,
the size of the graph estimate) are not in the source: docs/memory.md says how they were fitted.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import sys
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

ERROR_MODULES = ("vllm/v1/core/kv_cache_planning.py", "vllm/v1/core/kv_cache_utils.py")
SOURCES = ("vllm/config/cache.py", "vllm/engine/arg_utils.py", "vllm/envs.py", *ERROR_MODULES)
# vLLM's expressions in the error f-strings -> the data's template fields
FIELDS = {"max_model_len": "max_model_len", "format_gib(needed_memory)": "needed_gib",
          "format_gib(available_memory)": "available_gib", "estimated_msg": "estimated_msg",
          "estimated_max_len": "estimated", "hint": "hint"}
TIER_NAMES = {160: "huge", 70: "large"}  # the data's names for get_batch_defaults' memory bounds (GiB)
CONTEXTS = {"LLM_CLASS": "llm", "OPENAI_API_SERVER": "serve"}
# tier conditions on the device other than its name, as the device-name substring the data excludes:
# 0.33's `not is_gb10` is capability (12, 1), the DGX Spark GB10 (probe/gpu_table.py), named "NVIDIA GB10"
CONDITION_NAMES = {"not is_gb10": "gb10"}


def wheel_sources(version: str) -> dict[str, str]:
    """SOURCES as found in vllm==version's x86_64 wheel on PyPI (absent ones left out)."""
    return wheel_sources_of(version, SOURCES)


def wheel_sources_of(version: str, paths: tuple[str, ...]) -> dict[str, str]:
    """These files of vllm==version's x86_64 wheel on PyPI (absent ones left out), read by range requests."""
    from attnsel.bench.tools.release_env import SIMPLE, _RemoteFile

    request = urllib.request.Request(f"{SIMPLE}/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    wheels = sorted((f for f in files if f["filename"].startswith(f"vllm-{version}-")
                     and f["filename"].endswith(".whl") and "x86_64" in f["filename"]), key=lambda f: f["filename"])
    if not wheels:
        raise SystemExit(f"no x86_64 wheel of vllm=={version} on PyPI")
    with zipfile.ZipFile(io.BufferedReader(_RemoteFile(wheels[0]["url"]), buffer_size=1 << 16)) as archive:
        names = set(archive.namelist())
        return {path: archive.read(path).decode("utf-8") for path in paths if path in names}


def local_sources(site_packages: Path) -> dict[str, str]:
    return {path: (site_packages / path).read_text(encoding="utf-8")
            for path in SOURCES if (site_packages / path).is_file()}


def _function(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _template(node: ast.expr, fields: dict[str, str] | None = None) -> str:
    """A string expression as the data's str.format template (`fields`: vLLM's expressions -> the names)."""
    fields = FIELDS if fields is None else fields
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                expr = ast.unparse(value.value)
                if expr not in fields:
                    raise ValueError(f"unknown field {expr!r} in vLLM's message: add it to FIELDS")
                parts.append("{" + fields[expr] + "}")
            else:
                parts.append(_template(value, fields))
        return "".join(parts)
    raise ValueError(f"not a string: {ast.unparse(node)}")


def error_facts(sources: dict[str, str]) -> dict[str, Any]:
    """The module with _check_enough_kv_cache_memory, its two messages and the estimate's search."""
    for module in ERROR_MODULES:
        tree = ast.parse(sources.get(module, ""))
        check = _function(tree, "_check_enough_kv_cache_memory")
        if check is None:
            continue
        raised = [n.exc.args[0] for n in ast.walk(check)
                  if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) and n.exc.args]
        estimated = next(n.value for n in ast.walk(check) if isinstance(n, ast.Assign)
                         and ast.unparse(n.targets[0]) == "estimated_msg" and not _is_empty(n.value))
        search = _function(tree, "estimate_max_model_len")
        bounds = next((ast.unparse(n) for n in ast.walk(search) if isinstance(n, ast.Assign)
                       and ast.unparse(n.targets[0]) == "(left, right)"), None) if search else None
        facts: dict[str, object] = {"error_module": module, "no_cache_memory": _template(raised[0]),
                 "max_model_len_error": _template(raised[1]), "estimated_msg": _template(estimated),
                 "estimate_search": bounds}
        hints = hint_facts(tree)
        if hints:
            facts["kv_cache_hints"] = hints
        return facts
    return {"error_module": None}


def hint_facts(tree: ast.AST) -> dict[str, Any] | None:
    """kv_cache_planning.py `_more_kv_cache_memory_hint` (0.34.0 on): the texts it returns, in source
    order, and the texts it assigns to the names they fill in ({used_by}, {graphs_hint})."""
    function = _function(tree, "_more_kv_cache_memory_hint")
    if function is None:
        return None
    words: dict[str, list[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, (ast.Constant, ast.JoinedStr)) and node.targets[0].id != "utilization":
            words.setdefault(node.targets[0].id, []).append(_template(node.value, {}))
    fields = {name: name for name in (*words, "utilization")}
    returns = sorted((n.lineno, _template(n.value, fields)) for n in ast.walk(function)
                     if isinstance(n, ast.Return) and n.value is not None)
    return {"returns": [text for _line, text in returns], "words": words}


def _is_empty(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == ""


def utilization_default(source: str) -> float | None:
    """CacheConfig.gpu_memory_utilization's default: `= Field(default=X, ...)` or `= X`; where that is
    None (0.34.0 on), DEFAULT_GPU_MEMORY_UTILIZATION, the default with the cache sized by profiling."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "gpu_memory_utilization" and node.value:
            value = node.value
            if isinstance(value, ast.Call):
                value = next(k.value for k in value.keywords if k.arg == "default")
            default = ast.literal_eval(value)
            return float(default) if default is not None else _class_constant(tree, "DEFAULT_GPU_MEMORY_UTILIZATION")
    return None


def extensible_utilization_default(source: str) -> float | None:
    """CacheConfig.resolved_gpu_memory_utilization (0.34.0 on): the constant it answers with the extensible
    KV cache on and no --gpu-memory-utilization; None where the release has no such property."""
    function = _function(ast.parse(source), "resolved_gpu_memory_utilization")
    if function is None:
        return None
    for node in ast.walk(function):
        if isinstance(node, ast.If) and "enable_extensible_kv_cache" in ast.unparse(node.test):
            constant = next((n.value for n in node.body if isinstance(n, ast.Return)
                             and isinstance(n.value, ast.Constant)), None)
            # the constant is a number in vLLM's source (mypy sees any constant: the ignore)
            return float(constant.value) if constant is not None else None  # type: ignore[arg-type]
    return None


def _class_constant(tree: ast.AST, name: str) -> float | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == name and node.value is not None:
            return float(ast.literal_eval(node.value))
    return None


def _usage_table(node: ast.Dict) -> dict[str, int]:
    return {CONTEXTS[ast.unparse(k).split(".")[-1]]: int(ast.literal_eval(v))
            for k, v in zip(node.keys, node.values) if k is not None and ast.unparse(k).split(".")[-1] in CONTEXTS}


def _branch_tables(body: list[ast.stmt]) -> dict[str, dict[str, int]]:
    tables = {}
    for stmt in body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict):
            key = ast.unparse(stmt.targets[0]).replace("default_", "")
            tables[key] = _usage_table(stmt.value)
    return tables


def _tier_test(test: ast.expr) -> tuple[int, list[str], list[str]]:
    """(GiB bound, device-name substrings excluded, other conditions as source) of one branch's test."""
    terms = test.values if isinstance(test, ast.BoolOp) else [test]
    bound, excludes, others = 0, [], []
    for term in terms:
        text = ast.unparse(term)
        if isinstance(term, ast.Compare) and "GiB_bytes" in text:
            bound = int(ast.literal_eval(term.comparators[0].left))  # type: ignore[attr-defined]
        elif isinstance(term, ast.Compare) and isinstance(term.ops[0], ast.NotIn):
            excludes.append(ast.literal_eval(term.left))
        elif text in CONDITION_NAMES:
            excludes.append(CONDITION_NAMES[text])
        else:
            others.append(text)
    return bound, excludes, others


def scheduler_facts(source: str) -> dict[str, Any]:
    """get_batch_defaults' GPU tiers as the data holds them (gpu_tiers, tier_excludes, scheduler_defaults)."""
    function = _function(ast.parse(source), "get_batch_defaults")
    if function is None:
        return {}
    chain = next(n for n in function.body if isinstance(n, ast.If) and "device_memory" in ast.unparse(n.test))
    tiers, excludes, others, defaults = [], {}, {}, {}
    node: Any = chain
    while isinstance(node, ast.If):
        bound, names, rest = _tier_test(node.test)
        name = TIER_NAMES.get(bound, f"tier_{bound}")
        tiers.append([name, bound])
        if names:
            excludes[name] = names
        if rest:
            others[name] = rest
        defaults[name] = _branch_tables(node.body)
        node = node.orelse[0] if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) else node.orelse
    defaults["other"] = _branch_tables(node)
    facts = {"gpu_tiers": tiers, "tier_excludes": excludes, "scheduler_defaults": defaults}
    if others:
        facts["_tier_conditions_not_modelled"] = others
    return facts


def cudagraph_estimate_default(source: str) -> bool | None:
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS's default; None: the release has no such estimate."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "os.getenv" and len(node.args) == 2 \
                and ast.literal_eval(node.args[0]) == "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS":
            return bool(int(ast.literal_eval(node.args[1])))
    return None


def memory_facts(sources: dict[str, str]) -> dict[str, Any]:
    facts = error_facts(sources)
    facts["gpu_memory_utilization"] = utilization_default(sources.get("vllm/config/cache.py", ""))
    extensible = extensible_utilization_default(sources.get("vllm/config/cache.py", ""))
    if extensible is not None:
        facts["gpu_memory_utilization_extensible"] = extensible
    facts.update(scheduler_facts(sources.get("vllm/engine/arg_utils.py", "")))
    facts["cudagraph_estimate_applied"] = cudagraph_estimate_default(sources.get("vllm/envs.py", ""))
    return facts


def differences(facts: dict[str, Any], rules: dict | None) -> list[str]:
    """Where the release's data says otherwise than its source."""
    if not rules:
        return ["the profile has no `memory` section"]
    found = [f"{key}: data {rules.get(key)!r}, wheel {facts[key]!r}" for key in (
        "error_module", "no_cache_memory", "max_model_len_error", "estimated_msg", "gpu_memory_utilization",
        "gpu_memory_utilization_extensible", "kv_cache_hints", "gpu_tiers", "tier_excludes", "scheduler_defaults")
        if key in facts and rules.get(key) != _data_form(key, facts[key])]
    graphs_off = list(rules.get("cudagraph_gib", [0, 0])) == [0, 0]
    if facts.get("cudagraph_estimate_applied") is not None and graphs_off == bool(facts["cudagraph_estimate_applied"]):
        found.append(f"cudagraph_gib: data {rules.get('cudagraph_gib')}, wheel applies the estimate by default: "
                     f"{facts['cudagraph_estimate_applied']}")
    if facts.get("cudagraph_estimate_applied") is None and not graphs_off:
        found.append(f"cudagraph_gib: data {rules.get('cudagraph_gib')}, wheel has no CUDA-graph estimate")
    return found


def _data_form(key: str, value: Any) -> Any:
    return "vllm/" + value.removeprefix("vllm/") if key == "error_module" and value else value


def _profile_rules(version: str) -> dict | None:
    from attnsel.attention.versions import get_profile

    return get_profile(version).memory


def check(version: str, facts: dict[str, Any], as_json: bool) -> bool:
    found = differences(facts, _profile_rules(version))
    print(json.dumps({"release": version, **facts}, indent=1) if as_json else
          f"{version}: util {facts['gpu_memory_utilization']}, {facts['error_module']}, "
          f"graph estimate {facts['cudagraph_estimate_applied']}, tiers {facts.get('gpu_tiers')} "
          f"excluding {facts.get('tier_excludes')}, search {facts.get('estimate_search')}")
    for name, conditions in facts.get("_tier_conditions_not_modelled", {}).items():
        print(f"  NOT MODELLED tier {name} also needs: {', '.join(conditions)}")
    for line in found:
        print(f"  DIFFERS {line}")
    return not found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", help="first release, e.g. 0.17.0")
    parser.add_argument("last", nargs="?", help="last release (every minor X.Y.0 between); default: first only")
    parser.add_argument("--site-packages", type=Path, help="read an installed vLLM here instead of the wheel (one release)")
    parser.add_argument("--json", action="store_true", help="print every fact, texts included")
    parser.add_argument("--record", type=Path, help="also write the facts per release to this JSON file "
                        "(tests/fixtures/memory/wheel_facts.json, replayed by tests/test_memory_releases.py)")
    ns = parser.parse_args(argv)
    major, first = (int(p) for p in ns.first.split(".")[:2])
    last = int(ns.last.split(".")[1]) if ns.last else first
    versions = [f"{major}.{minor}.0" for minor in range(first, last + 1)] if ns.last else [ns.first]
    read = (lambda _v: local_sources(ns.site_packages)) if ns.site_packages else wheel_sources
    facts = {v: memory_facts(read(v)) for v in versions}
    results = [check(v, facts[v], ns.json) for v in versions]
    if ns.record:
        ns.record.write_text(json.dumps(facts, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
