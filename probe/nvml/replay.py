"""Replaying NVML (and torch.cuda) from a recorded or hand-written scenario.

A scenario (tests/fixtures/probe/*.json, or `python -m attnsel.bench.tools.record_nvml`) is
  {"schema": "attnsel-nvml-scenario/1", "init": null | {"nvml_error": "NVML_ERROR_..."},
   "calls": {function: {key: answer}}, "torch": null | {...}, "env": {...}}
where key is the call's arguments joined by "," ("" for none, "0", "0,1,2", "0:1") and an answer
is a value, {"nvml_error": "NVML_ERROR_GPU_IS_LOST"} or {"exception": "ArgumentError", "message": ...};
{"delay_s": 600, "answer": ...} answers after a delay (an NVML call that hangs, as on a GPU that fell
off the bus). ATTNSEL_NVML_SCENARIO=path.json makes the probe replay one (probe/nvml/session.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from attnsel import files
from attnsel.errors import UserInputError
from attnsel.probe.nvml.protocol import (
    DeviceRef,
    NvmlCallError,
    NvmlInitError,
    TorchInventory,
    call_key,
)

SCENARIO_ENV_VAR = "ATTNSEL_NVML_SCENARIO"
SCENARIO_SCHEMA = "attnsel-nvml-scenario/1"


_REPLAYED_EXCEPTIONS = {
    "ArgumentError": ctypes.ArgumentError,
    "RuntimeError": RuntimeError,
    "OSError": OSError,
    "TypeError": TypeError,
    "ValueError": ValueError,
}


def _raise_or_return(answer: Any) -> Any:
    if isinstance(answer, dict) and "delay_s" in answer:
        import time

        time.sleep(float(answer["delay_s"]))
        answer = answer.get("answer")
    if isinstance(answer, dict) and "nvml_error" in answer:
        raise NvmlCallError(answer["nvml_error"])
    if isinstance(answer, dict) and "exception" in answer:
        exc_type = _REPLAYED_EXCEPTIONS.get(answer["exception"], RuntimeError)
        raise exc_type(answer.get("message", answer["exception"]))
    return answer


_SYMMETRIC = {"nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor"}


class ReplayFacade:
    """Answers every call from a recorded or hand-written scenario; unknown calls are NOT_SUPPORTED."""

    def __init__(self, scenario: Mapping[str, Any]):
        self.scenario = scenario
        self.calls: Mapping[str, Mapping[str, Any]] = scenario.get("calls") or {}
        # Safe to call from the session's prefetch threads: calls only read the scenario; list.append is atomic.
        self.asked: list[tuple[str, str]] = []
        self._initialised = False

    def init(self) -> None:
        init = self.scenario.get("init")
        if isinstance(init, dict) and "nvml_error" in init:
            raise NvmlInitError(init["nvml_error"])
        self._initialised = True

    def shutdown(self) -> None:
        self._initialised = False

    def call(self, function: str, *args: DeviceRef | int) -> Any:
        if not self._initialised:
            raise NvmlCallError("NVML_ERROR_UNINITIALIZED")
        key = call_key(args)
        self.asked.append((function, key))
        answers = self.calls.get(function)
        if answers is None:
            raise NvmlCallError("NVML_ERROR_FUNCTION_NOT_FOUND")
        if key not in answers and function in _SYMMETRIC and len(args) >= 2:
            # P2P status and topology are properties of the pair; hand-built scenarios list a < b only.
            key = call_key((args[1], args[0], *args[2:]))
        if key not in answers:
            raise NvmlCallError("NVML_ERROR_NOT_SUPPORTED")
        return _raise_or_return(answers[key])


class ReplayTorch:
    """The torch side of a scenario: `"torch": null` means torch is not installed."""

    def __init__(self, scenario: Mapping[str, Any]):
        self.data = scenario.get("torch")

    def inventory(self) -> TorchInventory | None:
        if self.data is None:
            return None
        if isinstance(self.data, dict) and "exception" in self.data:
            raise RuntimeError(self.data.get("message", self.data["exception"]))
        return cast(TorchInventory, dict(self.data))  # the scenario's "torch" object, as RealTorch records it

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float | str]:
        recorded = (self.data or {}).get("p2p_copy_gbps") or {} if isinstance(self.data, dict) else {}
        return {(a, b): recorded.get(f"{a},{b}", "not measured: replayed scenario has no measurement") for a, b in pairs}


def load_scenario(path: str | Path) -> dict:
    if files.path_info(str(path), SCENARIO_ENV_VAR).kind == "missing":
        raise UserInputError(f"{SCENARIO_ENV_VAR}: scenario file not found: {path}")
    try:  # bounded like every input (a FIFO, a device, a huge or deeply nested file: one line)
        data = files.load_json_file(str(path), what=f"an {SCENARIO_SCHEMA} file", limit=64 * 2**20,
                                    flag=SCENARIO_ENV_VAR)
    except UserInputError as exc:
        raise UserInputError(f"{SCENARIO_ENV_VAR}: cannot read scenario: {exc.message}") from None
    if not isinstance(data, dict) or data.get("schema") != SCENARIO_SCHEMA or not isinstance(data.get("calls"), dict):
        raise UserInputError(f"{SCENARIO_ENV_VAR}: {path} is not an {SCENARIO_SCHEMA} file")
    return data
