"""Device facts: NVML (or torch.cuda) inventory, CUDA_VISIBLE_DEVICES mapping, NVLink/P2P."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.probe.capability import bf16_error, capability_facts, parse_capability
    from attnsel.probe.collect import collect_probe
    from attnsel.probe.cpus import usable_cpu_count
    from attnsel.probe.facts import (
        GpuInfo,
        P2PPair,
        ProbeReport,
        report_fields,
        report_from_fields,
    )
    from attnsel.probe.gpu_table import families, find_gpu, gpu_names, match_device_name
    from attnsel.probe.mixed_gpus import same_model
    from attnsel.probe.requirements import (
        RequirementResult,
        check_requirements,
        fleet_requirements,
        parse_required_capability,
        raise_if_unmet,
    )

__getattr__ = lazy_door(__name__)
