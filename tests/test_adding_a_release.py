"""Adding a vLLM release is its data file, then its recordings (attention/versions/README.md). With a
release that is a data file only (tests/fake_release.py: the newest release's data under the next
minor version), every test that takes its releases from the versions folder runs for it too, and
the one that fails is the recording gate (tests/test_parity_recorded.py): no test hard-codes the
list of releases, and none fails elsewhere for want of a recording."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
GATE = "tests/test_parity_recorded.py::test_every_release_profile_has_its_recordings"


def _takes_the_release_list(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return path.name != Path(__file__).name and re.search(r"\b(release_profiles|available_profiles)\(", text) is not None


@pytest.mark.slow
def test_a_release_with_its_data_only_fails_the_recording_gate_alone():
    files = sorted(str(p.relative_to(TESTS.parent)) for p in TESTS.glob("test_*.py") if _takes_the_release_list(p))
    assert "tests/test_parity_recorded.py" in files
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}  # this attnsel, and the plugin
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "fake_release", "-p", "no:cacheprovider",
                          "-o", "addopts=", "-rfE", *files], cwd=TESTS.parent, env=env, capture_output=True, text=True,
                         check=False)
    failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", run.stdout, re.MULTILINE)))
    assert failed == [GATE], run.stdout[-3000:]
