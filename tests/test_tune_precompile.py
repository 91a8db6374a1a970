"""Triton kernels compiled in parallel at "go" (docs/tune-performance.md, change 10).

Two halves: the compile-only block against the installed Triton (a real kernel compiled for an
sm_90 target without a GPU: ptxas ships in the triton wheel), and the worker's pass over the planned
rows through real worker processes with the fake toolkit (tests/fixtures/tune/fake_toolkit.py).
"""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.sweep import SweepOptions
from attnsel.bench.sweep.groups import run_backend_group
from attnsel.bench.tune.phases import backend_phases
from attnsel.probe.cpus import usable_cpu_count
from attnsel.reports.tune.text import phase_line

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
FAKE = f"{FIXTURES / 'fake_toolkit.py'}:FakeToolkit"
SHAPE = {"head_size": 128, "num_q_heads": 32, "num_kv_heads": 8, "dtype": "bfloat16", "kv_cache_dtype": "auto"}


# -- the compile-only block, real Triton ----------------------------------------------------------

def _triton():
    triton = pytest.importorskip("triton")
    pytest.importorskip("triton.runtime._async_compile")
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip("no ptxas in this triton wheel")
    return triton


@pytest.fixture
def cuda_target(monkeypatch, tmp_path):
    """Triton's driver answering an sm_90 target without a GPU, and an empty disk cache."""
    _triton()
    from triton.runtime.driver import driver

    from attnsel.bench.tools.triton_compile_speed import TargetOnlyDriver

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(driver, "_active", TargetOnlyDriver(90))  # restored after the test
    return tmp_path / "triton-cache"


def _kernels():
    spec = importlib.util.spec_from_file_location("attnsel_test_triton_kernels", FIXTURES.parent / "triton_small_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scale_rows, module.broken


def _launch(kernel, block):
    import torch

    x = torch.zeros(256, dtype=torch.float32)
    kernel[(1,)](x, x, 256, BLOCK=block)


def test_inside_the_block_launches_only_compile_in_parallel_into_the_kernels_own_cache(cuda_target):
    from attnsel.attention.kernels.triton_precompile import CompileOnly

    scale_rows, _ = _kernels()
    with CompileOnly(2, load=False) as block:
        for size in (16, 32, 64, 64):  # the repeated specialisation is compiled once
            _launch(scale_rows, size)  # a real launch would fail here: no GPU, no launcher
    report = block.report
    assert (report.kernels, report.compiled, report.errors) == (3, 3, [])
    kernel_cache = scale_rows.device_caches[0][0]
    assert len(kernel_cache) == 3
    assert all(type(k).__name__ == "CompiledKernel" for k in kernel_cache.values())  # finalised, not futures
    assert len(os.listdir(cuda_target)) == 3  # Triton's disk cache too

    # the key a later launch computes is the one compiled: a warmup call (the launch's own lookup
    # without the launch) finds it and compiles nothing more
    import torch

    x = torch.zeros(256, dtype=torch.float32)
    scale_rows.run(x, x, 256, BLOCK=32, grid=(1,), warmup=True)
    assert len(kernel_cache) == 3 and len(os.listdir(cuda_target)) == 3


def test_outside_the_block_a_launch_is_a_launch_again(cuda_target):
    from attnsel.attention.kernels.triton_precompile import (
        CompileOnly,
        compile_only_active,
    )

    scale_rows, _ = _kernels()
    with CompileOnly(1, load=False):
        assert compile_only_active()
        _launch(scale_rows, 16)
    assert not compile_only_active()
    with pytest.raises(Exception):  # noqa: B017 -- it tries to launch: the target-only driver has no launcher
        _launch(scale_rows, 16)


def test_a_kernel_that_does_not_compile_is_recorded_and_the_block_does_not_raise(cuda_target):
    from attnsel.attention.kernels.triton_precompile import CompileOnly

    scale_rows, broken = _kernels()
    with CompileOnly(2, load=False) as block:
        _launch(broken, 16)
        _launch(scale_rows, 16)
    assert block.report.kernels == 2 and block.report.compiled == 1
    assert len(block.report.errors) == 1 and "does not compile on purpose" in block.report.errors[0]
    assert len(scale_rows.device_caches[0][0]) == 1
    # the row that needs it fails at its first call as it did before: Triton 3.9 compiles it again,
    # Triton 3.8 (torch 2.14's) kept the failed compile in the kernel's cache and raises its error
    with pytest.raises(Exception, match="does not compile on purpose"):
        _launch(broken, 16)


# -- the worker's pass, real worker processes, fake adapters ----------------------------------------

def _items(block_sizes):
    specs = [WorkloadSpec("decode", 4, 1024), WorkloadSpec("prefill", 1, 2048, 2048)]
    return [{"key": f"FAKE|bs={bs}|{spec.label()}", "block_size": bs, "kernel_block_size": bs,
             "workload": spec.to_dict(), "check": True} for bs in block_sizes for spec in specs]


def _sweep(tmp_path, monkeypatch, scenario, precompile_env=None):
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    if precompile_env is not None:
        monkeypatch.setenv("ATTNSEL_TUNE_PRECOMPILE", precompile_env)
    options = SweepOptions(toolkit=FAKE, item_timeout_s=10.0, startup_timeout_s=20.0)
    rows = []
    outcome = run_backend_group("TRITON_ATTN", _items([16, 32, 64]), SHAPE, options, tmp_path / "w.log",
                                on_row=rows.append)
    return outcome, rows


def test_the_worker_compiles_every_planned_row_first_and_every_row_says_so(tmp_path, monkeypatch):
    outcome, rows = _sweep(tmp_path, monkeypatch, {"precompile": "ok"})
    record = outcome.workers[0]["precompile"]
    assert record["rows"] == 6 and record["kernels"] == 3 and record["error"] is None
    # two compile threads whatever the core count: more would only take cores from FlashInfer's
    # pre-build beside it (the H200 cold sweep: docs/tune-performance.md change 10)
    assert record["threads"] == min(2, usable_cpu_count())
    assert all(r["status"] == "ok" for r in rows) and len(rows) == 6
    assert all(record["note"] in r["notes"] for r in rows)
    assert record["note"].startswith("Triton kernels pre-compiled in parallel at go: 3 kernels in ")
    # the pass imported the library first; the first row still reports that import, as without the pass
    assert sum("library_import_s" in r for r in rows) == 1

    phases = backend_phases(outcome)
    assert phases["precompile_s"] == pytest.approx(record["seconds"], abs=1e-3)
    assert phases["precompile"]["kernels"] == 3
    line = phase_line({"total_s": 1.0, "probe_s": 0.0, "backends": {"TRITON_ATTN": phases}, "other_s": 0.0})
    assert f"precompile {phases['precompile_s']:.1f}" in line


def test_turned_off_or_not_asked_for_the_rows_run_as_before(tmp_path, monkeypatch):
    off, off_rows = _sweep(tmp_path, monkeypatch, {"precompile": "ok"}, precompile_env="0")
    plain, plain_rows = _sweep(tmp_path, monkeypatch, {})
    for outcome, rows in ((off, off_rows), (plain, plain_rows)):
        assert "precompile" not in outcome.workers[0]
        assert "precompile_s" not in backend_phases(outcome)
        assert all(r["status"] == "ok" for r in rows) and len(rows) == 6
        assert not any("pre-compile" in n for r in rows for n in r["notes"])


def test_a_failing_pass_is_recorded_and_the_rows_still_run(tmp_path, monkeypatch):
    outcome, rows = _sweep(tmp_path, monkeypatch, {"precompile": "raise"})
    record = outcome.workers[0]["precompile"]
    assert "AsyncCompileMode is missing" in record["error"]
    assert all(r["status"] == "ok" for r in rows) and len(rows) == 6
    assert all(any("pre-compile at go failed" in n for n in r["notes"]) for r in rows)


def test_the_pass_compiles_on_two_threads_on_a_machine_of_many_cores(monkeypatch):
    import contextlib
    from types import SimpleNamespace

    from attnsel.bench.worker import precompile as P

    asked = []

    @contextlib.contextmanager
    def block(threads):
        asked.append(threads)
        yield SimpleNamespace(report=SimpleNamespace(to_dict=lambda: {"threads": threads, "kernels": 0}))

    adapter = SimpleNamespace(name="vllm", precompiles_triton=True)
    toolkit = SimpleNamespace(triton_compile_only=block, adapters_for=lambda backend: [adapter])
    runner = SimpleNamespace(toolkit=toolkit, adapters=lambda: [adapter], backend="TRITON_ATTN",
                             usable_adapter=lambda spec, size: None, options={})
    monkeypatch.setattr(P, "usable_cpu_count", lambda: 16)
    item = {"workload": {"batch": 1, "context_len": 128, "query_len": 1, "kind": "decode"}, "block_size": 16}
    record = P.precompile_rows(runner, [item])
    assert asked == [2] and record["threads"] == 2  # not 16: see MAX_THREADS
    monkeypatch.setattr(P, "usable_cpu_count", lambda: 1)
    assert P.precompile_rows(runner, [item])["threads"] == 1
