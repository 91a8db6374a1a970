"""The words verify.json uses for how an engine start and a measured shape ended: one definition,
str-valued (attnsel/words.py), so verify.json and the worker's pipe carry the words they always did."""

from __future__ import annotations

from attnsel.words import Word


class RunStatus(Word):
    OK = "ok"
    ERROR = "error"  # vLLM raised (its message is the row's error)
    OOM = "oom"  # CUDA out of memory
    TIMEOUT = "timeout"  # no answer within --start-timeout / --timeout: its processes were killed
    CRASHED = "crashed"  # the worker died (signal, abort)
    REFUSED = "refused"  # vLLM's rules refuse the pair: never started (bench/verify/run.py)
    DOES_NOT_FIT = "does not fit"  # a shape: the KV cache holds fewer requests than its batch
    NOT_RUN = "not run"  # a shape: an earlier one stopped the engine


# engine_process.py CandidateRun.status and run.py (refused); a shape's: engine_worker.py and engine_process.py
ENGINE_STATUSES = (RunStatus.OK, RunStatus.ERROR, RunStatus.OOM, RunStatus.TIMEOUT, RunStatus.CRASHED, RunStatus.REFUSED)
SHAPE_STATUSES = (RunStatus.OK, RunStatus.ERROR, RunStatus.OOM, RunStatus.TIMEOUT, RunStatus.CRASHED,
                  RunStatus.DOES_NOT_FIT, RunStatus.NOT_RUN)
