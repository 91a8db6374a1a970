"""Calling the installed vLLM's functions and classes across releases: keywords a release's function
does not take are dropped, and positional values are named by the release's parameter lists (the
adapter facts in attention/versions/). Pure Python; no torch, no vLLM import.
"""

from __future__ import annotations

import inspect
from typing import Any


def construct(cls: Any, **kwargs: Any) -> Any:
    """`cls(**kwargs)` keeping only the keywords this release's class accepts (config dataclasses
    gain and lose fields between releases)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return cls(**kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return cls(**kwargs)
    return cls(**{k: v for k, v in kwargs.items() if k in params})


def call_accepting(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` dropping keywords the installed vLLM's function does not take."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args, **kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **kwargs)
    return fn(*args, **{k: v for k, v in kwargs.items() if k in params})


def keyword_arguments(names: tuple[str, ...], *values: Any) -> dict:
    """`values` under this release's parameter names (one of the adapter facts' lists)."""
    if len(names) != len(values):
        raise ValueError(f"{len(values)} values for the parameters {', '.join(names)}")
    return dict(zip(names, values))


def keyword_call(fn: Any, names: tuple[str, ...], *values: Any) -> Any:
    """`fn` called with `values` under this release's parameter names."""
    return fn(**keyword_arguments(names, *values))
