"""`python -m attnsel.bench.tools.evidence` (bench/tools/evidence/): the check CI runs after the tests
over what recorded GPU runs showed. What a developer relies on: a missing recording breaks its
claims (never a skip), a recording that no longer shows what the docs say breaks exactly the claims
resting on it, one line each, exit 1; the summary line counts the claims checked and held."""

import shutil
import subprocess
import sys
from pathlib import Path

from recordings import FIXTURES

from attnsel.bench.tools.evidence import CLAIMS, main

KERNELS = "kernels/h200_kernel_check.jsonl"


def _run(fixtures: Path, capsys) -> tuple[int, list[str]]:
    code = main(["--fixtures", str(fixtures)])
    return code, capsys.readouterr().out.splitlines()


def test_every_claim_names_what_it_backs_and_the_recordings_it_reads():
    assert CLAIMS and len({c.name for c in CLAIMS}) == len(CLAIMS)
    for claim in CLAIMS:
        assert claim.backs.startswith(("README", "docs/", "issue")), claim.name
        assert claim.recordings and all((FIXTURES / name).is_file() for name in claim.recordings), claim.name


def test_without_recordings_every_claim_is_broken_one_line_each(tmp_path, capsys):
    code, lines = _run(tmp_path, capsys)
    assert code == 1
    broken = [line for line in lines if line.startswith("broken: ")]
    assert [line.split(":")[1].strip() for line in broken] == [c.name for c in CLAIMS]
    assert all("recording missing: " in line for line in broken)
    assert lines[-1] == f"evidence: {len(CLAIMS)} claims checked, 0 held"


def test_a_recording_that_no_longer_backs_its_claim_breaks_only_the_claims_resting_on_it(tmp_path, capsys):
    root = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, root)
    text = (root / KERNELS).read_text().replace('"correct": true', '"correct": false', 1)
    (root / KERNELS).write_text(text)
    code, lines = _run(root, capsys)
    assert code == 1
    broken = [line for line in lines if line.startswith("broken: ")]
    assert len(broken) == 1 and broken[0].startswith("broken: h200_kernels_pass_the_fp32_reference: kernels failing")
    assert f"recording: {KERNELS}" in broken[0] and "claim: docs/evidence.md" in broken[0]
    assert lines[-1] == f"evidence: {len(CLAIMS)} claims checked, {len(CLAIMS) - 1} held"


def test_an_unreadable_recording_breaks_its_claims_with_a_line_not_a_traceback(tmp_path, capsys):
    root = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, root)
    (root / KERNELS).write_text("{not json\n")
    code, lines = _run(root, capsys)
    kernel_claims = [c.name for c in CLAIMS if KERNELS in c.recordings]
    broken = [line for line in lines if line.startswith("broken: ")]
    assert code == 1 and len(broken) == len(kernel_claims) >= 2
    assert all("cannot read the recording (JSONDecodeError" in line for line in broken)


def test_run_as_a_module_it_exits_1_with_the_summary_last(tmp_path):
    # how .ci/run calls it; whether today's recordings hold is CI's evidence step, not a test
    result = subprocess.run([sys.executable, "-m", "attnsel.bench.tools.evidence", "--fixtures", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr == ""
    assert result.stdout.splitlines()[-1] == f"evidence: {len(CLAIMS)} claims checked, 0 held"
