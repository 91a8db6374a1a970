"""GPU check of every available kernel provider on one shape: correct? how fast?

Run from the repository root on a CUDA machine (attnsel need not be installed):

    python bench/tools/kernel_check.py                  # bar shape: decode, batch 64, ctx 4096, 32/8 heads, d128, bf16
    python bench/tools/kernel_check.py --quick          # smoke run: small shape, block sizes 16 and 64, 10 timed calls
    python bench/tools/kernel_check.py --triton-configs all --backends TRITON_ATTN,FLASHINFER --block-sizes 16,64
    python bench/tools/kernel_check.py --device cpu --quick --batch 3 --context 100 --heads 4/2 --head-size 32
                                                  # CPU smoke run (Triton interpreter, FlexAttention)

For each backend, provider and block size: build the paged batch (shuffled block table, ragged
lengths unless --uniform), prepare the kernel (plan/compile, timed apart), compare with the fp32
reference (||out-ref||/||ref||; the output buffer is NaN-poisoned first), then time it with CUDA
events, cold L2 (a 2 x L2 buffer zeroed before every call), median of --iters calls. Prints one
JSON line per row on stdout, then a table on stderr with ms, TB/s (FlashInfer's counting: Q + K +
V over the real lengths + O, 10^12 bytes), % of the GPU's peak and our Triton's throughput
relative to FlashInfer's tensor-core decode at the same block size (the issue's bar: >= 0.8).
One failing provider never stops the others.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path


def _bootstrap_attnsel() -> None:
    """Make `import attnsel` work from a plain checkout (the repo root is the package)."""
    if importlib.util.find_spec("attnsel") is not None:
        return
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "attnsel", root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None  # a file path: always a spec with a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["attnsel"] = module
    spec.loader.exec_module(module)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def emit(row: dict) -> None:
    print(json.dumps(row, default=str), flush=True)


def peak_bandwidth_tb_s() -> float | None:
    """Bus width x max memory clock x 2 (DDR) from NVML, in TB/s (docs/gpu-facts.md §1: H200 -> 4.81)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(h)
        mem_mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        return bus_bits / 8 * mem_mhz * 1e6 * 2 / 1e12
    except Exception:
        return None


class ColdL2Timer:
    mode = "cuda events, cold L2 (2 x L2 zeroed before each call)"

    def __init__(self, iters: int, warmup: int):
        import torch

        self.torch = torch
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        self.iters, self.warmup = iters, warmup

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def time_ms(self, fn) -> dict:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for s, e in zip(starts, ends):
            self.flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
        q = lambda f: times[min(len(times) - 1, int(f * len(times)))]  # noqa: E731
        return {"ms": statistics.median(times), "p20_ms": q(0.2), "p80_ms": q(0.8), "n": len(times)}


class WallTimer:
    """CPU smoke runs (--device cpu): wall-clock median, no cache control; numbers mean nothing."""

    mode = "CPU wall clock (smoke run: not a measurement)"

    def __init__(self, iters: int, warmup: int):
        import torch

        self.torch = torch
        self.iters, self.warmup = iters, warmup

    def sync(self) -> None:
        pass

    def time_ms(self, fn) -> dict:
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        return {"ms": statistics.median(times), "p20_ms": times[int(0.2 * len(times))],
                "p80_ms": times[min(len(times) - 1, int(0.8 * len(times)))], "n": len(times)}


def triton_variants(spec: str, block_size: int):
    """(label, adapter) pairs for our Triton kernel: default heuristic, a grid, or explicit configs."""
    from attnsel.attention.kernels import triton_paged as tp

    if spec == "default":
        return [("default", tp.AttnselTritonAdapter())]
    if spec in ("all", "quick"):
        configs = tp.decode_config_grid(block_size)
        if spec == "quick":
            configs = [c for c in configs if c.num_warps == 4 and c.num_stages in (2, 3) and c.block_n in (32, 64)]
        return [("default", tp.AttnselTritonAdapter())] + [
            (c.label(), tp.AttnselTritonAdapter(decode_cfg=c, prefill_cfg=tp.PrefillConfig(block_n=c.block_n)))
            for c in configs
        ]
    variants = []
    for item in spec.split(";"):
        kv = dict(part.split("=") for part in item.split(",") if part)
        cfg = tp.DecodeConfig(
            block_n=int(kv.get("block_n", 0)), num_splits=int(kv.get("splits", 0)),
            num_warps=int(kv.get("warps", 4)), num_stages=int(kv.get("stages", 2)),
        )
        pre = tp.PrefillConfig(
            block_q=int(kv.get("block_q", 0)), block_n=int(kv.get("block_n", 0)),
            num_warps=int(kv.get("warps", 4)), num_stages=int(kv.get("stages", 2)),
        )
        variants.append((cfg.label(), tp.AttnselTritonAdapter(decode_cfg=cfg, prefill_cfg=pre)))
    return variants


def run_row(adapter, variant: str, w, block_size: int, batch, ref, timer, peak, args) -> dict:
    from attnsel.attention.kernels.paged import relative_error, tolerance_for

    row = {
        "backend": adapter.backend, "adapter": adapter.name, "variant": variant,
        "block_size": block_size, "workload": w.label(), "ragged": not args.uniform,
    }
    reason = adapter.unsupported_reason(w, block_size, args.device)
    if reason:
        row.update(status="unsupported", reason=reason)
        return row
    try:
        pk = adapter.prepare(batch)
        row.update(provider=pk.provider, kernel_block_size=pk.kernel_block_size,
                   setup_s=round(pk.setup_seconds, 3), notes=list(pk.notes), details=pk.details)
        if pk.poison_output is not None:
            pk.poison_output()
        pk.run()
        timer.sync()
        err = relative_error(pk.output(), ref)
        row["rel_err"] = err
        row["correct"] = math.isfinite(err) and err < tolerance_for(w.dtype)
        t = timer.time_ms(pk.run)
        tb_s = batch.bytes_moved() / (t["ms"] * 1e-3) / 1e12
        row.update(t, tb_per_s=round(tb_s, 3), tflops=round(batch.flops() / (t["ms"] * 1e-3) / 1e12, 2))
        if peak:
            row["pct_peak"] = round(100 * tb_s / peak, 1)
        row["status"] = "ok" if row["correct"] else "wrong"
    except Exception as exc:  # one provider's failure must not stop the others
        row.update(status="error", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:400])
        if args.verbose:
            row["traceback"] = traceback.format_exc()[-3000:]
    finally:
        if args.device == "cuda":
            timer.torch.cuda.empty_cache()
    return row


def print_table(rows: list[dict]) -> None:
    fi = {r["block_size"]: r["ms"] for r in rows if r.get("adapter") == "flashinfer" and r.get("status") == "ok"}
    log("")
    log(f"{'backend':15} {'adapter':22} {'block':>5} {'ms':>8} {'TB/s':>6} {'%peak':>6} {'err':>8} {'vs FI':>6}  variant / reason")
    for r in rows:
        base = f"{r['backend']:15} {r['adapter']:22} {r['block_size']:>5}"
        if r.get("status") in ("ok", "wrong"):
            ratio = ""
            if r["block_size"] in fi:
                ratio = f"{fi[r['block_size']] / r['ms']:.2f}"
            flag = "" if r["status"] == "ok" else "  WRONG"
            log(f"{base} {r['ms']:8.4f} {r['tb_per_s']:6.2f} {r.get('pct_peak', ''):>6} {r['rel_err']:8.1e} {ratio:>6}  {r['variant']}{flag}")
        else:
            log(f"{base} {'-':>8} {'-':>6} {'-':>6} {'-':>8} {'':>6}  {r['status']}: {r.get('reason') or r.get('error')}")
    bar = bar_summary(rows)
    if bar:
        log("")
        log(f"best attnsel triton: {bar['triton_ms']:.4f} ms ({bar['triton_tb_per_s']:.2f} TB/s) at block "
            f"{bar['triton_block_size']} [{bar['triton_variant']}]")
        log(f"best flashinfer:     {bar['flashinfer_ms']:.4f} ms; ratio (FI ms / ours ms) = {bar['ratio']:.2f} "
            f"(bar: >= 0.80); best of all: {bar['best_pct_peak']}% of peak")


def bar_summary(rows: list[dict]) -> dict | None:
    """The issue's two bars from kernel_check rows: attnsel's best Triton time against FlashInfer's
    best (tensor-core path, vLLM's), and the best correct row's % of HBM peak."""
    ok = [r for r in rows if r.get("status") == "ok"]
    ours = [r for r in ok if r.get("adapter") == "attnsel-triton"]
    fi = [r for r in ok if r.get("adapter") == "flashinfer"]
    if not ours or not fi:
        return None
    best = min(ours, key=lambda r: r["ms"])
    best_fi = min(fi, key=lambda r: r["ms"])
    return {
        "triton_ms": best["ms"], "triton_tb_per_s": best["tb_per_s"], "triton_block_size": best["block_size"],
        "triton_variant": best.get("variant"), "flashinfer_ms": best_fi["ms"],
        "ratio": best_fi["ms"] / best["ms"],
        "best_pct_peak": max((r.get("pct_peak") or 0) for r in ok),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", default="decode", choices=["decode", "prefill", "mixed"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--query-len", type=int, default=256, help="prefill chunk (prefill/mixed)")
    p.add_argument("--heads", default="32/8", help="query/kv heads")
    p.add_argument("--head-size", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--block-sizes", default="16,32,64,128,256")
    p.add_argument("--backends", default="FLASHINFER,FLASH_ATTN,TRITON_ATTN,FLEX_ATTENTION")
    p.add_argument("--triton-configs", default="default",
                   help="default | quick | all | 'block_n=64,splits=2,warps=4,stages=3;...'")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--uniform", action="store_true", help="every KV length exactly --context")
    p.add_argument("--quick", action="store_true", help="batch 8, ctx 512, blocks 16,64, 10 iters")
    p.add_argument("--verbose", action="store_true", help="tracebacks in error rows")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: smoke run of the CPU-capable providers (Triton interpreter, FlexAttention)")
    args = p.parse_args(argv)
    if args.quick:  # smaller defaults; options given explicitly still win
        for name, value in (("batch", 8), ("context", 512), ("iters", 10), ("warmup", 2), ("block_sizes", "16,64")):
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
        args.query_len = min(args.query_len, 64, args.context)
    return args


def start_device(args, w, torch):
    """(peak TB/s or None, timer); the device is logged and emitted as the run's first JSON line."""
    if args.device == "cuda":
        peak = peak_bandwidth_tb_s()
        props = torch.cuda.get_device_properties(0)
        gpu = props.name
        log(f"{gpu}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size} B, peak {peak or '?'} TB/s; "
            f"torch {torch.__version__}; workload {w.label()}")
        timer = ColdL2Timer(args.iters, args.warmup)
    else:
        peak, gpu = None, "cpu"
        log(f"CPU smoke run; torch {torch.__version__}; workload {w.label()}")
        timer = WallTimer(args.iters, args.warmup)
    emit({"event": "start", "device": gpu, "peak_tb_s": peak, "workload": w.label(), "torch": torch.__version__,
          "timing": timer.mode})
    return peak, timer


def available_adapters(backends: str) -> tuple[list, list[dict]]:
    """(the adapters that can run here, one "unavailable" row for each that cannot)."""
    from attnsel.attention.kernels import adapters_for

    adapters, unavailable = [], []
    for backend in [b.strip().upper() for b in backends.split(",") if b.strip()]:
        for adapter in adapters_for(backend):
            t0 = time.perf_counter()
            reason = adapter.availability()
            if reason:
                row = {"backend": backend, "adapter": adapter.name, "block_size": "-", "status": "unavailable",
                       "reason": reason}
                unavailable.append(row)
                emit(row)
                log(f"{backend}/{adapter.name}: unavailable: {reason}")
                continue
            log(f"{backend}/{adapter.name}: available ({time.perf_counter() - t0:.1f} s to check)")
            adapters.append(adapter)
    return adapters, unavailable


def run_block_sizes(adapters, w, timer, peak, args, torch) -> list[dict]:
    """Every adapter (and Triton variant) at every block size, each row emitted and logged."""
    from attnsel.attention.kernels.paged import make_paged_batch, reference_attention

    rows: list[dict] = []
    for block_size in [int(x) for x in args.block_sizes.split(",")]:
        batch = make_paged_batch(w, block_size, device=args.device, seed=0, ragged=not args.uniform)
        ref = reference_attention(batch)
        for adapter in adapters:
            variants = (
                triton_variants(args.triton_configs, block_size)
                if adapter.name == "attnsel-triton" else [("default", adapter)]
            )
            for label, variant_adapter in variants:
                row = run_row(variant_adapter, label, w, block_size, batch, ref, timer, peak, args)
                rows.append(row)
                emit(row)
                log_row(row, block_size, adapter.name, label)
        del batch, ref
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return rows


def log_row(row: dict, block_size: int, adapter_name: str, label: str) -> None:
    if row.get("status") in ("ok", "wrong"):
        log(f"  block {block_size:>3} {adapter_name:22} {row['ms']:.4f} ms {row['tb_per_s']:.2f} TB/s "
            f"err {row['rel_err']:.1e} [{label}]")
    else:
        log(f"  block {block_size:>3} {adapter_name:22} {row['status']}: {row.get('reason') or row.get('error')}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        # Triton fixes interpreter mode at its first import (see attention/kernels/_triton_kernels.py).
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")
    _bootstrap_attnsel()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        log("kernel_check needs a CUDA GPU (or --device cpu for a smoke run)")
        return 3
    from attnsel.attention.kernels.paged import Workload

    hq, hkv = (int(x) for x in args.heads.split("/"))
    w = Workload(args.kind, args.batch, args.context, 1 if args.kind == "decode" else args.query_len,
                 hq, hkv, args.head_size, args.dtype)
    peak, timer = start_device(args, w, torch)
    adapters, unavailable = available_adapters(args.backends)
    rows = run_block_sizes(adapters, w, timer, peak, args, torch)
    print_table(unavailable + rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
