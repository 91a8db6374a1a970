"""What runs beside verify's engines to shorten the run without touching what is measured
(docs/verify.md "Speed"): the FlashInfer sampler pre-build (bench/verify/prebuild.py) and the next
engine's pre-spawned worker.

Pre-spawned worker: when engine k's worker is spawned, the worker of run k+1 starts too; it imports
torch and vLLM (VllmEngine.preload: no CUDA, no LLM(...)), says "imported" and waits for its job
(bench/verify/engine_worker.py main). An engine start takes >= 40 s, an import ~20-28 s, so the
import ends while engine k starts. No import may run while an engine is measured (its CPU work
would reach the timed decode steps): engine k's job carries "hold", its worker reports "started"
and waits for "go", and the parent sends "go" only once the next worker has imported (at most
IMPORT_WAIT_S after its spawn: a late worker is killed and run k+1 starts afresh) and the pre-build
is out of the way: ended (waited for, at most prebuild.HOLD_S over the run) when engine k loads its
modules (FLASHINFER's attention modules), else paused (SIGSTOP of its process group) until engine k
is done measuring. At most one worker waits; whatever waits is killed
when verify ends, by an error or Ctrl-C as well.
"""

from __future__ import annotations

import itertools
import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnsel.bench.verify.engine_process import POLL_S, EngineProcess
from attnsel.bench.verify.prebuild import FlashInferPrebuild, note, prebuild_request
from attnsel.bench.verify.protocol import Message
from attnsel.bench.verify.resume import row_key

if TYPE_CHECKING:
    from attnsel.attention.versions import RuleProfile
    from attnsel.bench.verify.plan import Candidate

PRESPAWN_ENV = "ATTNSEL_VERIFY_PRESPAWN"  # "0": each engine's worker starts (and imports) in its own turn
IMPORT_WAIT_S = 120.0  # from its spawn, the longest the next worker's import may hold an engine's measuring
LAST_LOOK_S = 0.2  # past IMPORT_WAIT_S: how long the pipe is read for messages already sent

RunKey = tuple[str, int]  # (candidate slug, engine start)
PlannedRun = tuple[RunKey, Path]  # an engine start and its log


def start_beside(profile: RuleProfile, document: dict, runs: list[PlannedRun], engine: str, env: Mapping[str, str],
                 child_env: dict, log_dir: Path, attention: dict | None = None) -> Beside:
    """Starts the sampler pre-build (unless switched off or there is nothing to build or no engine
    to start: then document["prebuild"] says why, or is absent) and returns the run's Beside.
    `profile`: the release data of the installed vLLM (bench/verify/request.py plan_document)."""
    request = prebuild_request(profile, document["gpu"].get("capability"), env, attention)
    prebuild = None
    if request is not None and runs:
        if request.get("skipped"):
            document["prebuild"] = dict(request, note=note(request))
        else:
            prebuild = FlashInferPrebuild(request, log_dir / "prebuild.log", child_env)
    return Beside(runs, child_env, engine, env.get(PRESPAWN_ENV, "1") != "0", prebuild)


def runs_flashinfer(candidate: Candidate) -> bool:
    """The candidate's engine runs FLASHINFER: asked for, or vLLM's predicted default."""
    return (candidate.backend or (candidate.predicted or [None])[0]) == "FLASHINFER"


def flashinfer_attention(candidates: list[Candidate], runs: list[PlannedRun], attention: dict | None) -> dict | None:
    """The model's attention shape when an engine to start runs FLASHINFER: it JIT-builds its
    attention modules in its own start unless tune built them before (same cache), so they are
    pre-built beside the first engine too; else None."""
    started = {slug for (slug, _start), _log in runs}
    return attention if any(c.slug in started and runs_flashinfer(c) for c in candidates) else None


def planned_runs(candidates: list[Candidate], kept: dict, repeat_engine: int,
                 log_path: Callable[[str, int], Path]) -> list[PlannedRun]:
    """[((slug, start), log path)] in the order bench/verify/run.py starts the engines: each pair
    not refused and not kept by --resume, then starts 2..N round by round (its _restart_engines)."""
    def done(candidate: Candidate) -> int:
        return len((kept.get(row_key(candidate.to_dict())) or {}).get("restarts") or [])

    keys = [(c.slug, 1) for c in candidates if not c.reasons and row_key(c.to_dict()) not in kept]
    for start in range(2, repeat_engine + 1):
        keys += [(c.slug, start) for c in candidates if not c.reasons and done(c) < start - 1]
    return [(key, log_path(*key)) for key in keys]


@dataclass
class _Waiting:
    key: RunKey
    process: EngineProcess
    spawned_at: float
    import_s: float | None = None  # its import, once it said "imported"
    lost: str | None = None  # "late" | "died": killed, run k+1 starts afresh


class Beside:
    """The sampler pre-build and the pre-spawned worker of the next run, for one verify run."""

    def __init__(self, runs: list[PlannedRun], env: dict, engine: str, prespawn: bool,
                 prebuild: FlashInferPrebuild | None = None):
        """runs: [(key, log path)] in the order verify will start them."""
        self.next_of = {key: nxt for (key, _), nxt in itertools.pairwise(runs)}
        self.env, self.engine, self.prespawn, self.prebuild = env, engine, prespawn, prebuild
        self.waiting: _Waiting | None = None

    def take(self, key: RunKey) -> tuple[EngineProcess | None, dict | None]:
        """The worker pre-spawned for this run, if one is alive (None: start one as usual), and the
        row's record of what happened to it."""
        self.measured()  # a new engine starts: whatever was paused for the last one goes on
        waiting, self.waiting = self.waiting, None
        if waiting is None:
            return None, None
        if waiting.key != key or waiting.lost or waiting.process.proc.poll() is not None:
            waiting.process.stop(grace_s=0.0)
            lost = waiting.lost or ("died" if waiting.key == key else "not this run")
            return None, {"worker": lost, "note": f"the pre-spawned worker {_LOST.get(lost, lost)}; started afresh"}
        record: dict[str, object] = {"worker": "pre-spawned"}
        if waiting.import_s is not None:
            record["import_hidden_s"] = waiting.import_s
        return waiting.process, record

    def spawn_next(self, key: RunKey) -> None:
        """Engine `key` was just spawned: spawn the next run's worker (at most one waits)."""
        nxt = self.next_of.get(key)
        if not self.prespawn or self.waiting is not None or nxt is None:
            return
        process = EngineProcess(None, Path(nxt[1]), self.env, prespawn={"type": Message.PRESPAWN, "engine": self.engine})
        self.waiting = _Waiting(nxt[0], process, time.monotonic())

    def hold_for(self, key: RunKey, on_tick: Callable[[], None], *,
                 loads_built: bool = False) -> Callable[[], dict] | None:
        """The hold for engine `key` (None: nothing to wait for, the engine runs as before).
        `loads_built`: the engine loads modules the pre-build makes (a FLASHINFER engine: its attention
        modules), so a build still running is waited for; any other engine measures while it is paused."""
        building = self.prebuild is not None and not self.prebuild.done()
        if not building and not (self.prespawn and key in self.next_of):
            return None
        return lambda: self._hold(on_tick, loads_built)

    def measured(self) -> None:
        """The engine that held is done measuring: a paused pre-build goes on."""
        if self.prebuild is not None:
            self.prebuild.resume()

    def _hold(self, on_tick: Callable[[], None], loads_built: bool) -> dict:
        started = time.monotonic()
        record: dict = {}
        if self.prebuild is not None and loads_built and self.prebuild.must_wait():
            record["prebuild_s"] = self.prebuild.hold(on_tick)
        elif self.prebuild is not None and self.prebuild.pause():
            record["prebuild"] = "paused"
        if self.waiting is not None:
            self._await_import(self.waiting, on_tick)
            record["next_worker"] = self.waiting.lost or "imported"
        record["waited_s"] = time.monotonic() - started
        return record

    def _await_import(self, waiting: _Waiting, on_tick: Callable[[], None]) -> None:
        while waiting.import_s is None and not waiting.lost:
            remaining = waiting.spawned_at + IMPORT_WAIT_S - time.monotonic()
            try:
                # past the deadline, still read what the worker already said: an engine start (or the
                # pre-build hold) longer than IMPORT_WAIT_S leaves its "imported" waiting in the pipe
                # (seen on an H200: engine 1 started in 111 s, then held 47 s for the pre-build)
                message = waiting.process.next_message(min(POLL_S, remaining) if remaining > 0 else LAST_LOOK_S)
            except queue.Empty:
                if remaining <= 0:
                    waiting.lost = "late"
                    break
                on_tick()
                continue
            if message is None:
                waiting.lost = "died"
            elif message["type"] == Message.IMPORTED:
                waiting.import_s = float(message["import_s"] or 0.0)
        if waiting.lost:
            waiting.process.stop(grace_s=0.0)

    def close(self) -> dict | None:
        """Kills what still waits; the pre-build's record for verify.json (None: switched off)."""
        if self.waiting is not None:
            self.waiting.process.stop(grace_s=0.0)
            self.waiting = None
        return self.prebuild.finish() if self.prebuild is not None else None


_LOST = {"late": f"had not imported {IMPORT_WAIT_S:g} s after its spawn", "died": "died while it waited",
         "not this run": "was meant for another run"}
