"""What every NVML facade speaks: device refs, call keys, NVML's error codes, the constants passed
to NVML (defined here only) and the errors raised.

The real facade (probe/nvml/pynvml_facade.py), the replay (probe/nvml/replay.py) and the session
funnel (probe/nvml/session.py) all build on these; callers import them from the door (probe/nvml).

Facades speak in plain, JSON-able values so that a recording of the real one can be replayed:
  device refs: the NVML index (int) of a physical GPU, or "i:j" for MIG device j of GPU i;
  answers:     str / int / list / dict (a ctypes struct becomes a dict of its fields).
"""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

DeviceRef = int | str

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
# `NVML_P2P_CAPS_INDEX_READ = 0,` (a tuple) and passing it raises ctypes.ArgumentError (docs/gpu-facts.md §2).
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

    def __init__(self, name: str, code: int | None = None):
        self.name = name
        self.code = code if code is not None else NVML_ERROR_CODES.get(name)
        self.message = NVML_ERROR_MESSAGES.get(name, name)
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.message} ({self.name})"


class NvmlInitError(NvmlCallError):
    """nvmlInit failed: NVML cannot be used at all in this process."""

    @property
    def hint(self) -> str | None:
        return INIT_HINTS.get(self.name)


class NvmlFacade(Protocol):
    """What the probe needs from NVML. Implementations: PynvmlFacade, ReplayFacade."""

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def call(self, function: str, *args: DeviceRef | int) -> Any: ...


class TorchDevice(TypedDict, total=False):
    """One GPU as torch.cuda describes it (a recorded scenario may lack keys)."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int | None
    uuid: str | None
    pci_bus_id: str | None


class TorchInventory(TypedDict, total=False):
    """What torch.cuda says: its version, its CUDA, the GPUs it sees (a scenario's "torch" object)."""

    version: str
    cuda: str | None
    devices: list[TorchDevice]


class TorchFacade(Protocol):
    """The torch.cuda fallback: None when torch is not importable, else its inventory."""

    def inventory(self) -> TorchInventory | None: ...

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float | str]:
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

