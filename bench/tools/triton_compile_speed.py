"""How much do threads speed up compiling vLLM's Triton attention kernels? A CPU measurement.

    python -m attnsel.bench.tools.release_env run 0.26.0 -- -m attnsel.bench.tools.triton_compile_speed --threads 1 2 1 2

Compiles several specialisations of vLLM's `kernel_unified_attention` (block sizes 16/32/64, the 2D
prefill and 3D decode variants, plus `reduce_segments`) for an sm_90 CUDA target on a machine
without a GPU: vLLM's own `unified_attention(...)` is called with CPU tensors inside
attention/kernels/triton_precompile.CompileOnly, with a stand-in Triton driver that names the
target (no launch happens, so no GPU is needed; ptxas ships in the triton wheel). Each run uses an
empty TRITON_CACHE_DIR and empty in-memory caches. Prints seconds per thread count and the
speed-up. The launcher stubs (a C compile per signature) need libcuda and are not part of it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


class TargetOnlyDriver:
    """What JITFunction.run asks the driver for, answered without a GPU (no launch happens)."""

    def __init__(self, capability: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, 32)

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        return None

    def get_current_stream(self, device: int) -> int:
        return 0

    def get_current_target(self) -> object:
        return self.target


def _vllm_unified_attention():
    """vLLM's `unified_attention` bound to the real triton (vllm.triton_utils hands out a
    placeholder when no GPU driver is active)."""
    import triton
    import triton.language as tl
    import vllm.triton_utils as tu

    tu.triton, tu.tl = triton, tl
    from vllm.v1.attention.ops import triton_unified_attention as ua

    return ua


def _call(ua, block_size: int, decode: bool, torch) -> None:
    """One unified_attention call shaped like a tune row (bf16, 32 q heads, 8 kv heads, head 128)."""
    heads, kv_heads, head, seqs = 32, 8, 128, 4
    q_len = 1 if decode else 64
    tokens = seqs * q_len
    blocks_per_seq = 4096 // block_size
    q = torch.zeros(tokens, heads, head, dtype=torch.bfloat16)
    cache = torch.zeros(seqs * blocks_per_seq, block_size, kv_heads, head, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    cu = torch.arange(0, tokens + 1, q_len, dtype=torch.int32)
    seqused = torch.full((seqs,), 4096, dtype=torch.int32)
    table = torch.arange(seqs * blocks_per_seq, dtype=torch.int32).view(seqs, blocks_per_seq)
    scale = torch.ones(1, dtype=torch.float32)
    segments = 16
    ua.unified_attention(
        q=q, k=cache, v=cache, out=out, cu_seqlens_q=cu, max_seqlen_q=q_len, seqused_k=seqused,
        max_seqlen_k=4096, softmax_scale=head ** -0.5, causal=True, window_size=(-1, -1), block_table=table,
        softcap=0, q_descale=None, k_descale=scale.expand(seqs, kv_heads), v_descale=scale.expand(seqs, kv_heads),
        seq_threshold_3D=128 if decode else None, num_par_softmax_segments=segments if decode else None,
        softmax_segm_output=torch.empty(tokens, heads, segments, head, dtype=torch.float32),
        softmax_segm_max=torch.empty(tokens, heads, segments, dtype=torch.float32),
        softmax_segm_expsum=torch.empty(tokens, heads, segments, dtype=torch.float32),
    )


def measure(threads: int, block_sizes: list[int], capability: int) -> dict:
    import torch
    from triton.runtime.driver import driver

    from attnsel.attention.kernels.triton_precompile import CompileOnly

    ua = _vllm_unified_attention()
    for kernel in (ua.kernel_unified_attention, ua.reduce_segments):
        kernel.device_caches.clear()
    driver.set_active(TargetOnlyDriver(capability))
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
        started, cpu_started = time.perf_counter(), time.process_time()
        with CompileOnly(threads, load=False) as block:
            for block_size in block_sizes:
                for decode in (False, True):
                    _call(ua, block_size, decode, torch)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started  # > wall: the compiles ran at once (the GIL was released)
        cached = sorted(os.listdir(cache_dir))
    report = block.report.to_dict()
    report.update(wall_s=round(wall, 2), cpu_s=round(cpu, 2), cache_entries=len(cached))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--capability", type=int, default=90)
    args = parser.parse_args(argv)
    measure(1, args.block_sizes[:1], args.capability)  # warm-up, not counted: Triton's lazy imports and setup
    walls: dict[int, list[float]] = {}
    for threads in args.threads:  # repeat a count (e.g. 1 2 1 2) to see the noise of a shared machine
        result = measure(threads, args.block_sizes, args.capability)
        walls.setdefault(threads, []).append(result["wall_s"])
        print(json.dumps({"threads": threads, **result}), flush=True)
    base = statistics.median(walls[args.threads[0]])
    for threads, values in walls.items():
        wall = statistics.median(values)
        print(f"{threads} thread(s): median {wall:.2f} s of {values} (x{base / wall:.2f} vs {args.threads[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
