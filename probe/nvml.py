"""One door to NVML (and to torch.cuda for the fallback), real or replayed from a scenario.

Everything the probe learns from the driver goes through `NvmlSession.get`, in the style of
nvitop's `nvmlQuery`: any exception from one query -- an `NVMLError`, but also a
`ctypes.ArgumentError` (nvidia-ml-py 13.615.71 defines `NVML_P2P_CAPS_INDEX_READ` as the tuple
`(0,)`, gpu-facts.md) -- becomes "unknown" for that query only and is kept as a `QueryFailure`.
Only a failing `nvmlInit` is fatal; the collector then falls back to torch.

Facades speak in plain, JSON-able values so that a recording of the real one can be replayed:
  device refs: the NVML index (int) of a physical GPU, or "i:j" for MIG device j of GPU i;
  answers:     str / int / list / dict (a ctypes struct becomes a dict of its fields).
A scenario (tests/fixtures/probe/*.json, or `python -m attnsel.bench.record_nvml`) is
  {"schema": "attnsel-nvml-scenario/1", "init": null | {"nvml_error": "NVML_ERROR_..."},
   "calls": {function: {key: answer}}, "torch": null | {...}, "env": {...}}
where key is the call's arguments joined by "," ("" for none, "0", "0,1,2", "0:1") and an answer
is a value, {"nvml_error": "NVML_ERROR_GPU_IS_LOST"} or {"exception": "ArgumentError", "message": ...};
{"delay_s": 600, "answer": ...} answers after a delay (an NVML call that hangs, as on a GPU that fell
off the bus).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Union

from attnsel.errors import UserInputError

DeviceRef = Union[int, str]
SCENARIO_ENV_VAR = "ATTNSEL_NVML_SCENARIO"
SCENARIO_SCHEMA = "attnsel-nvml-scenario/1"

# NVML return codes (nvml.h); written out so that the replay and the tests never need pynvml.
NVML_ERROR_NAMES: dict[int, str] = {
    1: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED",
    4: "NVML_ERROR_NO_PERMISSION",
    5: "NVML_ERROR_ALREADY_INITIALIZED",
    6: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE",
    8: "NVML_ERROR_INSUFFICIENT_POWER",
    9: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT",
    11: "NVML_ERROR_IRQ_ISSUE",
    12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND",
    14: "NVML_ERROR_CORRUPTED_INFOROM",
    15: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED",
    17: "NVML_ERROR_OPERATING_SYSTEM",
    18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    19: "NVML_ERROR_IN_USE",
    20: "NVML_ERROR_MEMORY",
    21: "NVML_ERROR_NO_DATA",
    28: "NVML_ERROR_GPU_NOT_FOUND",
    999: "NVML_ERROR_UNKNOWN",
}
NVML_ERROR_CODES: dict[str, int] = {name: code for code, name in NVML_ERROR_NAMES.items()}
# The strings nvmlErrorString gives (as nvidia-ml-py caches them).
NVML_ERROR_MESSAGES: dict[str, str] = {
    "NVML_ERROR_UNINITIALIZED": "Uninitialized",
    "NVML_ERROR_INVALID_ARGUMENT": "Invalid Argument",
    "NVML_ERROR_NOT_SUPPORTED": "Not Supported",
    "NVML_ERROR_NO_PERMISSION": "Insufficient Permissions",
    "NVML_ERROR_NOT_FOUND": "Not Found",
    "NVML_ERROR_DRIVER_NOT_LOADED": "Driver Not Loaded",
    "NVML_ERROR_TIMEOUT": "Timeout",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML Shared Library Not Found",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "Function Not Found",
    "NVML_ERROR_CORRUPTED_INFOROM": "Corrupted infoROM",
    "NVML_ERROR_GPU_IS_LOST": "GPU is lost",
    "NVML_ERROR_RESET_REQUIRED": "GPU requires restart",
    "NVML_ERROR_OPERATING_SYSTEM": "The operating system has blocked the request.",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "RM has detected an NVML/RM version mismatch.",
    "NVML_ERROR_MEMORY": "Insufficient Memory",
    "NVML_ERROR_UNKNOWN": "Unknown Error",
}
# What to tell the user when nvmlInit fails (gpustat-style remediation).
INIT_HINTS: dict[str, str] = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "libnvidia-ml.so was not found: no NVIDIA driver installed, or the "
    "container was started without the NVIDIA runtime (--gpus all)",
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded (check `nvidia-smi`, `lsmod | grep nvidia`)",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "the NVML library and the kernel driver differ, usually after a driver "
    "upgrade without a reboot: reboot or reload the nvidia kernel module",
    "NVML_ERROR_NO_PERMISSION": "no permission to open /dev/nvidia*",
}

# Constants passed to NVML as plain integers on purpose: nvidia-ml-py 13.615.71 has
# `NVML_P2P_CAPS_INDEX_READ = 0,` (a tuple) and passing it raises ctypes.ArgumentError (gpu-facts.md).
P2P_CAPS_INDEX = {"READ": 0, "WRITE": 1, "NVLINK": 2, "ATOMICS": 3}
P2P_STATUS_NAMES = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}
P2P_STATUS_OK = 0
CLOCK_SM = 1
CLOCK_MEM = 2
NVLINK_MAX_LINKS = 18  # NVLink 4/5 GPUs expose 18 links; we stop at the first link NVML rejects


class NvmlCallError(Exception):
    """An NVML return code other than SUCCESS, independent of pynvml's exception classes."""

    def __init__(self, name: str, code: Optional[int] = None):
        self.name = name
        self.code = code if code is not None else NVML_ERROR_CODES.get(name)
        self.message = NVML_ERROR_MESSAGES.get(name, name)
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.message} ({self.name})"


class NvmlInitError(NvmlCallError):
    """nvmlInit failed: NVML cannot be used at all in this process."""

    @property
    def hint(self) -> Optional[str]:
        return INIT_HINTS.get(self.name)


class NvmlFacade(Protocol):
    """What the probe needs from NVML. Implementations: PynvmlFacade, ReplayFacade."""

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def call(self, function: str, *args: DeviceRef | int) -> Any: ...


class TorchFacade(Protocol):
    """The torch.cuda fallback: None when torch is not importable, else a plain inventory dict
    {"version", "cuda", "devices": [{"name", "major", "minor", "total_memory", "uuid", "pci_bus_id",
    "multi_processor_count"}]}."""

    def inventory(self) -> Optional[dict]: ...

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], Union[float, str]]:
        """GB/s of a GPU a -> GPU b copy per pair (logical indices), or a reason it was not measured."""
        ...


def call_key(args: tuple) -> str:
    """The scenario key for one call's arguments.

    >>> call_key(())
    ''
    >>> call_key((0, 1, 2))
    '0,1,2'
    >>> call_key(("3:1",))
    '3:1'
    """
    return ",".join(str(a) for a in args)


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


def _uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _UINT_MAX


def _uint_fields(*names: str) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(_uint(v.get(n)) for n in names)


_STRING_ANSWERS = ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlSystemGetDriverVersion")
_INT_ANSWERS = (
    "nvmlDeviceGetCount", "nvmlDeviceGetMemoryBusWidth", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetNumGpuCores", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId", "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
)
_SHAPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    **{name: ("a string", lambda v: isinstance(v, str)) for name in _STRING_ANSWERS},
    **{name: ("an unsigned integer", _uint) for name in _INT_ANSWERS},
    "nvmlDeviceGetCudaComputeCapability": ("[major, minor]", lambda v: isinstance(v, list) and len(v) == 2
                                           and all(_uint(x) and x < 100 for x in v)),
    "nvmlDeviceGetMigMode": ("[current, pending]", lambda v: isinstance(v, list) and len(v) == 2 and all(map(_uint, v))),
    "nvmlDeviceGetMemoryInfo": ("a memory struct", _uint_fields("total", "free", "used")),
    "nvmlDeviceGetPciInfo": ("a PCI info struct", lambda v: isinstance(v, dict) and isinstance(v.get("busId"), str)),
}


def answer_problem(function: str, answer: Any) -> Optional[str]:
    """Why an NVML answer cannot be what `function` returns, or None when it can."""
    shape = _SHAPES.get(function)
    if shape is None or shape[1](answer):
        return None
    shown = repr(answer)
    return f"answered {shown if len(shown) <= 60 else shown[:57] + '...'}, not {shape[0]}"


class NvmlSession:
    """The funnel every NVML query goes through; failures become None and are remembered."""

    def __init__(self, facade: NvmlFacade):
        self.facade = facade
        self.failures: list[QueryFailure] = []

    def get(self, function: str, *args: DeviceRef | int, quiet: bool = False) -> Any:
        """The answer, or None when the query raised anything. `quiet` queries probe for existence
        (MIG slots, NVLink link numbers) and their expected failures are not kept."""
        try:
            answer = self.facade.call(function, *args)
            problem = answer_problem(function, answer)
            if problem is None:
                return answer
            failure = QueryFailure(function, call_key(args), INVALID_ANSWER, problem)
        except NvmlCallError as exc:
            failure = QueryFailure(function, call_key(args), exc.name, exc.message)
        except Exception as exc:  # noqa: BLE001 -- e.g. ctypes.ArgumentError (gpu-facts.md)
            failure = QueryFailure(function, call_key(args), type(exc).__name__, str(exc) or type(exc).__name__)
        if not quiet:
            self.failures.append(failure)
        return None

    def last_failure(self) -> Optional[QueryFailure]:
        return self.failures[-1] if self.failures else None

    def failures_for(self, ref: DeviceRef) -> list[QueryFailure]:
        token = str(ref)
        return [f for f in self.failures if f.key.split(",")[0] == token]


# ---------------------------------------------------------------------------------------------
# Real NVML through nvidia-ml-py


def _plain(value: Any) -> Any:
    """ctypes structs -> dicts, bytes -> str, tuples -> lists: the JSON form scenarios store."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, ctypes.Structure):
        return {name: _plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [_plain(v) for v in value]
    return value


class PynvmlFacade:
    """NVML through nvidia-ml-py (`import pynvml`). Creates no CUDA context."""

    def __init__(self) -> None:
        self._pynvml = None
        self._handles: dict[DeviceRef, Any] = {}

    def init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py is a base dependency, but be kind anyway
            raise NvmlInitError("NVML_ERROR_LIBRARY_NOT_FOUND") from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlInitError(NVML_ERROR_NAMES.get(exc.value, f"NVML_ERROR_{exc.value}"), exc.value) from None
        except OSError as exc:  # some loaders raise OSError directly
            raise NvmlInitError("NVML_ERROR_LIBRARY_NOT_FOUND") from exc
        self._pynvml = pynvml

    def shutdown(self) -> None:
        if self._pynvml is not None:
            try:
                self._pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 -- shutting down must never fail the probe
                pass
            self._pynvml = None
            self._handles.clear()

    def _handle(self, ref: DeviceRef) -> Any:
        if ref in self._handles:
            return self._handles[ref]
        nv = self._pynvml
        if isinstance(ref, str) and ":" in ref:
            parent, child = (int(x) for x in ref.split(":"))
            handle = nv.nvmlDeviceGetMigDeviceHandleByIndex(self._handle(parent), child)
        else:
            handle = nv.nvmlDeviceGetHandleByIndex(int(ref))
        self._handles[ref] = handle
        return handle

    def call(self, function: str, *args: DeviceRef | int) -> Any:
        nv = self._pynvml
        if nv is None:
            raise NvmlCallError("NVML_ERROR_UNINITIALIZED")
        try:
            return self._dispatch(function, args)
        except nv.NVMLError as exc:
            raise NvmlCallError(NVML_ERROR_NAMES.get(exc.value, f"NVML_ERROR_{exc.value}"), exc.value) from None

    def _dispatch(self, function: str, args: tuple) -> Any:
        nv = self._pynvml
        if function == "nvmlDeviceGetMigDeviceHandleByIndex":
            parent, child = args
            self._handle(f"{parent}:{child}")
            return f"{parent}:{child}"
        func = getattr(nv, function, None)
        if func is None:
            raise NvmlCallError("NVML_ERROR_FUNCTION_NOT_FOUND")
        if function.startswith("nvmlSystem") or function == "nvmlDeviceGetCount":
            return _plain(func())
        device_args: list[Any] = [self._handle(args[0])]
        rest = list(args[1:])
        if function in ("nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor"):
            device_args.append(self._handle(rest.pop(0)))
        return _plain(func(*device_args, *rest))


# ---------------------------------------------------------------------------------------------
# Replay from a scenario


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

    def inventory(self) -> Optional[dict]:
        if self.data is None:
            return None
        if isinstance(self.data, dict) and "exception" in self.data:
            raise RuntimeError(self.data.get("message", self.data["exception"]))
        return dict(self.data)

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], Union[float, str]]:
        recorded = (self.data or {}).get("p2p_copy_gbps") or {} if isinstance(self.data, dict) else {}
        return {(a, b): recorded.get(f"{a},{b}", "not measured: replayed scenario has no measurement") for a, b in pairs}


class RealTorch:
    """torch.cuda, imported only when NVML failed. Reads properties only (no mem_get_info), so it
    initialises CUDA but allocates nothing."""

    def inventory(self) -> Optional[dict]:
        try:
            import torch
        except Exception:  # noqa: BLE001 -- any import failure means "no torch"
            return None
        info: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda, "devices": []}
        if not torch.cuda.is_available():
            return info
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            info["devices"].append(_torch_props_to_dict(props))
        return info

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], Union[float, str]]:
        from attnsel.probe.p2p_bandwidth import measure_pairs

        return measure_pairs(pairs)


def _torch_props_to_dict(props: Any) -> dict:
    uuid = getattr(props, "uuid", None)
    uuid_str = str(uuid) if uuid is not None else None
    if uuid_str and not uuid_str.startswith(("GPU-", "MIG-")):
        uuid_str = "GPU-" + uuid_str
    bus = getattr(props, "pci_bus_id", None)
    pci = None
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0) or 0
        slot = getattr(props, "pci_device_id", 0) or 0
        pci = f"{domain:08X}:{bus:02X}:{slot:02X}.0"
    return {
        "name": props.name,
        "major": props.major,
        "minor": props.minor,
        "total_memory": int(props.total_memory),
        "multi_processor_count": getattr(props, "multi_processor_count", None),
        "uuid": uuid_str,
        "pci_bus_id": pci,
    }


# ---------------------------------------------------------------------------------------------


def load_scenario(path: Union[str, Path]) -> dict:
    from attnsel import files

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


def facades_from_env(env: Mapping[str, str]) -> tuple[NvmlFacade, TorchFacade, Optional[dict]]:
    """The replay facades when ATTNSEL_NVML_SCENARIO names a scenario, else the real ones."""
    path = env.get(SCENARIO_ENV_VAR)
    if path:
        scenario = load_scenario(path)
        return ReplayFacade(scenario), ReplayTorch(scenario), scenario
    return PynvmlFacade(), RealTorch(), None
