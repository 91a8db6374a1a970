"""Environments for vLLM releases on a machine without a GPU: one base virtualenv, one small layer per
release (the release's vLLM plus what its requirements need that the base lacks), on PYTHONPATH.

    python -m attnsel.bench.tools.release_env pins 0.28.0                  # torch / flashinfer / transformers pins
    python -m attnsel.bench.tools.release_env build 0.28.0 --base /work/venvs/vllm024
    python -m attnsel.bench.tools.release_env build 0.34.0 --base /work/venvs/torch214 \
        --override flashinfer-python==0.7.4                                 # a pin PyPI cannot satisfy
    python -m attnsel.bench.tools.release_env run 0.28.0 -- -m attnsel.bench.tools.parity_live --cases 50000
    python -m attnsel.bench.tools.release_env remove 0.28.0

Why layers: CUDA torch wheels and their nvidia-* libraries take several GB, and releases share them
(0.20-0.26 pin torch 2.11.0, 0.27-0.32 torch 2.13.0). A layer is a small virtualenv whose
site-packages adds the base's as a further site dir (a .pth line), so pip counts the base's
packages as installed: `pip install vllm==X` then installs only what the base lacks or pins
differently (pip leaves the base's own copies alone: "outside environment"), and the layer's
site-packages comes first on sys.path. Installs use PyPI only (`PIP_FIND_LINKS` empty: a local
`+cpu` torch wheel there would break vLLM's extensions, docs/vllm-rules.md §10) and no pip cache.
`pins` reads the release wheel's Requires-Dist without downloading it (HTTP range reads).

`--override NAME<spec>` (repeatable) replaces the release's own requirement on NAME, for a pin that
PyPI cannot satisfy (vLLM 0.34.0 pins flashinfer-python==0.7.3, which was never uploaded; 0.7.4 was).
pip has no override mechanism (a constraint cannot loosen an `==` pin: the resolver reports a
conflict), so then vLLM is installed with `--no-deps` and its Requires-Dist, read from the installed
METADATA, with extras-only lines dropped and each overridden name's line replaced, in one further
pip call (`pip check` in the layer names the overridden pin afterwards, as expected).
`--wheel FILE` installs a vLLM wheel already on disk instead of downloading it.

`run` starts the layer's Python with this checkout importable as `attnsel` and the rest of the
command line. `remove` deletes the layer (the base is never written to).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(os.environ.get("ATTNSEL_RELEASE_ROOT", "/work/rel"))
SIMPLE = "https://pypi.org/simple"
REPO = Path(__file__).resolve().parents[2]


class _RemoteFile(io.RawIOBase):
    """A file on an HTTP server that answers range requests, read as if local (for zipfile)."""

    def __init__(self, url: str):
        self.url, self.pos = url, 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as response:
            self.size = int(response.headers["Content-Length"])

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        if self.pos >= self.size:
            return 0
        end = min(self.size, self.pos + len(buffer)) - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        with urllib.request.urlopen(request, timeout=120) as response:
            data = response.read()
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def wheel_metadata(package: str, version: str, tag: str = "x86_64") -> tuple[str, str]:
    """(wheel file name, its METADATA text) for `package==version` from PyPI, without the wheel."""
    request = urllib.request.Request(f"{SIMPLE}/{package}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    prefix = f"{package.replace('-', '_')}-{version}-"
    wheels = sorted((f for f in files if f["filename"].startswith(prefix) and f["filename"].endswith(".whl")
                     and tag in f["filename"]), key=lambda f: f["filename"])
    if not wheels:
        raise SystemExit(f"no {tag} wheel of {package}=={version} on PyPI")
    with zipfile.ZipFile(io.BufferedReader(_RemoteFile(wheels[0]["url"]), buffer_size=1 << 16)) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return wheels[0]["filename"], archive.read(name).decode("utf-8")


def requires(metadata: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]


def _name(requirement: str) -> str:
    """The normalized project name of a requirement line (PEP 503: case, '-', '_' and '.' alike)."""
    head = requirement.split(";", 1)[0].strip()
    for stop in "[<>=!~ (":
        head = head.split(stop, 1)[0]
    return head.strip().lower().replace("_", "-").replace(".", "-")


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """{normalized name: requirement} from `--override` values; a value without a version spec is refused."""
    parsed = {}
    for value in overrides:
        name = _name(value)
        if not name or value.strip() == name or not any(op in value for op in "<>=!~"):
            raise SystemExit(f"--override {value!r}: expected NAME followed by a version spec, e.g. flashinfer-python==0.7.4")
        parsed[name] = value.strip()
    return parsed


def overridden_requires(metadata: str, overrides: dict[str, str]) -> list[str]:
    """The wheel's install requirements (extras-only lines dropped) with each overridden name's lines
    replaced by its override; an override naming no requirement of the wheel is refused."""
    kept, used = [], set()
    for line in requires(metadata):
        if "extra" in line.partition(";")[2]:
            continue
        name = _name(line)
        if name in overrides:
            if name not in used:
                kept.append(overrides[name])
            used.add(name)
        else:
            kept.append(line)
    unknown = sorted(set(overrides) - used)
    if unknown:
        raise SystemExit(f"--override: the wheel does not require {', '.join(unknown)}")
    return kept


def layer_dir(version: str) -> Path:
    return ROOT / "layers" / version


def _site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def _pip_env() -> dict:
    return {**os.environ, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "", "PIP_CONFIG_FILE": os.devnull}


def build(version: str, base: Path, overrides: dict[str, str] | None = None,
          wheel: Path | None = None) -> Path:
    """A layer virtualenv over `base` with vllm==version installed (what the base lacks only), its
    requirements on the names in `overrides` replaced by those requirements."""
    layer = layer_dir(version)
    base_python = base / "bin" / "python"
    interpreter = subprocess.run([str(base_python), "-c", "import sys; print(sys._base_executable)"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    if not (layer / "bin" / "python").exists():
        subprocess.run([interpreter, "-m", "venv", str(layer)], check=True)
    pth = _site_packages(layer) / "_attnsel_base.pth"
    pth.write_text(f"import site; site.addsitedir({str(_site_packages(base))!r})\n", encoding="utf-8")
    pip = [str(layer / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir", "--only-binary",
           ":all:", "--index-url", f"{SIMPLE}/"]
    target = str(wheel) if wheel else f"vllm=={version}"
    if not overrides:
        subprocess.run([*pip, target], env=_pip_env(), check=True)
    else:
        subprocess.run([*pip, "--no-deps", target], env=_pip_env(), check=True)
        dist_info = next(_site_packages(layer).glob(f"vllm-{version}*.dist-info"))
        metadata = (dist_info / "METADATA").read_text(encoding="utf-8")
        subprocess.run([*pip, *overridden_requires(metadata, overrides)], env=_pip_env(), check=True)
    (layer / "ATTNSEL_BASE").write_text(str(base), encoding="utf-8")
    return layer


def run(version: str, command: list[str]) -> int:
    layer = layer_dir(version)
    # one link folder per checkout: several worktrees share ROOT, and each must import its own attnsel
    link_parent = ROOT / "attnsel_path" / f"{REPO.parent.name}_{REPO.name}"
    link_parent.mkdir(parents=True, exist_ok=True)
    link = link_parent / "attnsel"
    if link.is_symlink() and link.resolve() != REPO:
        link.unlink()
    if not link.is_symlink():
        link.symlink_to(REPO)
    env = {**os.environ, "PYTHONPATH": str(link_parent)}
    return subprocess.run([str(layer / "bin" / "python"), *command], env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    pins = sub.add_parser("pins")
    pins.add_argument("version")
    make = sub.add_parser("build")
    make.add_argument("version")
    make.add_argument("--base", type=Path, required=True, help="a virtualenv to layer over (read only)")
    make.add_argument("--override", action="append", default=[], metavar="NAME==VERSION",
                      help="replace the release's requirement on NAME (repeatable), e.g. flashinfer-python==0.7.4")
    make.add_argument("--wheel", type=Path, help="a vLLM wheel on disk to install instead of downloading it")
    go = sub.add_parser("run")
    go.add_argument("version")
    go.add_argument("command", nargs=argparse.REMAINDER)
    drop = sub.add_parser("remove")
    drop.add_argument("version")
    ns = parser.parse_args(argv)
    if ns.action == "pins":
        wheel, metadata = wheel_metadata("vllm", ns.version)
        wanted = ("torch", "flashinfer", "transformers", "triton")
        print(wheel)
        print("\n".join(r for r in requires(metadata) if r.startswith(wanted)))
        return 0
    if ns.action == "build":
        print(build(ns.version, ns.base, parse_overrides(ns.override), ns.wheel))
        return 0
    if ns.action == "run":
        command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
        return run(ns.version, command)
    shutil.rmtree(layer_dir(ns.version), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
