"""How a timed row is launched (CUDA graph or eager) and the timing-mode label every row carries.

Torch-free: the tune parent (bench/sweep/run.py, bench/sweep/groups.py) labels rows with it too.
"""

from __future__ import annotations

LAUNCH_POLICIES = ("vllm", "graph", "eager")


def mode_label(options: dict) -> str:
    """The timing mode every row carries (docs/measuring.md §7: "every result row carries its
    mode"): the launch policy ("vllm": each row launched as vLLM launches it, graph or eager;
    "graph"/"eager": forced) and the L2 state."""
    launch = options.get("launch", "vllm")
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
    policy = options.get("launch", "vllm")
    if policy in ("graph", "eager"):
        flag = "--cuda-graph" if policy == "graph" else "--eager"
        return policy, f"forced by {flag}", "flag"
    if details and details.get("launch") in ("graph", "eager"):
        return details["launch"], str(details.get("launch_reason") or ""), "installed vLLM"
    if item.get("launch") in ("graph", "eager"):
        return item["launch"], str(item.get("launch_reason") or ""), "recorded rule"
    return "eager", "no CUDA-graph facts for this backend: timed eagerly", "default"

