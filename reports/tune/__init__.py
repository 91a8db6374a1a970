"""Rendering a tune run (and its verify result): loaders, input checks, frames, text, Markdown, CSV, HTML."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.reports.tune.loaders import load_inputs, refuse_to_overwrite

__getattr__ = lazy_door(__name__)
