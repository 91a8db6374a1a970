"""Regenerate the README's example report: `python -m attnsel.bench.tools.example_report`.

The example is a real run of vLLM's own kernels (H100, vLLM 0.24.0, llama-3.1-8b) with the
`attnsel verify` that checked its advice in vLLM's engine (tests/fixtures/verify/h100_llama8b),
rendered by today's `attnsel report` as Markdown and HTML under reports/examples/. Run it after a
change to the report's renderers; tests/test_first_hour.py fails while the files are stale.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = Path("tests/fixtures/verify/h100_llama8b")
EXAMPLES = Path("reports/examples")
STEM = "h100-llama-3.1-8b"


def render(fmt: str) -> str:
    """The report of RUN in `fmt`, as `attnsel report RUN --format fmt` prints it (run from the root)."""
    done = subprocess.run([sys.executable, "-m", "attnsel", "report", str(RUN), "--format", fmt],
                          cwd=ROOT, capture_output=True, text=True, check=True, env=None)
    return done.stdout


def main() -> int:
    for fmt in ("md", "html"):
        path = ROOT / EXAMPLES / f"{STEM}.{fmt}"
        path.write_text(render(fmt), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
