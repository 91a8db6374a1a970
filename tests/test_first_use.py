"""First-use items of issue 33: what one command suggests, the next one accepts without a warning."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile import invoke  # noqa: E402


@pytest.mark.parametrize("model,gpu", [("llama-3.1-8b", "L4"), ("llama-3.1-8b", "A10G"), ("qwen3-8b", "L4")])
def test_explains_suggested_length_passes_preflight_without_the_edge_warning(model, gpu):
    result, _ = invoke(["explain", "--model", model, "--gpu", gpu, "--json"])
    fixes = json.loads(result.stdout)["memory"]["fixes"]
    length = next(int(m.group(1)) for f in fixes if (m := re.match(r"--max-model-len (\d+) ", f)))
    done, _ = invoke(["preflight", "--model", model, "--gpu", gpu, "--max-model-len", str(length), "--json"])
    check = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "memory")
    assert done.exit_code == 0 and check["status"] == "pass", check
