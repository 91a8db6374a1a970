"""Device facts: NVML (or torch.cuda) inventory, CUDA_VISIBLE_DEVICES mapping, NVLink/P2P."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
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

__all__ = [
    "GpuInfo",
    "P2PPair",
    "ProbeReport",
    "RequirementResult",
    "bf16_error",
    "capability_facts",
    "check_requirements",
    "collect_probe",
    "families",
    "find_gpu",
    "fleet_requirements",
    "gpu_names",
    "match_device_name",
    "parse_capability",
    "parse_required_capability",
    "raise_if_unmet",
    "report_fields",
    "report_from_fields",
    "same_model",
    "usable_cpu_count",
]
__getattr__ = lazy_door(__name__, {
    "GpuInfo": "facts",
    "P2PPair": "facts",
    "ProbeReport": "facts",
    "RequirementResult": "requirements",
    "bf16_error": "capability",
    "capability_facts": "capability",
    "check_requirements": "requirements",
    "collect_probe": "collect",
    "families": "gpu_table",
    "find_gpu": "gpu_table",
    "gpu_names": "gpu_table",
    "fleet_requirements": "requirements",
    "match_device_name": "gpu_table",
    "parse_capability": "capability",
    "parse_required_capability": "requirements",
    "raise_if_unmet": "requirements",
    "report_fields": "facts",
    "report_from_fields": "facts",
    "same_model": "mixed_gpus",
    "usable_cpu_count": "cpus",
})
