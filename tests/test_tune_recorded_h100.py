"""Replays what an H100 with vLLM 0.24.0 installed recorded (tests/fixtures/tune/h100_vllm024/, from
`bash bench/tools/gpu_session.sh sweeps|checks`): the recommendation recomputed from the recorded
rows is the one the run printed, and the report of that run hands a user no flags for a margin
below --min-gain. (What the run itself showed -- vLLM's own classes, CUDA graphs, CUPTI, the timer
against FlashInfer's, the wall times docs/tune-performance.md quotes -- is evidence:
`python -m attnsel.bench.tools.evidence`.)"""

import json

from recordings import recorded

from attnsel.bench.tune import recommend as REC

WARM = recorded("tune", "h100_vllm024", "warm", "tune.json")


def _doc():
    return json.loads(WARM.read_text())


def _labels(doc):
    labels = {}
    for w in doc["plan"]["workloads"]:
        labels.setdefault(w["kind"], []).append(w["label"])
    return labels


def test_recomputed_recommendation_matches_what_the_run_printed():
    doc = _doc()
    default = doc["recommendation"]["vllm_default"]
    rec = REC.recommend(doc["rows"], workload_labels=_labels(doc),
                        vllm_default=(default["backend"], default["block_size"]),
                        weights=doc["recommendation"]["overall"]["weights"],
                        min_gain=doc["recommendation"]["overall"]["min_gain_pct"] / 100).to_dict()
    for scope in ("decode", "prefill", "mixed"):
        got, printed = rec["workloads"][scope], doc["recommendation"]["workloads"][scope]
        assert (got["best"]["backend"], got["best"]["block_size"]) == (printed["best"]["backend"], printed["best"]["block_size"])
        assert got["verdict"] == printed["verdict"]
    assert rec["overall"]["verdict"] == doc["recommendation"]["overall"]["verdict"]


def test_a_margin_below_min_gain_prints_no_flags_to_paste():
    # overall +2.5% on the H100: above noise, below --min-gain; the line a user copies must not
    # hand them flags (it did: "vLLM flags: --attention-backend FLASH_ATTN --block-size 128")
    import io

    from rich.console import Console

    from attnsel.reports.tune import text as tune_report

    doc = _doc()
    assert doc["recommendation"]["overall"]["verdict"] == "small"
    buf = io.StringIO()
    tune_report.render_recommendation(doc["recommendation"], Console(file=buf, width=300, no_color=True))
    flags_line = next(line for line in buf.getvalue().splitlines() if "vLLM flags:" in line)
    assert flags_line.strip().startswith("vLLM flags: (none: keep vLLM's default)"), flags_line
