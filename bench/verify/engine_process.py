"""One engine worker process, seen from the parent (torch-free): start it, read its messages
with timeouts, and make sure that nothing it started outlives it.

The worker runs in a new session: vLLM's engine-core process (and any compiler it forks) joins
that process group, so one `killpg` ends them all, whether the worker hung, died or finished.
What can go wrong, and what its candidate's row then says:
  * the engine fails to start (vLLM raises, OOM)  -> "error" / "oom" with vLLM's message;
  * no message within the timeout (start or call)  -> "timeout"; the group is killed;
  * the worker dies (segfault, abort, killed)      -> "crashed" with the signal and the log's tail;
  * one shape raises (OOM at a large batch)        -> that shape's status; the others still run.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from attnsel.bench.verify import engine_log
from attnsel.bench.verify.protocol import (
    FromWorker,
    Message,
    Prespawn,
    Progress,
    Started,
)
from attnsel.bench.verify.status import RunStatus

DEFAULT_START_TIMEOUT_S = 900.0  # vLLM's start took 27-187 s on an H100, + ~100 s of FlashInfer JIT (docs/gpu-facts.md §6)
DEFAULT_CALL_TIMEOUT_S = 600.0  # one generate() call: the largest default shape takes ~10 s
POLL_S = 1.0  # how often the parent looks up from waiting (progress display)


def describe_exit(code: int | None) -> str:
    """How a process ended, in the words tune uses for its workers."""
    if code is None:
        return "still running"
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = str(-code)
    return f"killed by signal {name}"


class EngineProcess:
    """`python -m attnsel.bench.verify.engine_worker` with its job; stderr (vLLM's log) goes to `log_path`."""

    def __init__(self, job: dict | None, log_path: Path, env: dict | None = None,
                 prespawn: Prespawn | None = None):
        """`job` now, or `prespawn` ({"type": "prespawn", "engine"}: the worker imports its engine's
        libraries and waits for `send_job`); a job with "hold" keeps stdin open for `release`."""
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.log_start = self._log.tell()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnsel.bench.verify.engine_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
            start_new_session=True,  # its own process group: vLLM's engine core goes down with it
        )
        self._buffer = b""
        self._eof = False
        os.set_blocking(self._stdout.fileno(), False)
        if prespawn is not None:
            self._write(prespawn, close=False)
        if job is not None:
            self.send_job(job)

    @property
    def _stdout(self) -> IO[bytes]:
        assert self.proc.stdout is not None  # Popen(stdout=PIPE)
        return self.proc.stdout

    def send_job(self, job: dict) -> None:
        self._write(job, close=not job.get("hold"))

    def release(self) -> None:
        """A held engine (job "hold") goes on to its shapes."""
        self._write({"type": Message.GO}, close=True)

    def _write(self, message: Mapping[str, object], close: bool) -> None:
        stdin = self.proc.stdin
        assert stdin is not None  # Popen(stdin=PIPE)
        try:
            stdin.write((json.dumps(message) + "\n").encode())
            stdin.flush()
            if close:
                stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it died; reading sees EOF

    def next_message(self, timeout_s: float) -> FromWorker | None:
        """The next protocol message; None at EOF; raises queue.Empty after timeout_s. Reads the
        pipe with select() in this thread: lines that are not protocol JSON are skipped."""
        deadline = time.monotonic() + timeout_s
        message = None
        while message is None:
            line = self._next_line(deadline)
            if line is None:
                return None
            message = _as_message(line)
        return message

    def _next_line(self, deadline: float) -> str | None:
        while b"\n" not in self._buffer:
            if self._eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise queue.Empty
            if select.select([self._stdout], [], [], min(remaining, 0.5))[0]:
                self._take(os.read(self._stdout.fileno(), 65536))
            elif self.proc.poll() is not None:
                # The worker is gone, but a process it forked (vLLM's engine core) may still hold
                # the pipe open, so EOF would never come: read what is left and stop here.
                self._take(self._drain())
                self._take(b"")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", errors="replace")

    def _take(self, chunk: bytes) -> None:
        if not chunk:
            self._eof = True
            if self._buffer and not self._buffer.endswith(b"\n"):
                self._buffer += b"\n"  # a last line without its newline
        self._buffer += chunk

    def _drain(self) -> bytes:
        try:
            return os.read(self._stdout.fileno(), 1 << 20) or b""
        except BlockingIOError:
            return b""

    def stop(self, grace_s: float = 30.0) -> int | None:
        """Lets a finished worker exit (up to grace_s), then ends its whole process group."""
        if grace_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        end_process_group(self.proc)  # the group of the worker we started, and only it
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode

    def log_text(self) -> str:
        return engine_log.read_log(self.log_path, self.log_start)


def end_process_group(proc: subprocess.Popen, term_wait_s: float = 10.0, kill_wait_s: float = 30.0) -> None:
    """SIGTERM to the process group `proc` leads (started with start_new_session), a wait of up to
    term_wait_s for `proc`, then SIGKILL to whatever is still in the group (a child that outlived it:
    vLLM's engine core, ninja's nvcc); stops as soon as nobody is left in the group."""
    for sig, wait_s in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, kill_wait_s)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break  # nobody left in the group
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue


def _as_message(line: str) -> FromWorker | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None  # a stray print, not the protocol
    # engine_worker.py writes only FromWorker messages on this pipe; anything else is a stray line
    return cast("FromWorker", message) if isinstance(message, dict) and "type" in message else None


@dataclass
class CandidateRun:
    """What one engine did: its start, its read-back facts, one result per shape."""

    status: str = RunStatus.OK  # ok | error | oom | timeout | crashed (as the worker said it)
    error: str | None = None
    start_s: float | None = None
    facts: dict = field(default_factory=dict)
    shapes: list = field(default_factory=list)
    wall_s: float | None = None
    exit: str | None = None
    stopped: str | None = None  # why the shapes after a failed one were not run
    hold: dict | None = None  # what the engine waited for between its start and its first shape


Listener = Callable[[Progress], None]


def run_engine(job: dict, log_path: Path, *, start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
               call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, env: dict | None = None,
               on_message: Listener = lambda message: None,
               on_tick: Callable[[], None] = lambda: None, process: EngineProcess | None = None,
               on_spawned: Callable[[], None] = lambda: None,
               hold: Callable[[], dict] | None = None) -> CandidateRun:
    """Start one engine (or give its job to `process`, a pre-spawned worker), collect its messages
    until "done", a failure or a timeout; the process group is always ended before this returns.
    `hold`: called once the engine has started, before its first shape (the engine waits; what
    hold returns is recorded), e.g. until the next engine's worker has imported (bench/verify/beside.py)."""
    started = time.monotonic()
    job = dict(job, hold=True) if hold is not None else job
    if process is None:
        process = EngineProcess(job, log_path, env)
    else:
        process.send_job(job)
    on_spawned()
    run = CandidateRun(shapes=[None] * len(job.get("shapes") or []))
    try:
        _drive(process, run, start_timeout_s, call_timeout_s, on_message, on_tick, hold)
    finally:
        finished = run.status == RunStatus.OK and all(s is not None for s in run.shapes)
        code = process.stop(grace_s=60.0 if finished else 0.0)
        run.exit = describe_exit(code)
        run.wall_s = time.monotonic() - started
    _fill_not_run(run)
    return run


def _drive(process: EngineProcess, run: CandidateRun, start_timeout_s: float, call_timeout_s: float,
           on_message: Listener, on_tick: Callable[[], None], hold: Callable[[], dict] | None = None) -> None:
    current: int | None = None  # the shape being measured
    waited = 0.0
    while True:
        limit = call_timeout_s if run.start_s is not None else start_timeout_s
        try:
            message = process.next_message(min(POLL_S, max(0.01, limit - waited)))
        except queue.Empty:
            waited += POLL_S
            on_tick()
            if waited < limit:
                continue
            _fail(run, current, RunStatus.TIMEOUT, f"no answer from the engine within {limit:g} s; its processes were killed")
            return
        waited = 0.0
        if message is None:
            code = process.stop(grace_s=5.0)
            cause = engine_log.last_error(process.log_text())
            detail = f"the engine worker {describe_exit(code)}" + (f" ({cause})" if cause else "")
            _fail(run, current, RunStatus.CRASHED, detail)
            return
        if message["type"] == Message.IMPORTED:
            continue  # a pre-spawned worker's import, before its job (its facts carry import_hidden_s)
        if message["type"] == Message.STARTED:
            _backend_from_log(message, process)
        on_message(message)
        if message["type"] == Message.STARTED:
            run.start_s, run.facts = message["start_s"], message["facts"] or {}
            if hold is not None:
                run.hold = hold()
                on_message({"type": Message.HELD, "hold": run.hold})
                process.release()
        elif message["type"] == Message.SHAPE_START:
            current = int(message["index"])
        elif message["type"] == Message.SHAPE:
            run.shapes[int(message["index"])] = message["result"]
            current = None
        elif message["type"] == Message.FATAL:
            error = message["error"] or "the engine could not start"
            cause = engine_log.last_error(process.log_text(), besides=error)
            run.status, run.error = message["status"] or RunStatus.ERROR, _with_cause(error, cause)
            return
        elif message["type"] == Message.DONE:
            return


def _backend_from_log(message: Started, process: EngineProcess) -> None:
    """Where the model inspection named no backend (MLA layers print none: inspection.py
    unnamed_attention_layers), the one vLLM logged when it chose it (platforms/cuda.py "Using %s
    attention backend ..." / "Using %s backend.", logged before the engine reports it started)."""
    facts = message.get("facts")
    if not isinstance(facts, dict) or facts.get("attention_backends"):
        return
    logged = engine_log.parse_engine_log(process.log_text()).get("backend_selected")
    if logged:
        facts["logged_backend"] = logged


def _with_cause(error: str, cause: str | None) -> str:
    """vLLM's front end often says only "Engine core initialization failed"; its log has the cause."""
    if cause and cause not in error:
        return f"{error} (in the log: {cause})"
    return error


def _fail(run: CandidateRun, current: int | None, status: RunStatus, error: str) -> None:
    if current is not None and run.start_s is not None:
        run.shapes[current] = {"status": status, "error": error}
        run.stopped = f"the engine was stopped after shape {current + 1} ended with {status}"
    else:
        run.status, run.error = status, error


def _fill_not_run(run: CandidateRun) -> None:
    for i, shape in enumerate(run.shapes):
        if shape is None:
            why = run.error or run.stopped or "the engine stopped before this shape"
            run.shapes[i] = {"status": RunStatus.NOT_RUN, "error": f"not run: {why}"}
