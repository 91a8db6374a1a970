"""`attnsel explain --vllm-version all`: one GPU's verdict release by release, and which release made a
backend valid, changed the pick or changed the block size. Every row must be what
`attnsel explain --vllm-version <that release>` answers on its own."""

import json

import pytest
from typer.testing import CliRunner

from attnsel.attention.explain.history import (
    compare_releases,
    explain_for_release,
    release_history,
)
from attnsel.attention.selector import SelectionRequest
from attnsel.attention.versions import release_profiles
from attnsel.cli.app import app

RUNNER = CliRunner()


def history_json(*args):
    result = RUNNER.invoke(app, ["explain", "--vllm-version", "all", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def single_json(version, *args):
    result = RUNNER.invoke(app, ["explain", "--vllm-version", version, *args, "--json"])
    return json.loads(result.stdout)


@pytest.mark.parametrize("args", [
    ("--gpu", "T4", "--head-size", "256"),
    ("--gpu", "H100", "--model", "gpt-oss-20b"),
    ("--gpu", "B200", "--model", "deepseek-v3"),
    ("--capability", "12.0", "--head-size", "128", "--kv-cache-dtype", "fp8"),
    # a hybrid model's state dtype flag decides its block size in every release (attention/hybrid)
    ("--gpu", "H100", "--model", "nemotron-h-8b", "--mamba-ssm-cache-dtype", "float16"),
])
def test_each_release_row_is_that_releases_own_explain(args):
    doc = history_json(*args)
    assert [r["profile"] for r in doc["releases"]] == release_profiles()  # oldest first, every release
    for row in doc["releases"]:
        own = single_json(row["profile"], *args)
        assert row["selected"] == own["selected"]
        assert row["valid_backends"] == [b["name"] for b in own["backends"] if b["valid"]]
        assert row["backends"] == own["backends"]
        # memory plan included (DeepSeek-V3 does not fit one B200: that release's refusal, in its words)
        assert row["error"] == own["error"] and row["exit_code"] == own["exit_code"]
        if own["selected"] is not None:
            assert row["block_size"] == own["block_size"]


def test_changes_name_exactly_what_differs_between_consecutive_releases():
    doc = history_json("--gpu", "H100", "--model", "gpt-oss-20b")
    releases = doc["releases"]
    assert len(doc["changes"]) == len(releases) - 1
    for before, after, change in zip(releases, releases[1:], doc["changes"]):
        assert (change["before"], change["after"]) == (before["vllm_version"], after["vllm_version"])
        assert change["became_valid"] == [n for n in after["valid_backends"] if n not in before["valid_backends"]]
        assert change["became_invalid"] == [n for n in before["valid_backends"] if n not in after["valid_backends"]]
        picked = None if before["selected"] == after["selected"] else {"before": before["selected"],
                                                                        "after": after["selected"]}
        assert change["selected"] == picked
        assert change["changed"] == bool(change["summary"])


def test_the_release_that_made_flashinfer_invalid_on_turing_is_named():
    # FlashInfer on CC 7.5: valid in the seed, not from the releases that need CC >= 8.0 (docs/vllm-rules.md §3)
    doc = history_json("--gpu", "T4", "--head-size", "256")
    first_without = next(r for r in doc["releases"] if "FLASHINFER" not in r["valid_backends"])
    assert "FLASHINFER" in doc["releases"][0]["valid_backends"]
    change = next(c for c in doc["changes"] if c["after"] == first_without["vllm_version"])
    assert "FLASHINFER" in change["became_invalid"]
    assert any("FLASHINFER no longer valid" in line for line in change["summary"])
    assert change["selected"]["after"] == first_without["selected"]


def test_text_output_lists_each_change_under_its_releases():
    result = RUNNER.invoke(app, ["explain", "--vllm-version", "all", "--gpu", "T4", "--head-size", "256"])
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if " -> " in line]
    doc = history_json("--gpu", "T4", "--head-size", "256")
    changed = [c for c in doc["changes"] if c["changed"]]
    assert len(lines) >= len(changed) > 0
    assert all(c["after"] in result.stdout for c in changed)
    assert "FLASHINFER no longer valid" in " ".join(result.stdout.split())


def test_a_backend_only_later_releases_know_is_a_refusal_in_the_older_ones():
    doc = history_json("--gpu", "B200", "--use-mla", "--head-size", "576", "--attention-backend", "TOKENSPEED_MLA")
    oldest = doc["releases"][0]
    assert oldest["refused"] and "Unknown attention backend" in oldest["error"]
    assert any(not r["refused"] for r in doc["releases"])


def test_unchanged_history_says_so():
    request = SelectionRequest(head_size=128)
    history = release_history(explain_for_release(request, capability=(9, 0)), (9, 0),
                              profile_names=["vllm_0_33", "vllm_0_33"])
    assert [c.changed for c in history.changes] == [False]
    assert compare_releases(history.releases[0], history.releases[1]).became_valid == []


@pytest.mark.parametrize("args,fragment", [
    (("--gpu", "all", "--head-size", "128"), "one GPU"),
    (("--gpu", "H100", "--head-size", "128", "--attention-backend", "NO_SUCH_BACKEND"), "Unknown attention backend"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    result = RUNNER.invoke(app, ["explain", "--vllm-version", "all", *args])
    assert result.exit_code == 2
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_no_gpu_named_or_found_asks_for_one(monkeypatch):
    monkeypatch.setattr("attnsel.attention.explain.answers.detect_gpu", lambda: None)
    result = RUNNER.invoke(app, ["explain", "--vllm-version", "all", "--head-size", "128"])
    assert result.exit_code == 2 and "--gpu NAME or --capability" in result.stderr
