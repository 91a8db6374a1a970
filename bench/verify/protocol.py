"""The engine worker's pipe as typed messages: bench/verify/engine_worker.py writes them (one JSON
object a line), bench/verify/engine_process.py reads them and hands them to the progress display
(cli/verify_cmd.py). One definition of each message's keys; the protocol itself is in
engine_worker.py's docstring. `type` is a Message word, so a line holds the text it always did.
"""

from __future__ import annotations

from typing import Literal, TypedDict

from attnsel.words import Word


class Message(Word):
    """The "type" of a message on the worker's pipe."""

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


class Prespawn(TypedDict):
    type: Literal[Message.PRESPAWN]
    engine: str  # the engine to load: module:attr or file.py:attr


class Go(TypedDict):
    type: Literal[Message.GO]


class Imported(TypedDict):
    type: Literal[Message.IMPORTED]
    import_s: float


class Starting(TypedDict):
    type: Literal[Message.STARTING]
    pid: int


class Started(TypedDict):
    type: Literal[Message.STARTED]
    start_s: float
    facts: dict  # what the engine reports about itself (engine_worker.py VllmEngine.facts)


class Held(TypedDict):
    type: Literal[Message.HELD]
    hold: dict  # bench/verify/beside.py Beside._hold's record


class ShapeStart(TypedDict):
    type: Literal[Message.SHAPE_START]
    index: int
    label: str
    n1: int
    n2: int
    calls: int


class Call(TypedDict):
    type: Literal[Message.CALL]
    index: int
    phase: str  # "warmup" | "measure"
    max_tokens: int
    seconds: float


class Shape(TypedDict):
    type: Literal[Message.SHAPE]
    index: int
    result: dict  # the shape's row in verify.json (engine_worker.py ShapeRunner.run)


class Fatal(TypedDict):
    type: Literal[Message.FATAL]
    status: str  # RunStatus: oom | error
    error: str


class Done(TypedDict):
    type: Literal[Message.DONE]


ToWorker = Prespawn | Go
FromWorker = Imported | Starting | Started | ShapeStart | Call | Shape | Fatal | Done
Progress = FromWorker | Held  # what the progress display is shown
