"""Rendering a tune document (recorded rows, no GPU): the ranking, one line per distinct failure,
the disqualified config and the ready-to-paste vLLM flags."""

import importlib.util
import io
import json
from pathlib import Path

from rich.console import Console

from attnsel.bench.plan import WorkloadSpec, make_shape
from attnsel.bench.plan import build as P
from attnsel.bench.sweep import SweepOptions, skipped_rows
from attnsel.bench.tune import recommend as REC
from attnsel.bench.tune.document import build_document
from attnsel.reports.tune import text as tune_report

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
_spec = importlib.util.spec_from_file_location("tune_fake_rules_report", FIXTURES / "fake_rules.py")
fake_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_rules)


def _rows(plan):
    data = json.loads((FIXTURES / "recorded_h200_decode.json").read_text())
    rows = []
    for d in data["rows"]:
        m = d["median_ms"]
        rows.append({"key": f"{d['backend']}|{d['block_size']}", "backend": d["backend"], "block_size": d["block_size"],
                     "kernel_block_size": d["block_size"], "workload_label": d["label"], "kind": "decode",
                     "status": "ok", "timing": {"n": 100, "median_ms": m, "p20_ms": m * 0.99, "p80_ms": m * 1.01,
                                                "min_ms": m, "max_ms": m, "mean_ms": m}})
    for bs in (16, 32):
        rows.append({"key": f"TRITON_ATTN|{bs}", "backend": "TRITON_ATTN", "block_size": bs, "kind": "decode",
                     "workload_label": "decode b=64 ctx=4096", "status": "oom", "error": "CUDA out of memory"})
    rows.append({"key": "FLASHINFER|32", "backend": "FLASHINFER", "block_size": 32, "kind": "decode",
                 "workload_label": "decode b=64 ctx=4096", "status": "wrong", "error": "relative error 0.3"})
    return rows + skipped_rows(plan, SweepOptions())


def test_rendered_results_show_flags_failures_and_disqualified_configs():
    shape = make_shape(128, 32, 8, "bf16")
    plan = P.build_plan(shape, (9, 0), block_sizes=[8, 16, 32, 64, 128], kinds=["decode"], grid="quick",
                        verdict=fake_rules.verdict, default_choice=fake_rules.default_choice)
    plan = P.Plan(**{**plan.__dict__, "workloads": (WorkloadSpec("decode", 64, 4096),)})
    doc = build_document(plan, SweepOptions(), _rows(plan), REC.DEFAULT_WEIGHTS, device={"name": "NVIDIA H200"},
                         gpu_env={"name": "NVIDIA H200", "peak_memory_bandwidth_bytes_per_s": 4.81e12},
                         clocks={}, worker_info={})
    buf = io.StringIO()
    tune_report.render_results(doc, Console(file=buf, width=200, no_color=True))
    text = buf.getvalue()
    assert "vLLM flags: --attention-backend FLASHINFER --block-size 64" in text
    assert "`attnsel verify` checks it in vLLM's own engine" in text  # flags come from kernels alone
    assert text.count("CUDA out of memory") == 1  # two block sizes, one line
    assert "disqualified FLASHINFER --block-size 32" in text
    assert "skipped (vLLM would refuse): FLASH_ATTN --block-size 8: block_size not supported" in text
    assert json.loads(json.dumps(doc.to_dict()))["schema"] == "attnsel-tune/1"  # the document is plain JSON


def test_stand_in_providers_are_called_out_only_where_vllm_runs_another_kernel():
    from attnsel.bench.tune.document import stand_in_warnings

    rows = [{"backend": "FLASH_ATTN", "adapter": "fa4-cute", "status": "ok"},
            {"backend": "TRITON_ATTN", "adapter": "attnsel-triton", "status": "ok"}]
    hopper = stand_in_warnings(rows, (9, 0))
    assert any("FlashAttention 4" in w for w in hopper) and any("attnsel's own Triton" in w for w in hopper)
    # on Blackwell vLLM itself runs FA4 (docs/vllm-rules.md §3c), so only the Triton stand-in is worth saying
    assert [w for w in stand_in_warnings(rows, (10, 0)) if "FlashAttention 4" in w] == []
    assert stand_in_warnings([{"backend": "TRITON_ATTN", "adapter": "vllm-triton", "status": "ok"}], (9, 0)) == []


def test_the_timing_line_says_how_the_rows_were_kept_cold():
    from attnsel.bench.tune import ResultRow
    from attnsel.reports.tune.text import timing_method

    rows = [{"backend": "FLASH_ATTN", "status": "ok", "launch": "graph", "timing": {"timer": "cupti"}},
            {"backend": "FLASH_ATTN", "status": "ok", "launch": "eager", "timing": {"timer": "cupti"}},
            {"backend": "FLEX_ATTENTION", "status": "ok", "launch": "eager", "timing": {"timer": "cupti"}}]
    rows = [ResultRow.from_dict(row) for row in rows]
    line = timing_method({"launch": "vllm", "cold_l2": True}, rows)
    assert "as vLLM launches them" in line and "(FLASH_ATTN decode)" in line and "CUPTI" in line
    assert "2 x L2 flushed" in line
    assert "hot" in timing_method({"launch": "vllm", "cold_l2": False}, rows)
    assert "--cuda-graph" in timing_method({"launch": "graph"}, rows)
    # results written before launch modes existed ("mode": "events" / "graph") still read right
    assert "--eager" in timing_method({"mode": "events"}, [])


def test_older_tune_results_without_advised_flags_still_say_what_they_advised():
    # tune.json files recorded before `advised_flags` was written (H100, 2026-11-25): flags were
    # advised for verdict "faster" only; report and verify read them through one function
    from pathlib import Path

    from attnsel.bench.tune import advised_flags

    fixtures = Path(__file__).parent / "fixtures" / "tune"
    fp8 = json.loads((fixtures / "h100_fp8" / "tune.json").read_text())["recommendation"]["overall"]
    kept = json.loads((fixtures / "h100_vllm024" / "warm" / "tune.json").read_text())["recommendation"]["overall"]
    assert "advised_flags" not in fp8 and fp8["verdict"] == "faster"
    assert advised_flags(fp8) == "--attention-backend FLASH_ATTN --block-size 128"
    assert kept["verdict"] == "small" and advised_flags(kept) is None
    assert advised_flags({"verdict": "faster", "flags": "--block-size 64"}) == "--block-size 64"  # verify's summary
