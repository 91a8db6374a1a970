"""results.jsonl: written row by row so nothing measured is lost; `--resume` skips rows already
there (issue "attnsel tune", Isolation)."""

import json

from attnsel.bench.sweep import results as R


def _row(key, status="ok"):
    return {"key": key, "backend": "FLASHINFER", "block_size": 16, "status": status}


def test_each_row_is_on_disk_as_soon_as_it_is_written(tmp_path):
    path = tmp_path / "results.jsonl"
    writer = R.ResultsWriter(path)
    writer.write(_row("a"))
    # read back before close: a crash of the parent right now loses nothing
    assert [r["key"] for r in R.read_rows(path)] == ["a"]
    writer.close()


def test_a_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_row("a")) + "\n" + '{"key": "b", "stat')
    assert [r["key"] for r in R.read_rows(path)] == ["a"]


def test_resume_skips_done_rows_and_optionally_retries_failures():
    rows = [_row("a"), _row("b", "crashed"), _row("c", "timeout"), _row("c", "ok"), _row("d", "skipped")]
    assert R.keys_to_skip_on_resume(rows) == {"a", "b", "c", "d"}
    # the last row per key wins: c was re-measured successfully, b still failed
    assert R.keys_to_skip_on_resume(rows, retry_failed=True) == {"a", "c", "d"}


def test_row_key_names_everything_that_changes_a_measurement():
    k1 = R.row_key("FLASHINFER", 16, "decode b=1 ctx=4096", "bfloat16", "auto", "events-cold")
    k2 = R.row_key("FLASHINFER", 16, "decode b=1 ctx=4096", "bfloat16", "auto", "graph-cold")
    k3 = R.row_key("FLASHINFER", 32, "decode b=1 ctx=4096", "bfloat16", "auto", "events-cold")
    assert len({k1, k2, k3}) == 3
