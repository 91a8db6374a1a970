"""The installed library versions a vLLM user compares (what `vllm collect-env` prints): read from
package metadata and torch's own version file, never by importing them (probe imports no torch and
starts no CUDA JIT). `tune` records the same names in tune.json (bench/worker/kernel_toolkit.py)."""

from __future__ import annotations

import ast
import sys
from importlib import metadata

# The distributions tune records (tune.json `device.versions`) and probe --json reports.
LIBRARY_DISTRIBUTIONS = (
    "torch", "triton", "flashinfer-python", "flash-attn", "flash-attn-4", "vllm", "nvidia-cutlass-dsl",
    "cupti-python",
)
# The CUDA runtime a pip-installed torch loads: the nvidia-cuda-runtime wheel (CUDA 13 and 12 names).
CUDA_RUNTIME_DISTRIBUTIONS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12")


def distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def library_versions() -> dict[str, str | None]:
    """Python and each of LIBRARY_DISTRIBUTIONS (None: not installed)."""
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in LIBRARY_DISTRIBUTIONS:
        out[dist] = distribution_version(dist)
    return out


def torch_cuda_version() -> str | None:
    """The CUDA torch was built with (`torch.version.cuda`: `cuda = '13.0'` in torch/version.py),
    read from that file's text; None without torch or for a CPU build."""
    try:
        path = metadata.distribution("torch").locate_file("torch/version.py")
        tree = ast.parse(open(str(path), encoding="utf-8").read())
    except (metadata.PackageNotFoundError, OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(value, ast.Constant):
            return value.value if isinstance(value.value, str) else None
    return None


def cuda_runtime_version() -> str | None:
    """The installed nvidia-cuda-runtime wheel's version (None where CUDA comes from the system)."""
    return next((v for v in map(distribution_version, CUDA_RUNTIME_DISTRIBUTIONS) if v is not None), None)


def environment_versions() -> dict[str, str | None]:
    """probe --json `libraries`: library_versions() plus torch's CUDA and the CUDA runtime wheel."""
    return {**library_versions(), "torch_cuda": torch_cuda_version(), "cuda_runtime": cuda_runtime_version()}
