"""The preflight checks as pure functions over a device-facts object (ProbeReport), and the GitHub
annotation format. vLLM facts: custom_all_reduce.py (_SUPPORTED_WORLD_SIZES = [2, 4, 6, 8], TP
group = local ranks 0..N-1), docs/probe.md, "Custom all-reduce"."""

from __future__ import annotations

import io
import re

import pytest

from attnsel.attention.preflight.deployment import Deployment, PreflightResult
from attnsel.attention.preflight.gpu_checks import check_interconnect, target_report
from attnsel.attention.preflight.status import FAIL, PASS, WARN, Check
from attnsel.probe import GpuInfo, P2PPair, ProbeReport
from attnsel.probe.links import nvlink_verdict
from attnsel.reports.preflight_report import github_line, render_text


def _report(n: int, nvlinked: set[tuple[int, int]]) -> ProbeReport:
    gpus = tuple(GpuInfo(i, i, "NVIDIA H100 80GB HBM3", compute_capability=(9, 0)) for i in range(n))
    pairs = [
        P2PPair(a, b, nvlink=(a, b) in nvlinked, pcie_read=False, pcie_write=False, physical_a=a, physical_b=b,
                nvlink_status="OK" if (a, b) in nvlinked else "NOT_SUPPORTED")
        for a in range(n) for b in range(a + 1, n)
    ]
    return ProbeReport("nvml", "580", "13.0", gpus, nvlink_verdict(pairs, n, list(range(n))), mixed_gpus=False)


@pytest.mark.parametrize("tp", [3, 5, 7])
def test_world_sizes_custom_allreduce_does_not_support_warn_with_vllms_text(tp):
    all_pairs = {(a, b) for a in range(8) for b in range(a + 1, 8)}
    check = check_interconnect(_report(8, all_pairs), tp)
    assert check.status == WARN
    assert check.vllm_message == (
        f"Custom allreduce is disabled due to an unsupported world size: {tp}. Supported world sizes: [2, 4, 6, 8]. "
        "To silence this warning, specify disable_custom_all_reduce=True explicitly."
    )


def test_only_the_gpus_of_the_group_matter():
    """TP=2 runs on logical GPUs 0 and 1; a missing link elsewhere does not concern it."""
    report = _report(4, nvlinked={(0, 1)})
    assert check_interconnect(report, 2).status == PASS
    assert check_interconnect(report, 4).status == WARN


def test_tp1_needs_no_link():
    assert check_interconnect(_report(1, set()), 1).status == PASS


def test_a_target_machine_has_the_tables_gpu_and_unknown_links():
    report = target_report("A100-80GB", 4)
    assert [g.compute_capability for g in report.gpus] == [(8, 0)] * 4
    assert report.nvlink.fully_connected is None
    assert check_interconnect(report, 4).status == WARN


def test_github_lines_escape_newlines_and_percent_signs():
    line = github_line(Check("attention", FAIL, "100% broken\nsecond line", hint="do X", vllm_message="a\r\nb"))
    assert line.startswith("::error::attnsel preflight attention: 100%25 broken%0Asecond line")
    assert "\n" not in line and "\r" not in line
    assert github_line(Check("dtype", WARN, "careful")).startswith("::warning::")
    assert github_line(Check("dtype", PASS, "fine")) is None


def test_text_output_shows_hints_for_problems_only():
    checks = (Check("gpu-count", PASS, "8 GPUs", hint="never shown"), Check("interconnect", WARN, "slow", hint="add NVLink"))
    result = PreflightResult(Deployment(8), "m", checks, (), "nvml")
    out = io.StringIO()
    render_text(result, out)
    text = out.getvalue()
    assert "hint: add NVLink" in text and "never shown" not in text
    assert text.splitlines()[-1] == "Result: 1 pass, 1 warn, 0 fail -> exit 0"


def test_colour_only_changes_the_labels():
    checks = (Check("gpu-count", PASS, "8 GPUs"), Check("dtype", FAIL, "bf16 on CC 7.0"))
    result = PreflightResult(Deployment(1), "m", checks, (), "nvml")
    plain, coloured = io.StringIO(), io.StringIO()
    render_text(result, plain)
    render_text(result, coloured, colour=True)
    assert "\x1b[" not in plain.getvalue()
    assert "\x1b[" in coloured.getvalue()
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured.getvalue()) == plain.getvalue()
