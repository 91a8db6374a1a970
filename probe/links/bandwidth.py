"""`attnsel probe --measure-p2p`: GPU-to-GPU copy bandwidth per pair, measured with torch.

A 1 GiB `dst.copy_(src)` from GPU a to GPU b, timed with CUDA events on the destination's stream
(where PyTorch runs a peer copy), one warm-up then the median of a few repetitions. docs/gpu-facts.md §2:
two NVLinked H200 give 391 GB/s this way.
"""

from __future__ import annotations

import statistics
from types import ModuleType

COPY_BYTES = 1 << 30
REPETITIONS = 5


def measure_pairs(pairs: list[tuple[int, int]], nbytes: int = COPY_BYTES, reps: int = REPETITIONS) -> dict[tuple[int, int], float | str]:
    """GB/s (10^9 bytes/s) per (a, b) of CUDA ordinals, or a one-line reason why not."""
    try:
        import torch
    except Exception:  # noqa: BLE001
        return {p: "not measured: torch is not installed" for p in pairs}
    if not torch.cuda.is_available():
        return {p: "not measured: torch sees no CUDA GPU" for p in pairs}
    count = torch.cuda.device_count()
    if count < 2:
        return {p: f"not measured: torch sees {count} GPU" for p in pairs}
    results: dict[tuple[int, int], float | str] = {}
    for a, b in pairs:
        if max(a, b) >= count:
            results[(a, b)] = f"not measured: torch sees only {count} GPUs"
            continue
        try:
            results[(a, b)] = _measure_one(torch, a, b, nbytes, reps)
        except Exception as exc:  # noqa: BLE001 -- e.g. out of memory on a busy GPU
            results[(a, b)] = f"not measured: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return results


def _measure_one(torch: ModuleType, a: int, b: int, nbytes: int, reps: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{a}")
    dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{b}")
    try:
        times_ms = []
        with torch.cuda.device(b):
            dst.copy_(src)  # warm-up: enables peer access, first-touch costs
            torch.cuda.synchronize(a)
            torch.cuda.synchronize(b)
            for _ in range(reps):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                dst.copy_(src)
                end.record()
                end.synchronize()
                times_ms.append(start.elapsed_time(end))
        return nbytes / (statistics.median(times_ms) / 1e3) / 1e9
    finally:
        del src, dst
        torch.cuda.empty_cache()
