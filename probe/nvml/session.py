"""One door to NVML (and to torch.cuda for the fallback), real or replayed from a scenario.

Everything the probe learns from the driver goes through `NvmlSession.get`, in the style of
nvitop's `nvmlQuery`: any exception from one query -- an `NVMLError`, but also a
`ctypes.ArgumentError` (nvidia-ml-py 13.615.71 defines `NVML_P2P_CAPS_INDEX_READ` as the tuple
`(0,)`, docs/gpu-facts.md §2) -- becomes "unknown" for that query only and is kept as a `QueryFailure`.
Only a failing `nvmlInit` is fatal; the collector then falls back to torch.

Callers import the facades, the session and NVML's constants from the room's door (probe/nvml). Its
parts: probe/nvml/protocol.py (device refs, call keys, NVML error codes, the facade protocols),
probe/nvml/pynvml_facade.py (the real NVML), probe/nvml/replay.py (scenarios: their format, the replay
facades, loading), probe/nvml/torch_cuda.py (the real torch.cuda fallback).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnsel.probe.nvml.prefetch import CallsAhead, NvmlCall
from attnsel.probe.nvml.protocol import (
    DeviceRef,
    NvmlCallError,
    NvmlFacade,
    TorchFacade,
    call_key,
)
from attnsel.probe.nvml.pynvml_facade import PynvmlFacade
from attnsel.probe.nvml.replay import (
    SCENARIO_ENV_VAR,
    ReplayFacade,
    ReplayTorch,
    load_scenario,
)
from attnsel.probe.nvml.torch_cuda import RealTorch

# what this module defines; the room's door (probe/nvml/__init__.py) offers the rest
__all__ = ["INVALID_ANSWER", "NvmlSession", "QueryFailure", "answer_problem", "facades_from_env"]


# ---------------------------------------------------------------------------------------------
# The funnel


@dataclass(frozen=True)
class QueryFailure:
    function: str
    key: str
    error: str  # "NVML_ERROR_GPU_IS_LOST", "ArgumentError", ...
    message: str

    def describe(self) -> str:
        where = f"({self.key})" if self.key else "()"
        return f"{self.function}{where}: {self.message}"


# What each query must answer (nvml.h types, as nvidia-ml-py returns them after `_plain`). An
# answer of another shape (a broken driver, a hand-edited scenario) is a failed query: None, and
# the failure is reported like an NVML error, so nothing downstream meets a string for a number.
INVALID_ANSWER = "NVML_ANSWER_INVALID"
_UINT_MAX = 2**64


def _uint(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _UINT_MAX


def _uint_fields(*names: str) -> Callable[[object], bool]:
    return lambda v: isinstance(v, dict) and all(_uint(v.get(n)) for n in names)


_STRING_ANSWERS = ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlSystemGetDriverVersion")
_INT_ANSWERS = (
    "nvmlDeviceGetCount", "nvmlDeviceGetMemoryBusWidth", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetNumGpuCores", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId", "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
)
_SHAPES: dict[str, tuple[str, Callable[[object], bool]]] = {
    **{name: ("a string", lambda v: isinstance(v, str)) for name in _STRING_ANSWERS},
    **{name: ("an unsigned integer", _uint) for name in _INT_ANSWERS},
    "nvmlDeviceGetCudaComputeCapability": ("[major, minor]", lambda v: isinstance(v, list) and len(v) == 2
                                           and all(_uint(x) and x < 100 for x in v)),
    "nvmlDeviceGetMigMode": ("[current, pending]", lambda v: isinstance(v, list) and len(v) == 2 and all(map(_uint, v))),
    "nvmlDeviceGetMemoryInfo": ("a memory struct", _uint_fields("total", "free", "used")),
    "nvmlDeviceGetPciInfo": ("a PCI info struct", lambda v: isinstance(v, dict) and isinstance(v.get("busId"), str)),
}


# C0 and C1 control characters and DEL: a GPU name or bus id holding them would reach a terminal raw
# (an escape sequence recolours or rewrites it); they are kept, visibly, as \xNN
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(answer: Any) -> Any:
    """A string answer (or a struct's string fields) with control characters shown as \\xNN.

    >>> printable("NVIDIA \x1b[31mH200")
    'NVIDIA \\x1b[31mH200'
    """
    if isinstance(answer, str):
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", answer)
    if isinstance(answer, dict):
        return {k: printable(v) if isinstance(v, str) else v for k, v in answer.items()}
    return answer


def answer_problem(function: str, answer: object) -> str | None:
    """Why an NVML answer cannot be what `function` returns, or None when it can."""
    shape = _SHAPES.get(function)
    if shape is None or shape[1](answer):
        return None
    shown = repr(answer)
    return f"answered {shown if len(shown) <= 60 else shown[:57] + '...'}, not {shape[0]}"


class NvmlSession:
    """The funnel every NVML query goes through; failures become None and are remembered."""

    def __init__(self, facade: NvmlFacade, threads: int = 1):
        """`threads` > 1: `prefetch` asks calls ahead on that many threads (probe/nvml/prefetch.py);
        1: every call is asked when `get` needs it, one after another."""
        self.facade = facade
        self.failures: list[QueryFailure] = []
        self.ahead = CallsAhead(facade, threads) if threads > 1 else None

    def prefetch(self, calls: Sequence[NvmlCall]) -> None:
        """Ask `calls` ((function, args) as `get` will ask them) now, concurrently; `get` takes each
        outcome once and treats it as if it had asked then. Nothing happens on a serial session."""
        if self.ahead is not None and calls:
            self.ahead.issue(calls)

    def close(self) -> None:
        """Ask nothing more ahead (before the facade shuts down)."""
        if self.ahead is not None:
            self.ahead.close()

    def _ask(self, function: str, args: tuple[DeviceRef | int, ...]) -> Any:
        outcome = self.ahead.take(function, args) if self.ahead is not None else None
        if outcome is not None:
            return outcome.result()
        return self.facade.call(function, *args)

    def get(self, function: str, *args: DeviceRef | int, quiet: bool = False) -> Any:
        """The answer, or None when the query raised anything. `quiet` queries probe for existence
        (MIG slots, NVLink link numbers) and their expected failures are not kept."""
        try:
            answer = self._ask(function, args)
            problem = answer_problem(function, answer)
            if problem is None:
                return printable(answer)
            failure = QueryFailure(function, call_key(args), INVALID_ANSWER, problem)
        except NvmlCallError as exc:
            failure = QueryFailure(function, call_key(args), exc.name, exc.message)
        except Exception as exc:  # noqa: BLE001 -- e.g. ctypes.ArgumentError (docs/gpu-facts.md §2)
            failure = QueryFailure(function, call_key(args), type(exc).__name__, str(exc) or type(exc).__name__)
        if not quiet:
            self.failures.append(failure)
        return None

    def last_failure(self) -> QueryFailure | None:
        return self.failures[-1] if self.failures else None

    def failures_for(self, ref: DeviceRef) -> list[QueryFailure]:
        token = str(ref)
        return [f for f in self.failures if f.key.split(",")[0] == token]


# ---------------------------------------------------------------------------------------------
# Which facades: replayed or real


def facades_from_env(env: Mapping[str, str]) -> tuple[NvmlFacade, TorchFacade, dict | None]:
    """The replay facades when ATTNSEL_NVML_SCENARIO names a scenario, else the real ones."""
    path = env.get(SCENARIO_ENV_VAR)
    if path:
        scenario = load_scenario(path)
        return ReplayFacade(scenario), ReplayTorch(scenario), scenario
    return PynvmlFacade(), RealTorch(), None

