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
