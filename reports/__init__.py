"""Renderers: tables, JSON, Markdown, HTML. Never call NVML or CUDA."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.reports.fleet_report import (
        fleet_probe_json,
        print_fleet,
        render_preflight_text,
    )
    from attnsel.reports.preflight_report import FORMATS
    from attnsel.reports.probe_document import probe_json
    from attnsel.reports.probe_report import print_probe

__all__ = [
    "FORMATS",
    "fleet_probe_json",
    "print_fleet",
    "print_probe",
    "probe_json",
    "render_preflight_text",
]
__getattr__ = lazy_door(__name__, {
    "FORMATS": "preflight_report",
    "fleet_probe_json": "fleet_report",
    "print_fleet": "fleet_report",
    "print_probe": "probe_report",
    "probe_json": "probe_document",
    "render_preflight_text": "fleet_report",
})
