"""Renderers: tables, JSON, Markdown, HTML. Never call NVML or CUDA."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.reports.fleet_report import (
        fleet_probe_json,
        print_fleet,
        render_preflight_text,
    )
    from attnsel.reports.preflight_report import FORMATS
    from attnsel.reports.probe_document import probe_json
    from attnsel.reports.probe_report import print_probe

__getattr__ = lazy_door(__name__)
