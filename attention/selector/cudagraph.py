"""How vLLM launches one step's attention op: inside a full CUDA graph, or eagerly.

vLLM's default CUDA-graph mode FULL_AND_PIECEWISE captures uniform decode batches as FULL graphs
(attention inside the graph) when the backend's metadata builder supports it, and runs every other
batch through PIECEWISE graphs that split at attention, or without graphs beyond the largest
capture size: the attention kernels then launch eagerly (seed 002, `AttentionCGSupport`;
vllm/v1/cudagraph_dispatcher.py). A decode step is host-bound at small batches, so the two launch
modes differ by 1.3-2x for the same kernel there (docs/gpu-facts.md §4, H100): tune must time each row the
way vLLM will run it.

The facts per release are data in each version's file (attention/versions/*.json, key
`cudagraph`, read from the wheels); the rule below is the same for every release. With vLLM installed, the worker asks vLLM's own dispatcher instead
(attention/kernels/vllm/stack.py) and this answer only fills in when vLLM is absent (stand-ins,
dry runs).
"""

from __future__ import annotations

# AttentionCGSupport order (vllm/v1/attention/backend.py): a larger value supports more batches.
SUPPORT_LEVELS = {"NEVER": 0, "UNIFORM_SINGLE_TOKEN_DECODE": 1, "UNIFORM_BATCH": 2, "ALWAYS": 3}


def cudagraph_support(facts: dict, backend: str, capability: tuple[int, int]) -> str | None:
    """The AttentionCGSupport of `backend`'s builder on a GPU of this capability (None: unknown).
    FLASH_ATTN's builder depends on the FA version vLLM runs: FA3 on CC 9.x (docs/vllm-rules.md §3c), FA4 on
    CC 10.x/11.x where the release has an `fa4` entry (0.33: ALWAYS with FA3 or FA4); FlashInfer
    reaches UNIFORM_BATCH only when it can decode with TRT-LLM kernels (CC 10.x)."""
    entry = facts["support"].get(backend)
    if isinstance(entry, dict):
        if backend == "FLASH_ATTN":
            fa_key = {9: "fa3", 10: "fa4", 11: "fa4"}.get(capability[0], "other")
            return entry.get(fa_key, entry["other"])
        if backend == "FLASHINFER":
            return entry["trtllm" if capability[0] == 10 else "other"]
        return entry.get("other")
    return entry


def decode_launch(facts: dict | None, version: str, backend: str, capability: tuple[int, int], kind: str,
                  num_tokens: int) -> tuple[str, str]:
    """("graph" | "eager", why) for one timed row, by a release's recorded CUDA-graph facts (the
    version object's `cudagraph` data, attention/versions/).

    >>> facts = {"default_mode": "FULL_AND_PIECEWISE", "max_capture_size": 512,
    ...          "support": {"TRITON_ATTN": "ALWAYS", "FLEX_ATTENTION": "NEVER"}}
    >>> decode_launch(facts, "0.24", "TRITON_ATTN", (9, 0), "decode", 64)[0]
    'graph'
    >>> decode_launch(facts, "0.24", "TRITON_ATTN", (9, 0), "mixed", 64)[0]
    'eager'
    >>> decode_launch(facts, "0.24", "FLEX_ATTENTION", (9, 0), "decode", 64)[0]
    'eager'
    """
    where = f"vLLM {version} (recorded)"
    support = cudagraph_support(facts, backend, capability) if facts else None
    if support is None or facts is None:
        return "eager", f"{where}: no CUDA-graph facts for {backend}; timed eagerly"
    if kind != "decode":
        return "eager", (f"{where}: {facts['default_mode']} runs {kind} batches through piecewise graphs "
                         f"split at attention, so attention launches eagerly")
    if SUPPORT_LEVELS[support] < SUPPORT_LEVELS["UNIFORM_SINGLE_TOKEN_DECODE"]:
        return "eager", f"{where}: {backend} builder supports no full CUDA graph ({support}); decode attention runs eagerly"
    limit = int(facts["max_capture_size"])
    if num_tokens > limit:
        return "eager", f"{where}: {num_tokens} decode tokens exceed the largest capture size {limit}; no graph"
    return "graph", f"{where}: {backend} ({support}) decode batches of <= {limit} tokens replay a full CUDA graph"


def default_capture_sizes(facts: dict) -> list[int]:
    """The batch sizes a release captures by default (its `default_capture_sizes` data, up to
    `max_capture_size`), ascending.

    >>> rule = {"listed": [1, 2, 4], "step_8_from": 8, "step_16_from": 256}
    >>> sizes = default_capture_sizes({"max_capture_size": 512, "default_capture_sizes": rule})
    >>> sizes[:5], sizes[-3:], len(sizes)
    ([1, 2, 4, 8, 16], [480, 496, 512], 51)
    """
    rule, top = facts["default_capture_sizes"], int(facts["max_capture_size"])
    step16 = int(rule["step_16_from"])
    sizes = [int(s) for s in rule["listed"] if int(s) <= top]
    sizes += list(range(int(rule["step_8_from"]), min(step16, top + 1), 8))
    sizes += list(range(step16, top + 1, 16))
    return sizes


def capture_sizes_for_batches(facts: dict | None, batches: list[int]) -> list[int] | None:
    """The capture sizes that decode steps of these batch sizes replay in a default deployment: each
    batch padded to the next default size, as vLLM pads it (batches above the largest size run
    without a graph either way). None when the release's facts do not say how to pass them, or no
    batch replays a graph: then vLLM's default list stays.

    >>> rule = {"listed": [1, 2, 4], "step_8_from": 8, "step_16_from": 256}
    >>> facts = {"max_capture_size": 512, "default_capture_sizes": rule, "engine_option": "x"}
    >>> capture_sizes_for_batches(facts, [1, 3, 64, 300, 4096])
    [1, 4, 64, 304]
    >>> capture_sizes_for_batches(facts, [4096]) is None
    True
    """
    if not facts or not facts.get("engine_option") or not facts.get("default_capture_sizes"):
        return None
    sizes = default_capture_sizes(facts)
    padded = {next((s for s in sizes if s >= b), None) for b in batches}
    chosen = sorted(s for s in padded if s is not None)
    return chosen or None
