"""First-use items of issue 33: what one command suggests, the next one accepts without a warning."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile import invoke  # noqa: E402


@pytest.mark.parametrize("model,gpu", [("llama-3.1-8b", "L4"), ("llama-3.1-8b", "A10G"), ("qwen3-8b", "L4")])
def test_explains_suggested_length_passes_preflight_without_the_edge_warning(model, gpu):
    result, _ = invoke(["explain", "--model", model, "--gpu", gpu, "--json"])
    fixes = json.loads(result.stdout)["memory"]["fixes"]
    length = next(int(m.group(1)) for f in fixes if (m := re.match(r"--max-model-len (\d+) ", f)))
    done, _ = invoke(["preflight", "--model", model, "--gpu", gpu, "--max-model-len", str(length), "--json"])
    check = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "memory")
    assert done.exit_code == 0 and check["status"] == "pass", check


@pytest.mark.parametrize("rows", [0, 1])
def test_ctrl_c_offers_resume_only_where_something_was_kept(tmp_path, monkeypatch, rows):
    import attnsel.bench.tune.run as tune_run

    out = tmp_path / "sweep"

    def interrupted(req, out_dir, **kwargs):  # the sweep stops at Ctrl-C after `rows` whole rows
        if rows:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "results.jsonl").write_text('{"key": "k"}\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_run, "run_tune", interrupted)
    result, _ = invoke(["tune", "--model", "llama-3.1-8b", "--output", str(out)])
    assert result.exit_code == 130, result.stderr
    offered = "--resume --output" in result.stderr
    assert offered == bool(rows) and offered == out.exists(), result.stderr


def test_explain_help_holds_every_flag_name_whole_at_80_columns():
    import typer.main

    from attnsel.cli.app import app

    command = typer.main.get_command(app).commands["explain"]
    names = [opt for p in command.params if not p.hidden for opt in (*p.opts, *p.secondary_opts)]
    result, _ = invoke(["explain", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert "…" not in result.stdout and max(map(len, result.stdout.splitlines())) <= 80
    missing = [n for n in names if n not in result.stdout]
    assert not missing, missing


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_reports_per_workload_gains_say_they_are_kernel_level(fmt):
    run = Path(__file__).parent / "fixtures" / "report" / "h200_llama8b_synthetic"
    result, _ = invoke(["report", str(run), "--format", fmt])
    assert result.exit_code == 0
    section = result.stdout.split("Per workload kind", 1)[1][:1500]
    assert "kernel-level" in section and "attnsel verify" in section
