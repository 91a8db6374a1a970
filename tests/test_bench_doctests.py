"""The runnable examples in the tune modules' docstrings stay true (docs/architecture.md, "Tests")."""

import doctest

import pytest

from attnsel.bench.sweep import lanes, multi_gpu
from attnsel.bench.timing import launch_mode
from attnsel.bench.timing import stats as timing
from attnsel.bench.tune import env_info, recommend, weights


@pytest.mark.parametrize("module", [timing, recommend, weights, env_info, launch_mode, lanes, multi_gpu])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0
