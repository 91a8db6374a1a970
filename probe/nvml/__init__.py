"""NVML, real or replayed: one session funnel, the protocol every facade speaks, the per-GPU reader."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
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

__all__ = [
    "CLOCK_MEM",
    "CLOCK_SM",
    "NVLINK_MAX_LINKS",
    "P2P_CAPS_INDEX",
    "P2P_STATUS_NAMES",
    "P2P_STATUS_OK",
    "SCENARIO_SCHEMA",
    "THREADS_ENV_VAR",
    "NvmlCallError",
    "NvmlFacade",
    "NvmlInitError",
    "NvmlSession",
    "PynvmlFacade",
    "RawGpu",
    "RealTorch",
    "ReplayFacade",
    "ReplayTorch",
    "TorchFacade",
    "call_key",
    "cuda_driver_missing",
    "cuda_version_str",
    "facades_from_env",
    "gpu_calls",
    "gpu_info",
    "gpu_problems",
    "probe_threads",
    "query_problems",
    "read_gpu",
]
__getattr__ = lazy_door(__name__, {
    "CLOCK_MEM": "protocol",
    "CLOCK_SM": "protocol",
    "NVLINK_MAX_LINKS": "protocol",
    "NvmlCallError": "protocol",
    "NvmlFacade": "protocol",
    "NvmlInitError": "protocol",
    "NvmlSession": "session",
    "P2P_CAPS_INDEX": "protocol",
    "P2P_STATUS_NAMES": "protocol",
    "P2P_STATUS_OK": "protocol",
    "PynvmlFacade": "pynvml_facade",
    "RawGpu": "gpus",
    "RealTorch": "torch_cuda",
    "ReplayFacade": "replay",
    "ReplayTorch": "replay",
    "SCENARIO_SCHEMA": "replay",
    "THREADS_ENV_VAR": "prefetch",
    "TorchFacade": "protocol",
    "call_key": "protocol",
    "cuda_driver_missing": "torch_cuda",
    "cuda_version_str": "gpus",
    "facades_from_env": "session",
    "gpu_calls": "gpus",
    "gpu_info": "gpus",
    "gpu_problems": "gpus",
    "probe_threads": "prefetch",
    "query_problems": "gpus",
    "read_gpu": "gpus",
})
