"""Developer check for refactors that must not change behaviour: record what ~700 CLI commands print
(exit code, stdout, stderr; `report`'s files by content hash) and compare two recordings.

    python -m attnsel.bench.tools.cli_replay record before.json      # on the commit before
    python -m attnsel.bench.tools.cli_replay record after.json       # on the change
    python -m attnsel.bench.tools.cli_replay compare before.json after.json

The grid: explain, tune --dry-run and preflight over every bundled model on five GPUs, every release
on four GPUs and several dtype spellings, probe / preflight / explain over every recorded NVML
scenario, `report` of every tune and verify fixture in each format, and every --help. Commands run in
this process (typer's runner, NO_COLOR, 160 columns), so a recording takes about a minute; a plain local
`probe` runs as the `attnsel` command runs it, through its quick start without Typer (cli/entry.py). The checkout's
own path is replaced by ROOT, so recordings made in two worktrees compare. "The house" (issue 23)
replayed 1,069 commands byte-identical across its moves with the harness this tool grew from.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
GPUS = ("H100", "A100", "L4", "B200", "T4")
DTYPES = ("bf16", "fp16", "f16", "half", "torch.float16", "float", "fp32", "auto", "bogus", "BF16", "bfloat16")


def _model_commands(models: list[str]) -> list[list[str]]:
    out = []
    for m in models:
        out += [["explain", "--model", m, "--gpu", gpu] for gpu in GPUS]
        out += [["explain", "--model", m, "--gpu", "H100", "--json"],
                ["explain", "--model", m, "--gpu", "H100", "--vllm-version", "all"],
                ["explain", "--model", m, "--gpu", "all"],
                ["tune", "--dry-run", "--model", m, "--gpu", "H100"],
                ["tune", "--dry-run", "--model", m, "--gpu", "H100", "--json"],
                ["preflight", "--model", m, "--gpu", "H100"],
                ["preflight", "--model", m, "--gpu", "A100", "--json", "-tp", "2"]]
    return out


def _release_commands(releases: list[str]) -> list[list[str]]:
    out = []
    for v in releases:
        for gpu in ("H100", "B200", "A100", "T4"):
            out += [["explain", "--head-size", "128", "--dtype", "bf16", "--gpu", gpu, "--vllm-version", v],
                    ["explain", "--head-size", "256", "--dtype", "bf16", "--gpu", gpu, "--vllm-version", v,
                     "--kv-cache-dtype", "fp8", "--json"],
                    ["explain", "--head-size", "576", "--dtype", "bf16", "--gpu", gpu, "--vllm-version", v,
                     "--use-mla", "--json"],
                    ["tune", "--dry-run", "--head-size", "128", "--dtype", "bf16", "--gpu", gpu, "--vllm-version", v]]
    for dt in DTYPES:
        out += [["explain", "--head-size", "128", "--dtype", dt, "--gpu", "H100"],
                ["tune", "--dry-run", "--head-size", "128", "--dtype", dt, "--gpu", "H100"],
                ["preflight", "--model", "llama-3.1-8b", "--dtype", dt, "--gpu", "H100"]]
    return out


def commands() -> list[tuple[list[str], str | None]]:
    """(arguments, NVML scenario or None) for every command of the grid."""
    from attnsel.attention.versions import release_profiles, resolved_data

    models = sorted(p.stem for p in (ROOT / "attention" / "models").glob("*.json"))
    releases = [resolved_data(name)["vllm_version"] for name in release_profiles()]
    grid: list[tuple[list[str], str | None]] = [(c, None) for c in _model_commands(models) + _release_commands(releases)]
    grid += [([*c, "--help"], None) for c in ([], ["probe"], ["explain"], ["tune"], ["verify"], ["report"], ["preflight"])]
    for scenario in sorted((FIXTURES / "probe").glob("*.json")):
        for c in (["probe"], ["probe", "--json"], ["preflight", "--model", "llama-3.1-8b"], ["explain", "--model", "qwen3-8b"]):
            grid.append((c, str(scenario)))
    return grid


def _run(runner, app, args: list[str], env: dict | None = None) -> dict:
    from attnsel.cli.entry import quick_probe_options

    if quick_probe_options(args, os.environ) is not None:
        return _run_quick(args, env or {})
    result = runner.invoke(app, args, env=env)
    return {"rc": result.exit_code, "out": result.stdout, "err": result.stderr,
            "exc": None if result.exception is None or isinstance(result.exception, SystemExit) else repr(result.exception)}


def _run_quick(args: list[str], env: dict) -> dict:
    """A plain local `probe` as the `attnsel` command runs it: through the quick start (cli/entry.py),
    not Typer, so a recording compares what users get with what the Typer command printed before."""
    import contextlib
    import io

    from attnsel.cli.entry import quick_probe_options, run_quick_probe

    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    try:
        options = quick_probe_options(args, os.environ)
        assert options is not None  # _run checked: the scenario variable is no shell-completion request
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_quick_probe(options)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return {"rc": code, "out": out.getvalue(), "err": err.getvalue(), "exc": None}


def record(path: Path) -> int:
    os.environ.update(NO_COLOR="1", COLUMNS="160")
    from typer.testing import CliRunner

    from attnsel.cli.app import app

    runner = CliRunner()
    root = str(ROOT)
    answers = {}
    for args, scenario in commands():
        key = json.dumps(([Path(scenario).name] if scenario else []) + args)
        answers[key] = _run(runner, app, args, {"ATTNSEL_NVML_SCENARIO": scenario} if scenario else None)
    runs = sorted(p.parent for p in list(FIXTURES.glob("tune/*/tune.json")) + list(FIXTURES.glob("verify/*/verify.json")))
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            for fmt in ("md", "csv", "json", "html"):
                out = Path(tmp) / f"{run.name}.{fmt}"
                answer = _run(runner, app, ["report", str(run), "--format", fmt, "-o", str(out)])
                answer["file"] = hashlib.sha256(out.read_bytes().replace(root.encode(), b"ROOT")).hexdigest() \
                    if out.exists() else None
                answer["err"] = answer["err"].replace(tmp, "TMP")
                answers[json.dumps(["report", run.parent.name, run.name, fmt])] = answer
    text = json.dumps(answers, indent=1, sort_keys=True).replace(root, "ROOT")
    path.write_text(text + "\n")
    print(f"cli_replay: {len(answers)} commands recorded in {path}")
    return 0


def compare(before: Path, after: Path, *, limit: int = 40) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differ = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            differ.append(key)
    for key in differ[:limit]:
        print(f"differs: {key}")
        old, new = a.get(key) or {}, b.get(key) or {}
        for field in ("rc", "out", "err", "exc", "file"):
            if old.get(field) != new.get(field):
                lines = difflib.unified_diff(str(old.get(field)).splitlines(), str(new.get(field)).splitlines(),
                                             lineterm="", n=0)
                print("  " + field + ": " + "\n    ".join(list(lines)[2:8]))
    print(f"cli_replay: {len(a)} vs {len(b)} commands, {len(differ)} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("record").add_argument("out", type=Path)
    both = sub.add_parser("compare")
    both.add_argument("before", type=Path)
    both.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    return record(args.out) if args.verb == "record" else compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
