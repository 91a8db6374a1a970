"""NVML, real or replayed: one session funnel, the protocol every facade speaks, the per-GPU reader."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.probe.nvml.gpus import (
        RawGpu,
        cuda_version_str,
        gpu_calls,
        gpu_info,
        gpu_problems,
        query_problems,
        read_gpu,
    )
    from attnsel.probe.nvml.prefetch import THREADS_ENV_VAR, probe_threads
    from attnsel.probe.nvml.protocol import (
        CLOCK_MEM,
        CLOCK_SM,
        NVLINK_MAX_LINKS,
        P2P_CAPS_INDEX,
        P2P_STATUS_NAMES,
        P2P_STATUS_OK,
        NvmlCallError,
        NvmlFacade,
        NvmlInitError,
        TorchFacade,
        call_key,
    )
    from attnsel.probe.nvml.pynvml_facade import PynvmlFacade
    from attnsel.probe.nvml.replay import SCENARIO_SCHEMA, ReplayFacade, ReplayTorch
    from attnsel.probe.nvml.session import NvmlSession, facades_from_env
    from attnsel.probe.nvml.torch_cuda import RealTorch, cuda_driver_missing

__getattr__ = lazy_door(__name__)
