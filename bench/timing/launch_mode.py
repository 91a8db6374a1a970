"""How a timed row is launched (CUDA graph or eager), which timer times it, and the timing-mode
label every row carries.

Torch-free: the tune parent (bench/sweep/run.py, bench/sweep/groups.py) labels rows with it too.
"""

from __future__ import annotations

from attnsel.words import Word


class LaunchMode(Word):
    """--cuda-graph (GRAPH), --eager (EAGER) or neither (VLLM: each row as vLLM launches it); a timed
    row's "launch" is GRAPH or EAGER."""

    VLLM = "vllm"
    GRAPH = "graph"
    EAGER = "eager"


class Timer(Word):
    """--timer: AUTO (CUPTI where cupti-python works, else CUDA events), CUPTI or EVENTS; a timed row's
    "timer" is CUPTI or EVENTS (bench/timing/gpu.py)."""

    AUTO = "auto"
    CUPTI = "cupti"
    EVENTS = "events"


LAUNCH_POLICIES: tuple[LaunchMode, ...] = tuple(LaunchMode)
TIMED_LAUNCHES: tuple[LaunchMode, ...] = (LaunchMode.GRAPH, LaunchMode.EAGER)
TIMERS: tuple[Timer, ...] = tuple(Timer)


def mode_label(options: dict) -> str:
    """The timing mode every row carries (docs/measuring.md §7: "every result row carries its
    mode"): the launch policy ("vllm": each row launched as vLLM launches it, graph or eager;
    "graph"/"eager": forced) and the L2 state."""
    launch = options.get("launch", LaunchMode.VLLM)
    return f"{launch}-{'cold' if options.get('cold_l2', True) else 'hot'}"


def choose_launch(options: dict, item: dict, details: dict | None) -> tuple[str, str, str]:
    """(launch, why, source) for one row. Forced by --cuda-graph / --eager; otherwise what the
    installed vLLM's own CudagraphDispatcher answered for this batch (the vLLM-driven adapter puts
    it in its details), else the plan's answer from the rule profile's recorded CUDA-graph facts.

    >>> choose_launch({"launch": "vllm"}, {"launch": "eager", "launch_reason": "r"}, {"launch": "graph", "launch_reason": "d"})
    ('graph', 'd', 'installed vLLM')
    >>> choose_launch({"launch": "vllm"}, {"launch": "graph", "launch_reason": "rule"}, None)
    ('graph', 'rule', 'recorded rule')
    >>> choose_launch({"launch": "eager"}, {"launch": "graph"}, {"launch": "graph"})[:2]
    ('eager', 'forced by --eager')
    """
    policy = options.get("launch", LaunchMode.VLLM)
    if policy in TIMED_LAUNCHES:
        flag = "--cuda-graph" if policy == LaunchMode.GRAPH else "--eager"
        return policy, f"forced by {flag}", "flag"
    if details and details.get("launch") in TIMED_LAUNCHES:
        return details["launch"], str(details.get("launch_reason") or ""), "installed vLLM"
    if item.get("launch") in TIMED_LAUNCHES:
        return item["launch"], str(item.get("launch_reason") or ""), "recorded rule"
    return LaunchMode.EAGER, "no CUDA-graph facts for this backend: timed eagerly", "default"

