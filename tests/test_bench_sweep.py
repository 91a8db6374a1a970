"""A whole sweep with fake adapters in real worker processes: rows land in results.jsonl as they
arrive, vLLM-refused combinations are written as skipped, and `--resume` runs only what is missing."""

import importlib.util
import json
from pathlib import Path

from attnsel.bench.plan import build as P
from attnsel.bench.plan import make_shape
from attnsel.bench.sweep import SweepOptions, SweepProgress, run_sweep
from attnsel.bench.sweep import results as R

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
FAKE = f"{FIXTURES / 'fake_toolkit.py'}:FakeToolkit"
_spec = importlib.util.spec_from_file_location("tune_fake_rules_sweep", FIXTURES / "fake_rules.py")
fake_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_rules)


def _plan():
    shape = make_shape(128, 32, 8, "bf16")
    return P.build_plan(shape, (9, 0), backends=["FLASH_ATTN", "FLASHINFER"], block_sizes=[8, 16, 64],
                        kinds=["decode"], grid="quick", verdict=fake_rules.verdict,
                        default_choice=fake_rules.default_choice)


def test_sweep_writes_every_row_and_resume_runs_only_the_missing_ones(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.30"}, "FLASHINFER": {"*": "ok:0.20", "64": "abort"}}
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps(scenario))
    options = SweepOptions(toolkit=FAKE, item_timeout_s=10, startup_timeout_s=20)
    plan = _plan()
    started = []
    rows, infos = run_sweep(plan, options, tmp_path, progress=SweepProgress(on_start=started.append))

    by = {(r["backend"], r["block_size"], r["workload_label"]): r for r in rows}
    assert len(rows) == 2 * 3 * len(plan.workloads)  # one row per backend x block size x shape
    assert {r["status"] for (b, bs, _), r in by.items() if bs == 8} == {"skipped"}
    assert {r["status"] for (b, bs, _), r in by.items() if (b, bs) == ("FLASHINFER", 64)} == {"crashed"}
    assert all(r["status"] == "ok" for (b, bs, _), r in by.items() if bs == 16)
    assert infos["FLASH_ATTN"]["name"] == "Fake GPU"
    assert not any(i["block_size"] == 8 for i in started)  # refused combos never reach a worker
    on_disk = R.read_rows(tmp_path / R.RESULTS_FILE)
    assert len(on_disk) == len(rows)

    # resume with the crash fixed and --retry-failed: only the crashed rows run again
    monkeypatch.setenv("ATTNSEL_FAKE_TUNE_SCENARIO", json.dumps({**scenario, "FLASHINFER": {"*": "ok:0.2"}}))
    started.clear()
    rows2, _ = run_sweep(plan, options, tmp_path, resume=True, retry_failed=True,
                         progress=SweepProgress(on_start=started.append))
    assert {(i["block_size"]) for i in started} == {64}
    assert len(started) == len(plan.workloads)
    assert all(r["status"] == "ok" for r in rows2 if (r["backend"], r["block_size"]) == ("FLASHINFER", 64))
    assert len(rows2) == len(rows)
