"""Help without Python type names: Typer 0.29 shows `<bool>` after a flag and `<list[Path]>` after
an argument. A flag takes no value, so it gets no label; a value gets a word a user reads (TEXT,
N, NUMBER, PATH; `...` where several may follow), or the option's own metavar."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, get_args, get_origin

if TYPE_CHECKING:
    from typer._click import (  # Typer >= 0.29 vendors click (cli/fast_params.py)
        Command,
        Parameter,
    )

_WORDS = {str: "TEXT", int: "N", float: "NUMBER", Path: "PATH"}


def _label(param: Parameter) -> str | None:
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if getattr(param, "metavar", None) is not None and getattr(param, "param_type_name", "") != "argument":
        return param.metavar  # an argument's metavar is its name, shown already
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    many = get_origin(annotation) is list
    if many:
        annotation = (get_args(annotation) or (str,))[0]
    word = _WORDS.get(annotation, "VALUE") if isinstance(annotation, type) else "VALUE"
    return word + ("..." if many or getattr(param, "nargs", 1) != 1 else "")


def plain_help_labels(command: Command) -> None:
    """Replace each parameter's help type label of `command` (once; idempotent)."""
    help_option = getattr(command, "_help_option", None)  # -h/--help, built by cli/fast_params.py install
    for param in [*getattr(command, "params", ()), *([help_option] if help_option else [])]:
        if hasattr(param, "display_type_rich"):
            label = _label(param)
            param.display_type_rich = lambda ctx, label=label: label
