"""Command-line interface: parses arguments and routes; no logic lives here."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.cli.entry import main

__all__ = [
    "main",
]
__getattr__ = lazy_door(__name__, {
    "main": "entry",
})
