"""One verification run as both commands start it (`attnsel verify` and `attnsel tune --verify`):
the engines run until done or interrupted, and the exit code the verdict gives."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

from attnsel.bench.verify.compare import EngineVerdict
from attnsel.bench.verify.run import VerifyProgress, VerifyRequest, run_verify
from attnsel.bench.verify.verdict import is_aa_check
from attnsel.errors import EXIT_FAILED


def after_tune(tune_dir: Path) -> VerifyRequest:
    """`tune --verify`: the sweep's own folder checked with verify's defaults (its pick and runner-up)."""
    return VerifyRequest(tune_dir=Path(tune_dir))


def verify_until_done(req: VerifyRequest, output_dir: Path, progress: VerifyProgress) -> dict:
    """verify.json's document. SIGTERM (`timeout`, a job scheduler) ends the run as Ctrl-C does: the
    running engine's process group is killed on the way out (it lives in its own session, so the
    signal never reached it) and verify.json keeps what was measured."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run_verify(req, output_dir, progress)
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_code(document: dict) -> int:
    """0: a verdict was given (an A/A check answers with its spread); 1 (EXIT_FAILED): nothing was measured."""
    not_measured = (document.get("verdict") or {}).get("verdict") == EngineVerdict.NOT_MEASURED
    return EXIT_FAILED if not_measured and not is_aa_check(document) else 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
