import os

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except Exception:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run the tests marked slow")


def pytest_collection_modifyitems(config, items):
    # The default run stays short (CI): slow tests run with --run-slow or when -m names them.
    if not config.getoption("--run-slow") and "slow" not in (config.getoption("-m") or ""):
        skip_slow = pytest.mark.skip(reason="slow: run with --run-slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _plain_output(monkeypatch):
    # Tests compare text, not colours.
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")


# --- attnsel verify: a fake engine at our boundary (tests/fixtures/verify_engine/fake_engine.py) ---

_FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
H200_NVML = os.path.join(_FIXTURES, "tune", "nvml_h200.json")
H200_TUNE = os.path.join(_FIXTURES, "tune", "h200_llama8b_default", "tune.json")


@pytest.fixture
def tune_run_dir(tmp_path):
    """A `tune --output` folder holding the real H200 Llama-3.1-8B tune.json."""
    import shutil

    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(H200_TUNE, folder / "tune.json")
    return folder


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    """use(scenario, nvml=...) makes `attnsel verify` start fake engines (in real worker processes)
    on a recorded H200's NVML; returns the environment it set."""
    import json

    from attnsel.bench.verify import gpu_state

    monkeypatch.setattr(gpu_state, "MEMORY_RELEASE_WAIT_S", 0.0)

    def use(scenario: dict, nvml: str = H200_NVML) -> dict:
        path = tmp_path / "scenario.json"
        path.write_text(json.dumps(scenario))
        env = {"ATTNSEL_VERIFY_ENGINE": f"{os.path.join(_FIXTURES, 'verify_engine', 'fake_engine.py')}:FakeEngine",
               "ATTNSEL_FAKE_ENGINE_SCENARIO": str(path), "ATTNSEL_NVML_SCENARIO": str(nvml)}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return env

    return use


@pytest.fixture
def gone():
    """gone(pid) -> True once the process ended (a zombie no longer runs), waiting up to 5 s."""
    import time

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().split()[2] != "Z"
        except OSError:
            return False

    def wait(pid: int, wait_s: float = 5.0) -> bool:
        deadline = time.monotonic() + wait_s
        while alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    return wait
