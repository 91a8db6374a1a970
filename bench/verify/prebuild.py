"""Pre-building, while the first engine starts, the FlashInfer JIT module vLLM's sampler builds at
start-up (docs/verify.md "Speed"): `python -m attnsel.bench.verify.prebuild`, a low-priority process
of its own that never initialises CUDA.

Why it saves time: vLLM's first engine builds FlashInfer's `sampling` module in its dummy sampler
run (~95 s on an H200, tests/fixtures/verify/h200_vllm033_dense/verify/engine-FLASH_ATTN-16.log
11:03:20 -> 11:04:54), after its ~60 s of import, config and torch.compile. Started with verify,
the build runs beside those; the engine's build_and_load() then finds it built, or waits on the
module's file lock (flashinfer 0.6.14 jit/core.py:289-318, 0.7.2.post1 jit/core.py:337-342 and
577-590: build(need_lock=True) and build_and_load() take `<tmpdir>/<name>.lock`) instead of
running a second ninja.

Same module, same build.ninja: the builder asks flashinfer's own generator (release data:
RuleProfile.sampler_jit_modules) and builds with tune's machinery (attention/kernels
flashinfer_jit.build_jit_modules). FlashInfer takes the CUDA arch from FLASHINFER_CUDA_ARCH_LIST,
else from torch.cuda.get_device_capability (compilation_context.py CompilationContext.__init__,
both releases), which would initialise CUDA: the builder is given the arch NVML read (GPU 0) in
that variable, normalised by flashinfer as the capability would be, so the flags match.

Protocol: one JSON request on stdin {"builder", "modules", "cuda_arch", "attention" (optional: the
model's attention shape when a FLASHINFER engine will start)}; one JSON line on stdout,
the builder's summary {"modules", "built", "cached", "seconds", "error"} or {"skipped"}.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from attnsel.bench.verify.engine_process import end_process_group

if TYPE_CHECKING:
    from attnsel.attention.versions import RuleProfile

PREBUILD_ENV = "ATTNSEL_VERIFY_PREBUILD"  # "0": no pre-build
BUILDER_ENV = "ATTNSEL_VERIFY_PREBUILDER"  # module:attr or file.py:attr called with the module names (CI: a fake)
DEFAULT_BUILDER = "attnsel.bench.verify.prebuild:build_flashinfer_modules"
HOLD_S = 300.0  # the longest the engines' measuring waits for a build still running, over the whole run
NICE = 10  # below the engine's own start-up work on the same CPUs


def prebuild_request(profile: RuleProfile, capability: tuple[int, int] | None, env: Mapping[str, str],
                     attention: dict | None = None) -> dict | None:
    """What to pre-build for this release and GPU; None when pre-building is switched off (then
    verify.json has no `prebuild`); {"skipped": why} when there is nothing to build. `attention`
    ({dtype, head_size, kv_cache_dtype}): a FLASHINFER engine will start, its attention modules too."""
    if env.get(PREBUILD_ENV, "1") == "0":
        return None
    modules = list(profile.sampler_jit_modules)
    skipped = None
    if not modules:
        skipped = f"vLLM's sampler loads no FlashInfer JIT module in this release ({profile.name})"
    elif env.get("VLLM_USE_FLASHINFER_SAMPLER") == "0":
        skipped, modules = "VLLM_USE_FLASHINFER_SAMPLER=0: vLLM samples without FlashInfer", []
    if skipped and not attention:
        return {"skipped": skipped}
    arch = env.get("FLASHINFER_CUDA_ARCH_LIST") or (f"{capability[0]}.{capability[1]}" if capability else None)
    request: dict[str, object] = {"builder": env.get(BUILDER_ENV) or DEFAULT_BUILDER, "modules": modules, "cuda_arch": arch}
    if attention:
        request["attention"] = [dict(attention, capability=list(capability) if capability else None)]
    return request


class FlashInferPrebuild:
    """The builder process, seen from verify's parent: started at once, polled; while an engine
    measures it is waited for (`hold`, an engine that loads its modules) or paused (`pause`, any
    other engine) and resumed when that engine is done; killed with its process group at the end."""

    def __init__(self, request: dict, log_path: Path, env: dict):
        self.request = request
        self.record: dict = {"modules": request.get("modules"), "cuda_arch": request.get("cuda_arch"),
                             **({"attention": request["attention"]} if request.get("attention") else {})}
        self._started = time.monotonic()
        self.held_s = 0.0  # what the engines waited for it so far (at most HOLD_S in all)
        self.paused_s = 0.0  # how long it was stopped while engines measured
        self._paused_at: float | None = None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "attnsel.bench.verify.prebuild"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         env=dict(env, PYTHONUNBUFFERED="1"), start_new_session=True)
        stdin = self.proc.stdin
        assert stdin is not None  # Popen(stdin=PIPE)
        try:
            stdin.write((json.dumps(request) + "\n").encode())
            stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def done(self) -> bool:
        return self.proc.poll() is not None

    def must_wait(self) -> bool:
        """Still building, and the engines have not yet waited HOLD_S for it."""
        return not self.done() and self.held_s < HOLD_S

    def hold(self, on_tick: Callable[[], None] = lambda: None) -> float:
        """Waits for the build to end (within what is left of HOLD_S); the seconds waited."""
        self.resume()
        started = time.monotonic()
        while self.must_wait() and self.held_s + (time.monotonic() - started) < HOLD_S:
            time.sleep(0.2)
            on_tick()
        waited = time.monotonic() - started
        self.held_s += waited
        return waited

    def pause(self) -> bool:
        """Stops the build (its whole process group: ninja, nvcc) while an engine that does not need
        its modules measures: no CPU work beside the timed calls, and no wait for the build either.
        True if it was running and is now paused."""
        if self.done() or self._paused_at is not None:
            return False
        if not self._signal(signal.SIGSTOP):
            return False
        self._paused_at = time.monotonic()
        return True

    def resume(self) -> None:
        """Lets a paused build go on (the next engine's start, which may wait on its file lock)."""
        if self._paused_at is None:
            return
        self._signal(signal.SIGCONT)
        self.paused_s += time.monotonic() - self._paused_at
        self._paused_at = None

    def _signal(self, sig: int) -> bool:
        try:
            os.killpg(self.proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def finish(self) -> dict:
        """The record for verify.json: the builder's summary, or why there is none."""
        self.resume()
        if self.paused_s:
            self.record["paused_s"] = round(self.paused_s, 3)
        if not self.done():
            self.stop()
            self.record["error"] = "still building when verify ended; stopped"
            return self.record
        out = self.proc.stdout.read().decode("utf-8", errors="replace") if self.proc.stdout else ""
        summary = next((json.loads(line) for line in out.splitlines() if line.startswith("{")), None)
        if isinstance(summary, dict):
            self.record.update(summary)
        else:
            self.record["error"] = f"the pre-build process exited with code {self.proc.returncode} and no summary"
        self.record.setdefault("seconds", time.monotonic() - self._started)
        return self.record

    def stop(self) -> None:
        self.resume()  # a stopped process group would hold SIGTERM until continued
        end_process_group(self.proc, term_wait_s=5.0, kill_wait_s=5.0)  # the builder's group: ninja, nvcc


def note(record: dict | None) -> str | None:
    """One line for the progress display and the first engine's row."""
    if not record:
        return None
    what = "sampler module" if not record.get("attention") else (
        "sampler and attention modules" if record.get("modules") else "attention modules")
    if record.get("skipped"):
        return f"FlashInfer sampler pre-build skipped: {record['skipped']}"
    if record.get("error") and not record.get("built"):
        return f"FlashInfer {what} pre-build failed ({record['error']}); the engine builds it as usual"
    if record.get("cached") and not record.get("built"):
        return f"FlashInfer {what} already in FlashInfer's JIT cache"
    return f"FlashInfer {what} pre-built beside the first engine's start ({record.get('seconds', 0):.0f} s)"


# ---------------------------------------------------------------------------------------------
# The builder process


def build_flashinfer_modules(modules: list, attention: list | None = None) -> dict:
    """The default builder: tune's FlashInfer pre-build, for modules named by their generator and
    for the attention modules a FLASHINFER engine plans (the requests tune's pre-build makes)."""
    import importlib.util

    if importlib.util.find_spec("flashinfer") is None:
        return {"skipped": "flashinfer is not installed"}
    import torch

    from attnsel.attention.kernels import (
        build_jit_modules,
        jit_module_requests,
        named_jit_requests,
    )
    from attnsel.attention.kernels.base import WorkloadKind

    requests = named_jit_requests(modules)
    for spec in attention or []:
        capability = tuple(spec["capability"]) if spec.get("capability") else None
        requests += jit_module_requests(tuple(WorkloadKind), spec["dtype"], int(spec["head_size"]),
                                        capability, torch.version.cuda, kv_cache_dtype=spec.get("kv_cache_dtype") or "auto")
    return dict(build_jit_modules(requests))  # a PrebuildSummary, or {"skipped": why} above


def main() -> int:
    request = json.loads(sys.stdin.readline() or "{}")
    with contextlib.suppress(OSError):
        os.nice(NICE)
    if request.get("cuda_arch"):  # flashinfer reads it instead of asking torch.cuda (no CUDA here)
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", str(request["cuda_arch"]))
        # and no GPU at all: flashinfer 0.6.14's import asks torch for device 0's properties
        # (gdn_kernels/gdn_decode_bf16_state.py:2701, inside try/except RuntimeError), which would
        # put a CUDA context of this builder on the GPU the first engine is sizing its KV cache on
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    started = time.perf_counter()
    try:
        from attnsel.bench.verify.engine_worker import resolve

        builder = resolve(request["builder"])
        modules = request.get("modules") or []
        built = builder(modules, attention=request["attention"]) if request.get("attention") else builder(modules)
        summary = dict(built or {})
    except Exception as exc:  # noqa: BLE001 -- recorded; the engine builds the module itself
        from attnsel.bench.worker import error_text

        summary = {"error": error_text(exc)}
    summary.setdefault("seconds", time.perf_counter() - started)
    print(json.dumps(summary, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
