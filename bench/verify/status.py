"""The words verify.json uses for how an engine start and a measured shape ended, and the types of
the messages on the engine worker's pipe (bench/verify/engine_worker.py writes them,
bench/verify/engine_process.py reads them). One definition each; str-valued (attnsel/words.py), so
verify.json and the pipe carry the words they always did."""

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


class Message(Word):
    """The "type" of a message on the worker's pipe (engine_worker.py's docstring has the protocol)."""

    PRESPAWN = "prespawn"  # parent -> worker: import the engine's libraries, wait for the job
    GO = "go"  # parent -> a held worker: measure now
    IMPORTED = "imported"  # worker -> parent: a pre-spawned worker's import is done
    STARTING = "starting"  # the worker read its job (its pid)
    STARTED = "started"  # the engine started (its facts)
    HELD = "held"  # the parent's record of what the engine waited for (sent to the progress display)
    SHAPE_START = "shape_start"
    CALL = "call"  # one timed generate call
    SHAPE = "shape"  # one shape's result
    FATAL = "fatal"  # the engine could not start
    DONE = "done"
