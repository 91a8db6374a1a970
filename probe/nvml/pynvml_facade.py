"""Real NVML through nvidia-ml-py (`import pynvml`, imported only at `init`). Creates no CUDA context."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from attnsel.probe.nvml.protocol import (
    NVML_ERROR_NAMES,
    DeviceRef,
    NvmlCallError,
    NvmlInitError,
)


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
        self._pynvml: Any = None  # the pynvml module once init() loaded it
        self._handles: dict[DeviceRef, Any] = {}
        # The session may ask from several threads (probe/nvml/prefetch.py): one lookup per device ref
        # at a time. Re-entrant: a MIG ref looks up its parent's handle first.
        self._handles_lock = threading.RLock()

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
        with self._handles_lock:
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

