"""What each report format promises its reader: Markdown that pastes into a GitHub comment, CSV
a spreadsheet opens, JSON with every row, HTML that needs no network. Expectations come from the
fixture files themselves (results.jsonl / tune.json / explain --json), not from the renderers."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from attnsel.bench.sweep import results as R
from attnsel.cli.report_cmd import load_report
from attnsel.reports.tune import csv_out, html, html_charts, load_inputs, markdown
from attnsel.reports.tune import frames as F
from attnsel.reports.tune.frames import report_dict

FIXTURES = Path(__file__).parent / "fixtures" / "report"
TUNE_DIR = FIXTURES / "h200_llama8b_synthetic"
EXPLAIN_ERROR = FIXTURES / "explain_llama8b_t4_block8_fp8.json"
EXPLAIN_OK = FIXTURES / "explain_llama8b_h200.json"


def _document() -> dict:
    return json.loads((TUNE_DIR / "tune.json").read_text())


def _ok_rows() -> list[dict]:
    return [r for r in _document()["rows"] if r["status"] == R.STATUS_OK]


def _markdown_tables(text: str) -> list[list[str]]:
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _cells(line: str) -> list[str]:
    return re.split(r"(?<!\\)\|", line.strip())[1:-1]


# --- Markdown ----------------------------------------------------------------------------------


def test_markdown_opens_with_the_summary_and_the_recommended_flags():
    text = markdown.render(load_inputs([TUNE_DIR]))
    overall = _document()["recommendation"]["overall"]
    summary = text.index("## Summary")
    assert summary < text.index("## Workloads")
    head = text[summary:text.index("## Workloads")]
    assert "NVIDIA H200" in head and "9.0" in head
    assert f"`{overall['flags']}`" in head
    assert f"{overall['margin_pct']:+.1f}%" in head


def test_markdown_tables_are_well_formed_for_github():
    text = markdown.render(load_inputs([TUNE_DIR, EXPLAIN_ERROR]))
    tables = _markdown_tables(text)
    assert len(tables) >= 5
    for table in tables:
        widths = {len(_cells(line)) for line in table}
        assert len(widths) == 1, table[:3]  # same column count on every line, pipes in text escaped
        assert re.fullmatch(r"\|(:?-+:?\|)+", table[1]), table[1]
    # <details> blocks need a blank line before the table for GitHub to render it
    assert "</summary>\n\n|" in text


def test_markdown_marks_the_fastest_block_size_of_each_shape_in_bold():
    text = markdown.render(load_inputs([TUNE_DIR]))
    rows = _ok_rows()
    for label in {r["workload_label"] for r in rows}:
        fastest = min((r for r in rows if r["workload_label"] == label), key=lambda r: r["timing"]["median_ms"])
        section = text[text.index(f"<b>{label}</b>"):]
        section = section[:section.index("</details>")]
        bold_line = next(line for line in section.splitlines() if "**" in line)
        assert bold_line.startswith(f"| {fastest['backend']} |")
        assert f"**{fastest['timing']['median_ms']:.4f}**" in bold_line


def test_markdown_shows_vllms_reason_for_each_skipped_config_and_each_failure():
    text = markdown.render(load_inputs([TUNE_DIR]))
    skipped = [c for c in _document()["plan"]["configs"] if c["status"] == "skipped"]
    assert skipped
    for config in skipped:
        assert f"| {config['backend']} | {config['block_size']} | {'; '.join(config['reasons'])} |" in text
    failed = [r for r in _document()["rows"] if r["status"] in R.FAILED_STATUSES]
    for row in failed:
        assert f"| {row['backend']} | {row['block_size']} | {row['workload_label']} | {row['status']} |" in text


def test_markdown_of_an_explain_answer_keeps_vllms_error_verbatim():
    doc = json.loads(EXPLAIN_ERROR.read_text())
    text = markdown.render(load_inputs([EXPLAIN_ERROR]))
    assert doc["error"] in text.replace("\\|", "|")
    for backend in doc["backends"]:
        assert "; ".join(backend["reasons"]) in text


# --- CSV ---------------------------------------------------------------------------------------


def test_csv_has_one_line_per_row_with_plain_numbers():
    text = csv_out.render(load_inputs([TUNE_DIR]))
    lines = list(csv.DictReader(io.StringIO(text)))
    rows = _document()["rows"]
    assert len(lines) == len(rows)
    by_key = {(r["backend"], str(r["block_size"]), r["workload_label"]): r for r in rows}
    for line in lines:
        row = by_key[(line["backend"], line["block_size"], line["workload"])]
        assert line["status"] == row["status"]
        if row["status"] == R.STATUS_OK:
            assert abs(float(line["median_ms"]) - row["timing"]["median_ms"]) <= 1e-5 * row["timing"]["median_ms"]
            assert abs(float(line["pct_of_peak"]) - row["pct_of_peak_bandwidth"]) < 1e-3
        else:
            assert line["median_ms"] == ""


def test_csv_of_explain_answers_lists_each_backend_with_its_reasons():
    text = csv_out.render(load_inputs([EXPLAIN_ERROR, EXPLAIN_OK]))
    lines = list(csv.DictReader(io.StringIO(text)))
    expected = sum(len(json.loads(p.read_text())["backends"]) for p in (EXPLAIN_ERROR, EXPLAIN_OK))
    assert len(lines) == expected
    t4 = [line for line in lines if line["capability"] == "7.5"]
    assert {line["valid"] for line in t4} == {"False"}


# --- JSON --------------------------------------------------------------------------------------


def test_json_report_has_the_summary_and_every_row():
    doc = report_dict(load_inputs([TUNE_DIR, EXPLAIN_OK]))
    json.dumps(doc)  # serialisable as is
    assert len(doc["tune"]["rows"]) == len(_document()["rows"])
    assert doc["tune"]["summary"]["vllm_flags"] == _document()["recommendation"]["overall"]["flags"]
    assert doc["explain"][0]["summary"]["selected"] == json.loads(EXPLAIN_OK.read_text())["selected"]


# --- HTML --------------------------------------------------------------------------------------


def test_html_is_self_contained():
    page = html.render(load_inputs([TUNE_DIR, EXPLAIN_ERROR]))
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "<link" not in page and "@import" not in page
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}  # the SVG namespace is a name, never fetched


def test_html_draws_a_latency_chart_per_shape_and_the_bandwidth_chart():
    page = html.render(load_inputs([TUNE_DIR]))
    shapes = {r["workload_label"] for r in _ok_rows()}
    charts = re.findall(r'aria-label="([^"]+): median latency vs block size"', page)
    assert set(charts) == shapes
    assert 'aria-label="decode bandwidth as percent of peak"' in page
    # every decode shape's best % of peak is labelled on the bar chart
    decode = [r for r in _ok_rows() if r["kind"] == "decode"]
    for label in {r["workload_label"] for r in decode}:
        best = max((r for r in decode if r["workload_label"] == label), key=lambda r: r["pct_of_peak_bandwidth"])
        assert f"{best['pct_of_peak_bandwidth']:.1f}% · {best['backend']} bs {best['block_size']}" in page


def test_html_explain_matrix_marks_each_reason_vllm_gives():
    doc = json.loads(EXPLAIN_ERROR.read_text())
    page = html.render(load_inputs([EXPLAIN_ERROR]))
    matrix = page[page.index('<table class="matrix">'):]
    matrix = matrix[:matrix.index("</table>")]
    reasons = list(dict.fromkeys(r for b in doc["backends"] for r in b["reasons"]))
    header = re.findall(r'<th class="reason">([^<]+)</th>', matrix)
    assert header == reasons
    for backend in doc["backends"]:
        row = re.search(rf"<tr><th>{backend['name']}</th>(.*?)</tr>", matrix).group(1)
        marks = re.findall(r'<td class="(hit|empty)">', row)[1:]  # the first cell is the verdict
        assert [m == "hit" for m in marks] == [r in backend["reasons"] for r in reasons]


def test_html_escapes_text_from_the_files(tmp_path):
    doc = json.loads(EXPLAIN_ERROR.read_text())
    doc["error"] = "<script>alert(1)</script> & more"
    path = tmp_path / "explain.json"
    path.write_text(json.dumps(doc))
    page = html.render(load_inputs([path]))
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_a_cut_short_sweep_never_claims_the_default_is_fine(tmp_path):
    """Without tune.json vLLM's default is unknown: the report names the fastest config and says
    there is no baseline, rather than 'no flags needed'."""
    (tmp_path / R.RESULTS_FILE).write_text((TUNE_DIR / R.RESULTS_FILE).read_text())
    text = markdown.render(load_report([tmp_path]))
    assert "Partial results" in text
    flags_line = next(line for line in text.splitlines() if line.startswith("| vLLM flags |"))
    assert "not measured" in flags_line and "none needed" not in flags_line
    page = html.render(load_report([tmp_path]))
    assert "no baseline" in page and "no flags needed" not in page


def test_html_switches_to_a_log_axis_when_one_backend_is_ten_times_slower():
    # the real H200 sweep: FlexAttention's decode is 20-50x slower than the others
    real = Path(__file__).parent / "fixtures" / "tune" / "h200_llama8b_default"
    rows = [r for r in json.loads((real / "tune.json").read_text())["rows"] if r["status"] == R.STATUS_OK]
    page = html.render(load_inputs([real]))
    spans = {}
    for r in rows:
        t = r["timing"]
        lo, hi = spans.get(r["workload_label"], (float("inf"), 0.0))
        spans[r["workload_label"]] = (min(lo, t["p20_ms"]), max(hi, t["p80_ms"]))
    wide = {label for label, (lo, hi) in spans.items() if hi / lo > html_charts.LOG_SCALE_RATIO}
    assert wide, "the recorded sweep has shapes spanning more than 10x"
    svgs = re.findall(r'aria-label="([^"]+): median latency vs block size".*?</svg>', page, flags=re.S)
    charts = dict(zip(svgs, re.findall(r'aria-label="[^"]+: median latency vs block size"(.*?)</svg>', page, flags=re.S)))
    for label, body in charts.items():
        assert ("log scale" in body) == (label in wide)


def test_markdown_and_html_agree_on_which_verdicts_keep_vllms_default():
    # "small" (below --min-gain) and "stand-in" (another kernel than vLLM's) keep the default just
    # as "noisy" does: the HTML card once offered no flags line at all for them
    from attnsel.bench.tune import Verdict

    tune_fixtures = Path(__file__).parent / "fixtures" / "tune"
    for run in ("h100_vllm024/warm", "h100_vllm024/standin", "h100_mla_tp8", "h100_mla_tp1"):
        verdict = Verdict(json.loads((tune_fixtures / run / "tune.json").read_text())["recommendation"]["overall"]["verdict"])
        data = load_report([str(tune_fixtures / run)])
        assert verdict.keeps_default and not verdict.advises_flags
        assert "none needed (keep vLLM's default)" in markdown.render(data), run
        assert "no flags needed: keep vLLM's default" in html.render(data), run
    advised = load_report([str(tune_fixtures / "h100_fp8")])
    assert "keep vLLM" not in html.render(advised) and "--attention-backend FLASH_ATTN --block-size 128" in html.render(advised)


def test_the_html_card_heads_with_the_advice_not_with_tunes_fastest_pair():
    """Where tune keeps vLLM's default, the card's headline is that default; the fastest pair measured is a
    figure under it, labelled kernel-level (it once stood above "no flags needed" as if it were the advice)."""
    run = Path(__file__).parent / "fixtures" / "tune" / "h100_vllm034_dense"
    doc = json.loads((run / "tune.json").read_text())["recommendation"]
    default = f"{doc['vllm_default']['backend']} --block-size {doc['vllm_default']['block_size']}"
    fastest = f"{doc['overall']['best']['backend']} --block-size {doc['overall']['best']['block_size']}"
    assert fastest != default
    page = html.render(load_report([str(run)]))
    card = page.split("Recommendation (all workloads, weighted)</h3>", 1)[1].split("</div></div>", 1)[0]
    headline = card.split('<div class="big">', 1)[1].split("</div>", 1)[0]
    assert headline == f"keep vLLM&#x27;s default: {default}" or headline == f"keep vLLM's default: {default}"
    assert f"fastest measured: {fastest}" in card and "(kernel-level)" in card


def test_every_verdict_gets_the_same_flags_advice_in_markdown_and_html():
    from attnsel.bench.tune import Verdict

    data = load_report([str(TUNE_DIR)])
    for verdict in Verdict:
        summary = F.tune_summary(data.tune)
        advised = "--attention-backend FLASHINFER --block-size 64" if verdict.advises_flags else None
        summary["overall"] = dict(summary["overall"], verdict=verdict.value, flags=advised)
        summary["vllm_flags"] = advised
        md, page = markdown._flags_text(summary), html._decision_html(summary["overall"])
        assert ("keep vLLM's default" in md) == ("keep vLLM's default" in page) == verdict.keeps_default, verdict
        assert (advised is not None and advised in md and advised in page) == verdict.advises_flags, verdict
