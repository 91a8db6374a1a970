"""The parent's handle on one worker child (`python -m attnsel.bench.worker.main`, bench/worker/main.py): it
sends the job, reads protocol lines with timeouts, kills the child's whole process group. Every
live worker is known, so a stopped sweep (Ctrl-C, a --gpus lane failing) can kill them all.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def _tail(path: Path, start: int, limit: int = 600) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").strip()
    return text[-limit:]


_LIVE_WORKERS: set[WorkerProcess] = set()
_STOPPING = threading.Event()


def workers_importing() -> int:
    """How many live workers of this process are still importing (all lanes together)."""
    return sum(1 for worker in list(_LIVE_WORKERS) if worker.importing)


def allow_workers() -> None:
    """A new sweep may start workers again (after a stopped one in the same process)."""
    _STOPPING.clear()


def stop_all_workers() -> None:
    """Kill every worker this process started and refuse new ones (Ctrl-C during a --gpus sweep,
    whose lanes run in threads)."""
    _STOPPING.set()
    for worker in list(_LIVE_WORKERS):
        worker.kill()


class WorkerProcess:
    """One `python -m attnsel.bench.worker.main` child: send a job, read protocol lines with timeouts."""

    def __init__(self, job: dict, log_path: Path, *, prespawned: bool = False, env: dict | None = None):
        if _STOPPING.is_set():
            raise KeyboardInterrupt("the sweep is stopping")
        self.log_path = log_path
        self.prespawned = prespawned
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        self.log_start = self._log.tell()
        self.spawned_at = time.time()
        self.go_at: float | None = None
        self.imported: dict | None = None  # the worker's "imported" startup figures
        self.imported_seen_at: float | None = None
        self.import_done_at: float | None = None  # when its "imported" line arrived (reader thread)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnsel.bench.worker.main"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            start_new_session=True,  # its own process group: a timeout kills compiler children too
            env={**os.environ, **env} if env else None,  # --gpus: the worker's CUDA_VISIBLE_DEVICES
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self._stdin, self._stdout = self.proc.stdin, self.proc.stdout
        _LIVE_WORKERS.add(self)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._write(json.dumps({**job, "spawned_at": self.spawned_at}) + "\n")

    def _write(self, text: str) -> None:
        try:
            self._stdin.write(text.encode())
            self._stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # it died (or stdin is closed); the reader sees EOF

    def go(self) -> None:
        """Lets the worker touch CUDA and start its items (it waits for this after importing)."""
        if self.go_at is None:
            self.go_at = time.time()
            self._write("go\n")
            self._close_stdin()

    def _close_stdin(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self._stdin.close()

    def _read(self) -> None:
        for raw in self._stdout:
            line = raw.decode("utf-8", errors="replace")
            if self.import_done_at is None and '"imported"' in line:
                self.import_done_at = time.time()  # noted here: a waiting worker's lines are read only at go
            self._lines.put(line)
        self.import_done_at = self.import_done_at or time.time()  # dead or done: importing no more
        self._lines.put(None)

    @property
    def importing(self) -> bool:
        """Still importing torch and its libraries (spawned, no "imported" line yet, alive)."""
        return self.import_done_at is None

    def next_message(self, timeout_s: float) -> dict | None:
        """The next protocol message; None at EOF; raises queue.Empty on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise queue.Empty
            line = self._lines.get(timeout=remaining)
            if line is None:
                return None
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "type" in message:
                return message

    def kill(self) -> None:
        self._close_stdin()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group of the child we started
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.wait()

    def wait(self) -> int | None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        _LIVE_WORKERS.discard(self)
        return self.proc.returncode

    def stderr_tail(self) -> str:
        return _tail(self.log_path, self.log_start)
