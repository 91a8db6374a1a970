"""Start-up time: plain option values (str, int, float, bool, Path) coerced without pydantic.

Typer 0.29 coerces every parameter through a pydantic TypeAdapter, built when the command runs,
even for options left at their default; importing pydantic and building ~40 adapters costs about
0.1 s of `attnsel explain`'s 0.25 s (bench/tools/explain_speed.py, docs/explain.md, "Speed"). Our options are
plain scalars whose range checks live in attention/model/validation.py, so they get a small coercer of
their own; anything else (lists, files, min/max, custom parsers) keeps Typer's. With a Typer that
has no `_runtime_param` hook (before 0.29) nothing changes. The other parameters get Typer's own
coercer only when they are given a value: left unset (None), they stay None without importing pydantic
(`attnsel probe` with its `--require-gpus` option unset: ~0.08 s of its start-up, docs/probe.md "Speed").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}


def _to_int(value: str | float) -> int:
    if isinstance(value, str):
        return int(value.strip())
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return int(value)


_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


def _to_bool(value: object) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(value)


_CONVERT: dict[type, Callable[[Any], Any]] = {str: str, int: _to_int, float: float, bool: _to_bool, Path: Path}


class PlainParam:
    """Duck-types Typer's RuntimeParam: `coerce(value, param, ctx)`."""

    def __init__(self, annotation: type):
        self.annotation = annotation
        self.convert = _CONVERT[annotation]

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, self.annotation) and not (self.annotation is int and isinstance(value, bool)):
            return value
        try:
            return self.convert(value)
        except (TypeError, ValueError, OverflowError):
            from typer import BadParameter

            raise BadParameter(f"{value!r} is not a valid {_NAMES[self.annotation]}.", ctx=ctx, param=param) from None


class TyperParamWhenGiven:
    """Typer's own coercer for a parameter that is not plain, built only once it has a value; an unset
    value answers as Typer's RuntimeParam.coerce does (None, or () for a multi-value parameter)."""

    def __init__(self, param: Any):
        self.param = param
        self.built: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        if self.built is None:
            from typer._coercion import build_runtime_param

            self.built = build_runtime_param(self.param.type_descriptor)
        return self.built.coerce(value, param=param, ctx=ctx)


def _plain_annotation(param: Any) -> Any:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or getattr(descriptor, "file_annotation", None) is not None:
        return None
    info = getattr(descriptor, "parameter_info", None)
    if info is None or any(getattr(info, attr, None) for attr in ("min", "max", "clamp", "parser", "click_type")):
        return None
    if getattr(param, "multiple", False) or getattr(param, "nargs", 1) != 1:
        return None
    annotation = getattr(descriptor, "annotation", None)
    return annotation if annotation in _CONVERT else None


HELP_NAMES = ("-h", "--help")  # cli/app.py context_settings


def _help_option(command: Any) -> Any:
    """click builds -h/--help lazily (and caches it in `_help_option`); build it now, as click would,
    so that it too skips pydantic."""
    if getattr(command, "_help_option", False) is not None:
        return getattr(command, "_help_option", None)
    taken = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    names = [n for n in HELP_NAMES if n not in taken]
    if not names or not getattr(command, "add_help_option", True):
        return None
    try:
        from typer._click.decorators import help_option
    except ImportError:
        return None
    help_option(names)(command)
    command._help_option = command.params.pop()
    return command._help_option


def install(command: Any) -> None:
    """Give each plain parameter of a click/Typer command the pydantic-free coercer (once)."""
    params = list(getattr(command, "params", ()))
    if hasattr(command, "_help_option"):
        params.append(_help_option(command))
    for param in params:
        if not hasattr(param, "_runtime_param") or param._runtime_param is not None:
            continue
        annotation = _plain_annotation(param)
        if annotation is not None:
            param._runtime_param = PlainParam(annotation)
        elif getattr(param, "type_descriptor", None) is not None:
            param._runtime_param = TyperParamWhenGiven(param)
