"""NVML calls asked ahead, on several threads at once, for the session funnel to answer from.

On a 4 x H200 host (driver 580; bench/tools/nvml_call_times.py) the probe spent ~150 ms in NVML calls
made one after another: 24 P2P statuses 41 ms, 6 topology queries 27 ms, 4 names 27 ms (the first call
on each GPU is the slow one), 8 max clocks 20 ms. NVML is thread-safe and ctypes releases the GIL for
the foreign call, so the calls the probe makes unconditionally (probe/nvml/gpus.py `gpu_calls`,
probe/links/p2p.py `pair_calls`) are issued together here; `NvmlSession.get` then takes each raw
outcome (the answer, or what the call raised) in its usual order and treats it exactly as before, so
the report -- failures and their order included -- does not change (docs/probe.md, "Speed").

ATTNSEL_PROBE_THREADS=1 asks one call after another, as before (no call is asked ahead); another
positive integer caps the threads (default 16). A value that is not a positive integer is ignored.

The workers are daemon threads of our own, not a `ThreadPoolExecutor`: its workers are joined when
the interpreter exits (concurrent/futures/thread.py, `_python_exit`), so one NVML call that hangs (a
GPU fallen off the bus) would keep the process alive after the probe had returned.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from attnsel.probe.nvml.protocol import DeviceRef, NvmlFacade

__all__ = ["THREADS_ENV_VAR", "THREAD_NAME", "CallsAhead", "NvmlCall", "probe_threads"]

THREADS_ENV_VAR = "ATTNSEL_PROBE_THREADS"
THREAD_NAME = "attnsel-nvml"
DEFAULT_THREADS = 16
MAX_THREADS = 64  # a cap for a large ATTNSEL_PROBE_THREADS: one thread per call of a 64-GPU host's batch at most

NvmlCall = tuple[str, tuple[Any, ...]]  # (NVML function, its arguments), as NvmlSession.get is asked


def probe_threads(env: Mapping[str, str]) -> int:
    """How many threads may ask NVML at once under `env`; 1: one call after another (no prefetch).

    >>> probe_threads({}), probe_threads({"ATTNSEL_PROBE_THREADS": "1"}), probe_threads({"ATTNSEL_PROBE_THREADS": "4"})
    (16, 1, 4)
    >>> probe_threads({"ATTNSEL_PROBE_THREADS": "0"}), probe_threads({"ATTNSEL_PROBE_THREADS": "two"})
    (16, 16)
    """
    value = (env.get(THREADS_ENV_VAR) or "").strip()
    if value.isascii() and value.isdigit() and int(value) > 0:
        return min(int(value), MAX_THREADS)
    return DEFAULT_THREADS


class _Outcome:
    """One call asked ahead: what it answered or raised, once a worker has it."""

    __slots__ = ("answer", "done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Any = None
        self.error: BaseException | None = None

    def result(self) -> Any:
        """The answer, or the call's exception raised again; waits for a call still running, as the
        serial code would have waited for it."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.answer


class CallsAhead:
    """Calls issued ahead on daemon threads, each outcome taken once by the session."""

    def __init__(self, facade: NvmlFacade, threads: int):
        self.facade = facade
        self.threads = threads
        self._outcomes: dict[NvmlCall, deque[_Outcome]] = {}
        self._queues: list[deque[tuple[NvmlCall, _Outcome]]] = []

    def issue(self, calls: Sequence[NvmlCall]) -> None:
        """Start `calls` on up to `threads` workers; returns at once."""
        work: deque[tuple[NvmlCall, _Outcome]] = deque()
        for function, args in calls:
            outcome = _Outcome()
            self._outcomes.setdefault((function, tuple(args)), deque()).append(outcome)
            work.append(((function, tuple(args)), outcome))
        self._queues.append(work)
        for n in range(min(self.threads, len(work))):
            threading.Thread(target=self._work, args=(work,), name=f"{THREAD_NAME}-{n}", daemon=True).start()

    def _work(self, work: deque[tuple[NvmlCall, _Outcome]]) -> None:
        while True:
            try:
                (function, args), outcome = work.popleft()  # deque.popleft is atomic
            except IndexError:
                return
            try:
                outcome.answer = self.facade.call(function, *args)
            except BaseException as exc:  # noqa: BLE001 -- kept and raised again by the session's get
                outcome.error = exc
            outcome.done.set()

    def take(self, function: str, args: tuple[DeviceRef | int, ...]) -> _Outcome | None:
        """The outcome of this call asked ahead (each one is taken once), or None: ask it now."""
        waiting = self._outcomes.get((function, args))
        if not waiting:
            return None
        outcome = waiting.popleft()
        if not waiting:
            del self._outcomes[(function, args)]
        return outcome

    def unconsumed(self) -> list[NvmlCall]:
        """Calls asked ahead whose outcome no `get` took (none, when the readers and their call lists agree)."""
        return [key for key, waiting in self._outcomes.items() for _ in waiting]

    def close(self) -> None:
        """Start no further call; a call already running finishes on its daemon thread, unread."""
        for work in self._queues:
            work.clear()
        self._outcomes.clear()
