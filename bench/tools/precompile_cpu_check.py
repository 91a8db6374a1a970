"""Developer check: the tune worker's Triton pre-compile pass over vLLM's REAL TRITON_ATTN impl, on CPU.

    python -m attnsel.bench.tools.release_env run 0.26.0 -- -m attnsel.bench.tools.precompile_cpu_check

vLLM's own TritonAttentionImpl.forward is driven through attnsel's adapter (`prepare()`, as the worker
does) inside attention/kernels/triton_precompile.CompileOnly, with Triton compiling for an sm_90
target (a target-only driver: no GPU, no launch; vLLM's platform is vllm_cpu_check's H100 stand-in,
Triton is compiled, not interpreted). It prints how many kernels the pass compiled, and then runs
the same rows again with a fresh adapter (the rows' own instances, as in the worker) inside a second
block: 0 new compiles there means the rows' calls compute the very keys the pass compiled.
Exit 0 when the pass compiled kernels without errors and the second pass compiled none.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "0"  # compiled, not interpreted (vllm_cpu_check sets 1 only by default)


def rows(block_sizes: tuple[int, ...]) -> list[tuple]:
    """(workload, block size) in tune's default shape (32 q heads, 8 kv heads, head 128, bf16)."""
    from attnsel.attention.kernels import paged

    shapes = (("decode", 1, 1024, 1), ("decode", 16, 1024, 1), ("decode", 64, 4096, 1),
              ("prefill", 1, 2048, 2048), ("mixed", 4, 1024, 256))
    return [(paged.Workload(kind, batch, context, qlen, 32, 8, 128, "bfloat16", "auto"), block_size)
            for block_size in block_sizes for kind, batch, context, qlen in shapes]


def one_pass(cases: list[tuple], threads: int) -> dict:
    from attnsel.attention.kernels import adapters_for, paged
    from attnsel.attention.kernels.triton_precompile import CompileOnly

    adapter = adapters_for("TRITON_ATTN", device="cpu")[0]
    errors = []
    with CompileOnly(threads, load=False) as block:
        for workload, block_size in cases:
            try:
                adapter.prepare(paged.make_paged_batch(workload, block_size, device="cpu", seed=1, ragged=True))
            except Exception as exc:  # noqa: BLE001 -- reported
                errors.append(f"{workload.label()} block {block_size}: {type(exc).__name__}: {exc}"[:300])
    return {"adapter": adapter.name, **block.report.to_dict(), "row_errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    from triton.runtime.driver import driver

    from attnsel.bench.tools.triton_compile_speed import TargetOnlyDriver
    from attnsel.bench.tools.vllm_cpu_check import stand_in_gpu

    stand_in_gpu()
    driver.set_active(TargetOnlyDriver(90))
    cases = rows(tuple(args.block_sizes))
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
        first = one_pass(cases, args.threads)
        second = one_pass(cases, args.threads)
        entries = len(os.listdir(cache_dir))
    print(json.dumps({"rows": len(cases), "pass": first, "rows_again": second, "disk_cache_entries": entries},
                     indent=1))
    ok = (first["adapter"] == "vllm" and first["compiled"] > 0 and not first["errors"] and not first["row_errors"]
          and second["kernels"] == 0 and not second["row_errors"])
    print(f"precompile CPU check: {first['compiled']} kernels compiled for {len(cases)} rows in {first['seconds']:.1f} s; "
          f"the same rows again compiled {second['kernels']}: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
