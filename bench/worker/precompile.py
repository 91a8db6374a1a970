"""After "go", before its first row: compile the Triton kernels every planned row will need, in parallel
(docs/tune-performance.md, change 10).

Cold, vLLM's TRITON_ATTN compiles its unified-attention kernels one by one, each inside the first
row that needs it (~50 s of the H100 cold sweep's 171 s). If the backend's preferred adapter says
`precompiles_triton` (attention/kernels/base.py, TritonPrecompilingAdapter), the worker first runs
each planned row's `prepare()` once inside the toolkit's `triton_compile_only(threads)` block
(attention/kernels/triton_precompile.py: every Triton launch only compiles, on a pool of
MAX_THREADS threads), with adapter instances of its own, and frees each batch. Then
the rows run exactly as before: same adapters, same first call, same timing; their kernels are
found compiled (Triton's own cache, under the key the launch computes).

Best effort: a row whose batch or prepare() fails here is recorded and compiles at its first call as
before; a failed compile is recorded likewise. `ATTNSEL_TUNE_PRECOMPILE=0` turns the pass off.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from attnsel.bench.plan import WorkloadSpec
from attnsel.bench.worker.prebuild import error_text

if TYPE_CHECKING:
    from attnsel.bench.worker.items import ItemRunner
from attnsel.probe.cpus import usable_cpu_count

PRECOMPILE_ENV = "ATTNSEL_TUNE_PRECOMPILE"
# No new row is started in the pass after this many seconds (compiles already submitted finish): the
# parent waits for the first row's "start" at most its item timeout (180 s by default).
SUBMIT_BUDGET_S = 60.0
# Two compile threads, not one per core. Triton's front end holds the GIL, so more threads gain little
# (CPU: x1.5-1.65 with 2 threads; H200, 16 threads: 35 kernels in 32.9 s against 51.3 s serially, x1.56)
# while each one takes a core from FlashInfer's JIT pre-build, which runs at nice 10 in the worker
# waiting two backends ahead: with 16 threads that build took 148 s instead of 95 s and its last 47 s
# were exposed at FLASHINFER's turn (cold sweep 166 s against 139 s without the pass; same machine,
# docs/tune-performance.md change 10).
MAX_THREADS = 2


def precompile_enabled() -> bool:
    return os.environ.get(PRECOMPILE_ENV, "1") != "0"


def precompile_rows(runner: ItemRunner, items: list[dict], *, threads: int | None = None,
                    budget_s: float = SUBMIT_BUDGET_S) -> dict | None:
    """The pass for `runner`'s backend (bench/worker/items.ItemRunner) over the job's items; its
    record, or None when nothing is to be done (turned off, no adapter that asks for it, a toolkit
    without the compile-only block)."""
    if not precompile_enabled() or not items or os.environ.get("TRITON_INTERPRET") == "1":
        return None  # (Triton's interpreter, CPU checks: kernels run as Python, nothing is compiled)
    toolkit = runner.toolkit
    open_block = getattr(toolkit, "triton_compile_only", None)
    adapters = runner.adapters()
    if open_block is None or not any(getattr(a, "precompiles_triton", False) for a in adapters):
        return None
    threads = threads or min(MAX_THREADS, usable_cpu_count())
    started = time.perf_counter()
    record: dict[str, Any] = {"threads": threads, "budget_s": budget_s, "rows": 0, "rows_skipped": 0, "row_errors": [], "error": None}
    try:
        own = {a.name: a for a in toolkit.adapters_for(runner.backend)}  # the rows' adapters keep their state
        with open_block(threads) as block:
            for item in items:
                if time.perf_counter() - started > budget_s:
                    record["rows_skipped"] += 1
                    continue
                _compile_row(runner, own, item, record)
        record.update(block.report.to_dict())
    except Exception as exc:  # noqa: BLE001 -- recorded; the rows compile at their first call as before
        record["error"] = error_text(exc)
    record["seconds"] = round(time.perf_counter() - started, 3)
    record["note"] = precompile_note(record)
    return record


def _compile_row(runner: ItemRunner, own: dict, item: dict, record: dict) -> None:
    """prepare() of one planned row with Triton launches compiling only; its batch freed after."""
    spec = WorkloadSpec.from_dict(item["workload"])
    block_size = int(item["block_size"])
    picked = runner.usable_adapter(spec, block_size)
    if picked is None or not getattr(picked[0], "precompiles_triton", False) or picked[0].name not in own:
        return  # unsupported / unavailable rows say so themselves; another provider compiles as usual
    adapter, workload = own[picked[0].name], picked[1]
    toolkit = runner.toolkit
    try:
        batch = toolkit.make_batch(workload, block_size, int(runner.options.get("seed", 0)))
        adapter.prepare(batch)
        record["rows"] += 1
    except Exception as exc:  # noqa: BLE001 -- the row meets it again and says so
        record["row_errors"].append(f"{spec.label()} block {block_size}: {error_text(exc)}"[:300])
    finally:
        try:
            toolkit.release()
        except Exception:  # noqa: BLE001
            pass


def precompile_note(record: dict) -> str:
    """The line each row of the backend carries about the pass."""
    if record.get("error"):
        return f"Triton pre-compile at go failed ({record['error']}); kernels compiled at first call as usual"
    text = (f"Triton kernels pre-compiled in parallel at go: {record.get('kernels', 0)} kernels in "
            f"{record.get('seconds', 0):.1f} s ({record.get('threads')} threads, {record.get('rows', 0)} rows)")
    failed = int(record.get("error_count") or 0) + len(record.get("row_errors") or [])
    if failed:
        first = (record.get("errors") or record.get("row_errors") or ["?"])[0]
        text += f"; {failed} failed (first: {first}), compiled at first call as usual"
    if record.get("rows_skipped"):
        text += f"; {record['rows_skipped']} rows left to their first call (pass over {record.get('budget_s', SUBMIT_BUDGET_S):.0f} s)"
    if record.get("autotuned_skipped"):
        text += f"; {record['autotuned_skipped']} autotuned launches left to their first call"
    return text
