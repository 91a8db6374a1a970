"""Rendering a tune run (and its verify result): loaders, input checks, frames, text, Markdown, CSV, HTML."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.reports.tune.loaders import load_inputs, refuse_to_overwrite

__all__ = [
    "load_inputs",
    "refuse_to_overwrite",
]
__getattr__ = lazy_door(__name__, {
    "load_inputs": "loaders",
    "refuse_to_overwrite": "loaders",
})
