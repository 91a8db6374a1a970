"""Developer check (CPU, a release layer): does verify's sampler pre-build write the same build.ninja,
in the same JIT folder, as the engine will? verify's builder gives FlashInfer the arch NVML read in
FLASHINFER_CUDA_ARCH_LIST; vLLM's engine leaves FlashInfer to ask torch.cuda.get_device_capability.

    python -m attnsel.bench.tools.release_env run 0.33.0 -- -m attnsel.bench.tools.prebuild_ninja_check 9.0

Writes the module's build.ninja both ways (the second with torch.cuda's device answers faked, as
on a GPU) into two temporary FlashInfer workspaces, each in a fresh process, and prints the diff
after the workspace path (empty: ninja finds the pre-built module up to date). Also says whether
FlashInfer's import asked torch.cuda for a device (flashinfer 0.6.14 does, at import:
gdn_kernels/gdn_decode_bf16_state.py:2701; 0.7.2.post1 does not).
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MODULE = "flashinfer.jit.sampling:gen_sampling_module"


def write_ninja(mode: str, capability: str) -> None:
    """In this process: 'env' sets FLASHINFER_CUDA_ARCH_LIST, 'torch' fakes torch.cuda's answers."""
    import torch

    asked = []
    if mode == "env":
        os.environ["FLASHINFER_CUDA_ARCH_LIST"] = capability
    else:
        major, minor = (int(x) for x in capability.split("."))
        torch.cuda.device_count = lambda: 1
        torch.cuda.get_device_capability = lambda device=None: (major, minor)
    real_init = torch.cuda._lazy_init
    def lazy_init() -> None:
        asked.append("lazy_init")
        real_init()

    torch.cuda._lazy_init = lazy_init
    import flashinfer.jit.attention.modules as modules

    from attnsel.attention.kernels import named_jit_requests
    from attnsel.attention.kernels.flashinfer_jit import _jit_spec

    spec = _jit_spec(modules, named_jit_requests([MODULE])[0], torch)
    spec.write_ninja()
    print(f"{mode}: {spec.ninja_path} (torch.cuda initialisation asked {len(asked)}x)")


def main() -> int:
    if len(sys.argv) > 2:
        write_ninja(sys.argv[2], sys.argv[1])
        return 0
    capability = sys.argv[1] if len(sys.argv) > 1 else "9.0"
    texts = []
    for mode in ("env", "torch"):
        workspace = tempfile.mkdtemp(prefix=f"fi-{mode}-")
        env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=workspace)
        env.pop("FLASHINFER_CUDA_ARCH_LIST", None)
        subprocess.run([sys.executable, "-m", "attnsel.bench.tools.prebuild_ninja_check", capability, mode],
                       env=env, check=True)
        [ninja] = Path(workspace).rglob("build.ninja")
        texts.append((str(ninja.relative_to(workspace)), ninja.read_text().replace(workspace, "WORKSPACE")))
    diff = list(difflib.unified_diff(texts[0][1].splitlines(), texts[1][1].splitlines(), lineterm=""))
    print(f"folders: {texts[0][0]} | {texts[1][0]}")
    print("\n".join(diff) if diff else f"identical build.ninja ({len(texts[0][1].splitlines())} lines)")
    return 1 if diff or texts[0][0] != texts[1][0] else 0


if __name__ == "__main__":
    sys.exit(main())
