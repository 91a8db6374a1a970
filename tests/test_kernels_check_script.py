"""bench/tools/kernel_check.py as the lead runs it, here as a CPU smoke run (Triton interpreter): one JSON
line per row, a failing or missing provider reported as a row instead of stopping the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "tools" / "kernel_check.py"


def test_cpu_smoke_run_emits_one_json_row_per_provider_and_block_size():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--batch", "2", "--context", "40",
         "--heads", "4/2", "--head-size", "32", "--iters", "2", "--warmup", "1", "--block-sizes", "16,32",
         "--backends", "TRITON_ATTN,FLASHINFER"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows[0]["event"] == "start" and rows[0]["workload"] == "decode b2 ctx40 h4/2 d32 bfloat16"
    ours = [r for r in rows if r.get("adapter") == "attnsel-triton"]
    assert [r["block_size"] for r in ours] == [16, 32]
    for r in ours:
        assert r["status"] == "ok" and r["correct"] is True and r["rel_err"] < 1e-2
        assert r["provider"].startswith("attnsel triton (triton ")
        assert r["ms"] > 0 and r["n"] == 2
    flashinfer = [r for r in rows if r.get("backend") == "FLASHINFER"]
    assert flashinfer and all(r["status"] in ("unavailable", "unsupported") for r in flashinfer)
    assert "variant / reason" in proc.stderr  # the closing table


def test_without_a_gpu_the_default_run_says_so_and_exits_3():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert "needs a CUDA GPU" in proc.stderr
