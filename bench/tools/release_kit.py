"""The release kit: one command turns a vLLM release on PyPI into its release data and a report.

    python -m attnsel.bench.tools.release_kit 0.34.0 --base-env /work/venvs/torch214 --out /tmp/kit034 \\
        [--cases 2000] [--seed 33] [--override flashinfer-python==0.7.4 ...] [--reuse] [--skip adapters ...]

It runs, each as a step of its own (its command line, exit status, log and seconds; a failing step is
reported and the next one runs):

  env       bench/tools/release_env.py build X --base DIR [--override PKG==VER]   (skipped with --reuse)
  derive    derive_profile --base <previous> --name vllm_0_Y --out derive.json     (the data patch)
  parity    parity_live --vllm-version X --cases N --seed S --out parity.json --record parity_record.json
  cudagraph cudagraph_facts --profile vllm_0_Y                                      (stdout: cudagraph.txt)
  hybrid    hybrid_live --vllm-version X --record hybrid.json
  memory    memory_facts X --site-packages <the layer's> --json --record memory.json
  serve     serve_flags X --site-packages <the layer's> --json   (the `vllm serve` flags against the data)
  adapters  vllm_cpu_check --save vllm_cpu.json
  engine    engine_cpu_check --record engine.json

Every step but `env`, `memory` and `serve` runs with the release layer's Python through `release_env run X --`,
which puts this checkout on its path as `attnsel`. Into --out go each step's log (`<step>.log`), its
outputs, `vllm_0_Y.json` (derive's patch on the previous release: a proposal to review, never written
into attention/versions), `summary.json` (the steps and what each found, machine-readable) and
`report.md` ("what changed since the previous release", release_kit_report.py). The profile the steps
check is the one that answers for X today: where attention/versions has no file for X yet, that is
the previous release's, so the parity and memory steps show what X changed. Exit 0 when every step
exited 0, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

STEP_NAMES = ("env", "derive", "parity", "cudagraph", "hybrid", "memory", "serve", "adapters", "engine")
TOOLS = "attnsel.bench.tools"


class KitError(Exception):
    """Bad input found after parsing (exit 2, one line)."""


@dataclass(frozen=True)
class KitRequest:
    """What the kit is asked for (the command line, parsed)."""

    version: str  # X.Y.Z
    out: Path
    base_env: Path | None = None
    cases: int = 2000
    seed: int = 33
    overrides: tuple[str, ...] = ()
    reuse: bool = False
    skip: tuple[str, ...] = ()
    step_timeout_s: float | None = None
    report_only: bool = False

    @property
    def minor(self) -> str:
        """'0.34' of '0.34.0'."""
        return ".".join(self.version.split(".")[:2])

    @property
    def profile_name(self) -> str:
        """The name the release's data file takes: vllm_0_34."""
        return "vllm_" + self.minor.replace(".", "_")


@dataclass(frozen=True)
class Step:
    """One step: its name, its command line, the files it writes into --out (by role), and whether
    its stdout is itself an output (kept as `<name>.txt` besides the log)."""

    name: str
    argv: tuple[str, ...]
    outputs: dict[str, str] = field(default_factory=dict)
    stdout_is_output: bool = False


@dataclass
class StepResult:
    """What one step did: exit status (None: not run; 124: timed out), seconds, its log and outputs."""

    name: str
    argv: list[str]
    exit: int | None
    seconds: float
    log: str
    outputs: dict[str, str]
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.exit == 0


def previous_profile(version: str) -> str:
    """The newest release in attention/versions older than `version` (its data is the patch's base)."""
    from attnsel.attention.versions import (
        get_profile,
        parse_vllm_version,
        release_profiles,
    )

    parsed = parse_vllm_version(version)
    if parsed is None:
        raise KitError(f"not a vLLM version: {version!r}")
    wanted = parsed[:2]
    older = [(tuple(get_profile(n).data["vllm_release"][:2]), n) for n in release_profiles()]
    older = [(release, name) for release, name in older if release < wanted]
    if not older:
        raise KitError(f"attention/versions has no release older than {version}")
    return max(older)[1]


def layer_python(version: str) -> Path:
    from attnsel.bench.tools.release_env import layer_dir

    return layer_dir(version) / "bin" / "python"


def layer_site_packages(version: str) -> Path:
    from attnsel.bench.tools.release_env import _site_packages, layer_dir

    return _site_packages(layer_dir(version))


def _in_layer(version: str, module: str, *args: str) -> tuple[str, ...]:
    """A tool run with the release layer's Python (bench/tools/release_env.py `run`)."""
    return (sys.executable, "-m", f"{TOOLS}.release_env", "run", version, "--", "-m", f"{TOOLS}.{module}", *args)


def plan_steps(req: KitRequest, previous: str, site_packages: Callable[[str], Path] = layer_site_packages) -> list[Step]:
    """The steps for `req`, in order, less --skip (and `env` with --reuse)."""
    out, v = req.out, req.version
    build = ["--base", str(req.base_env)] + [a for o in req.overrides for a in ("--override", o)]
    steps = [
        Step("env", (sys.executable, "-m", f"{TOOLS}.release_env", "build", v, *build)),
        Step("derive", _in_layer(v, "derive_profile", "--base", previous, "--name", req.profile_name,
                                 "--out", str(out / "derive.json")), {"derive": "derive.json"}),
        Step("parity", _in_layer(v, "parity_live", "--vllm-version", v, "--cases", str(req.cases), "--seed",
                                 str(req.seed), "--out", str(out / "parity.json"), "--record",
                                 str(out / "parity_record.json"), "--max-print", "0"),
             {"parity": "parity.json", "record": "parity_record.json"}),
        Step("cudagraph", _in_layer(v, "cudagraph_facts", "--profile", v), {"cudagraph": "cudagraph.txt"}, True),
        Step("hybrid", _in_layer(v, "hybrid_live", "--vllm-version", v, "--record", str(out / "hybrid.json")),
             {"hybrid": "hybrid.json"}),
        Step("memory", (sys.executable, "-m", f"{TOOLS}.memory_facts", v, "--site-packages", str(site_packages(v)),
                        "--json", "--record", str(out / "memory.json")), {"memory": "memory.json"}),
        Step("serve", (sys.executable, "-m", f"{TOOLS}.serve_flags", v, "--site-packages", str(site_packages(v)),
                       "--json"), {"serve": "serve.txt"}, True),
        Step("adapters", _in_layer(v, "vllm_cpu_check", "--save", str(out / "vllm_cpu.json")),
             {"adapters": "vllm_cpu.json"}),
        Step("engine", _in_layer(v, "engine_cpu_check", "--record", str(out / "engine.json")),
             {"engine": "engine.json"}),
    ]
    skipped = set(req.skip) | ({"env"} if req.reuse else set())
    return [s for s in steps if s.name not in skipped]


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def run_step(step: Step, out: Path, timeout_s: float | None, runner: Runner = subprocess.run) -> StepResult:
    """Run one step with its stdout and stderr in `<name>.log` (stdout also in its output file where
    it is one); a step that cannot start or runs out of time is a failed step, never the kit's end."""
    log = out / f"{step.name}.log"
    started = time.perf_counter()
    note = ""
    try:
        done = runner(list(step.argv), capture_output=True, text=True, timeout=timeout_s, check=False)
        code, stdout, stderr = done.returncode, done.stdout or "", done.stderr or ""
    except subprocess.TimeoutExpired as exc:
        code, note = 124, f"ran past {timeout_s} s"
        stdout, stderr = _text(exc.stdout), _text(exc.stderr)
    except OSError as exc:
        code, note, stdout, stderr = 127, f"could not start: {exc}", "", ""
    seconds = round(time.perf_counter() - started, 1)
    log.write_text(f"$ {' '.join(step.argv)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- exit {code} after "
                   f"{seconds} s\n", encoding="utf-8")
    if step.stdout_is_output:
        (out / next(iter(step.outputs.values()))).write_text(stdout, encoding="utf-8")
    present = {role: name for role, name in step.outputs.items() if (out / name).is_file()}
    return StepResult(step.name, list(step.argv), code, seconds, log.name, present, note)


def _text(data: object) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data if isinstance(data, str) else ""


def run_kit(req: KitRequest, runner: Runner = subprocess.run,
            site_packages: Callable[[str], Path] = layer_site_packages) -> dict:
    """Every step, then the data patch, summary.json and report.md in --out; the summary."""
    from attnsel.bench.tools import release_kit_report as REPORT

    req.out.mkdir(parents=True, exist_ok=True)
    previous = previous_profile(req.version)
    results: list[StepResult] = []
    for step in plan_steps(req, previous, site_packages):
        print(f"[{step.name}] {' '.join(step.argv)}", file=sys.stderr, flush=True)
        result = run_step(step, req.out, req.step_timeout_s, runner)
        results.append(result)
        print(f"[{step.name}] exit {result.exit} in {result.seconds} s {result.note}".rstrip(), file=sys.stderr, flush=True)
        if step.name == "env" and not result.ok:
            print("[env] the release's environment could not be built: the other steps run anyway and "
                  "fail where they need it", file=sys.stderr)
    summary = REPORT.summarize(req.version, req.profile_name, previous, [asdict(r) for r in results], req.out,
                               options={"cases": req.cases, "seed": req.seed, "overrides": list(req.overrides),
                                        "reuse": req.reuse, "skipped": list(req.skip)})
    patch = summary["facts"].get("derive", {}).get("patch")
    if patch:
        (req.out / f"{req.profile_name}.json").write_text(json.dumps(patch, indent=1, ensure_ascii=False) + "\n",
                                                          encoding="utf-8")
    (req.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    (req.out / "report.md").write_text(REPORT.render_markdown(summary), encoding="utf-8")
    return summary


def report_again(out: Path) -> dict:
    """--report-only: the digests and report.md again from what an earlier run left in `out`."""
    from attnsel.bench.tools import release_kit_report as REPORT

    earlier = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    steps = [{**s, "outputs": {r: n for r, n in s["outputs"].items() if (out / n).is_file()}} for s in earlier["steps"]]
    summary = REPORT.summarize(earlier["vllm_version"], earlier["profile_name"], earlier["previous"], steps, out,
                               options=earlier.get("options"))
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "report.md").write_text(REPORT.render_markdown(summary), encoding="utf-8")
    return summary


def parse_args(argv: Sequence[str] | None) -> KitRequest:
    parser = argparse.ArgumentParser(prog="release_kit", description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the vLLM release on PyPI, X.Y.Z")
    parser.add_argument("--base-env", type=Path, help="the virtualenv the release's layer sits on (release_env build --base)")
    parser.add_argument("--reuse", action="store_true", help="use the release's layer as it is (no build step)")
    parser.add_argument("--override", action="append", default=[], metavar="PKG==VER",
                        help="a requirement of the release to replace while building, e.g. flashinfer-python==0.7.4 "
                             "(release_env build --override: a pin PyPI cannot satisfy)")
    parser.add_argument("--cases", type=int, default=2000, help="parity grid size (default 2000)")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--out", type=Path, default=None, help="folder for logs, outputs and the report "
                                                                "(default ./release-kit-X.Y.Z)")
    parser.add_argument("--skip", action="append", default=[], choices=STEP_NAMES, help="leave a step out")
    parser.add_argument("--step-timeout", type=float, default=None, help="seconds one step may take")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: digest what an earlier run left in --out and write report.md again")
    ns = parser.parse_args(argv)
    if not re.fullmatch(r"\d+\.\d+\.\d+", ns.version):
        parser.error(f"the release must be X.Y.Z (e.g. 0.34.0), got {ns.version!r}")
    if not ns.reuse and not ns.report_only and "env" not in ns.skip and ns.base_env is None:
        parser.error("--base-env DIR is needed to build the environment (or --reuse an existing one)")
    for pin in ns.override:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+\s*(==|>=|<=|~=|!=|>|<)\s*[\w.*+!\-]+", pin):
            parser.error(f"--override takes a name and a version spec (PKG==VER), got {pin!r}")
    if ns.cases < 1:
        parser.error("--cases must be at least 1")
    return KitRequest(version=ns.version, out=ns.out or Path(f"release-kit-{ns.version}"), base_env=ns.base_env,
                      cases=ns.cases, seed=ns.seed, overrides=tuple(ns.override), reuse=ns.reuse,
                      skip=tuple(ns.skip), step_timeout_s=ns.step_timeout, report_only=ns.report_only)


def main(argv: Sequence[str] | None = None) -> int:
    req = parse_args(argv)
    try:
        summary = report_again(req.out) if req.report_only else run_kit(req)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"report": str(req.out / "report.md"), "steps": {s["name"]: s["exit"] for s in summary["steps"]}}))
    return 0 if all(s["exit"] == 0 for s in summary["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
