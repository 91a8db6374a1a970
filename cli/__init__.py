"""Command-line interface: parses arguments and routes; no logic lives here."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.cli.entry import main

__getattr__ = lazy_door(__name__)
