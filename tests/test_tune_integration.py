"""The worker with the REAL kernel adapters (attention/kernels) on CPU: attnsel's Triton kernel
under TRITON_INTERPRET=1, checked against the fp32 reference through the same code path tune uses
on a GPU (only the timer and the device differ: tests/fixtures/tune/cpu_toolkit.py)."""

from pathlib import Path

import pytest

from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.sweep import SweepOptions
from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.groups import run_backend_group

pytest.importorskip("torch")
pytest.importorskip("triton")
FIXTURES = Path(__file__).parent / "fixtures" / "tune"


def test_real_triton_adapter_runs_checks_and_times_every_workload_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    shape = {"head_size": 32, "num_q_heads": 4, "num_kv_heads": 2, "dtype": "float32", "kv_cache_dtype": "auto"}
    workloads = [WorkloadSpec("decode", 2, 64), WorkloadSpec("prefill", 1, 48, 16), WorkloadSpec("mixed", 2, 64, 8)]
    items = [{"key": w.label(), "block_size": 16, "kernel_block_size": 16, "workload": w.to_dict(), "check": True}
             for w in workloads]
    rows = []
    options = SweepOptions(toolkit=f"{FIXTURES / 'cpu_toolkit.py'}:CpuKernelToolkit", item_timeout_s=120,
                           startup_timeout_s=120)
    run_backend_group("TRITON_ATTN", items, shape, options, tmp_path / "w.log", on_row=rows.append)
    assert [r["status"] for r in rows] == [R.STATUS_OK] * 3, [r.get("error") for r in rows]
    for r in rows:
        assert r["checked"] and r["rel_error"] < r["tolerance"]
        assert r["timing"]["n"] >= 10 and r["bytes_moved"] > 0
    assert rows[1]["tflops"] is not None and rows[0]["tflops"] is None  # TFLOP/s for prefill, not decode
