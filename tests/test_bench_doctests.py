"""The runnable examples in the tune modules' docstrings stay true (style.md D5 §6)."""

import doctest

import pytest

from attnsel.bench import env_info, launch_mode, recommend, timing


@pytest.mark.parametrize("module", [timing, recommend, env_info, launch_mode])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0
