"""Read what vLLM's engine logged about itself: the backend it used, its KV cache, its compile
and CUDA-graph work. `attnsel verify` keeps each engine's log (its stdout and stderr, where
vLLM's logger writes) and reads these lines from it; the engine worker also reads the backend
and the KV cache back in-process (bench/verify/engine_worker.py), and where both exist they must agree.

Each pattern mirrors one vLLM 0.24.0 log call (file:line of vLLM's source in the comment). A
line vLLM no longer prints leaves its field out; nothing here is required. Lines carry vLLM's
prefix, e.g. "(EngineCore_DP0 pid=123) INFO 11-24 10:00:01 [cuda.py:481] Using ...", so every
pattern searches anywhere in the line.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

_NUMBER = r"([\d,]+(?:\.\d+)?)"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


# (field, pattern, how to read the match); the first match wins unless the field is a list.
_PATTERNS: list[tuple[str, "re.Pattern[str]", Callable[["re.Match[str]"], Any]]] = [
    # platforms/cuda.py:481 (vLLM picked it) and :419 (--attention-backend given)
    ("backend_selected", re.compile(r"Using (\w+) attention backend out of potential backends"), lambda m: m.group(1)),
    ("backend_selected", re.compile(r"Using (?:AttentionBackendEnum\.)?(\w+) backend\.\s*$"), lambda m: m.group(1)),
    # platforms/interface.py:621
    ("block_size_set", re.compile(r"Setting kv cache block size to (\d+) for (\w+) backend"), lambda m: int(m.group(1))),
    # v1/attention/backends/flash_attn.py:671
    ("flash_attn_version", re.compile(r"Using FlashAttention version (\d+)"), lambda m: int(m.group(1))),
    # v1/worker/gpu_model_runner.py:5256
    ("model_load_s", re.compile(rf"Model loading took {_NUMBER} GiB memory and {_NUMBER} seconds"), lambda m: _number(m.group(2))),
    ("model_memory_gib", re.compile(rf"Model loading took {_NUMBER} GiB memory"), lambda m: _number(m.group(1))),
    # compilation/backends.py:1148, compilation/monitor.py:53
    ("dynamo_s", re.compile(rf"Dynamo bytecode transform time: {_NUMBER} s"), lambda m: _number(m.group(1))),
    ("torch_compile_s", re.compile(rf"torch\.compile took {_NUMBER} s in total"), lambda m: _number(m.group(1))),
    # compilation/backends.py:292 (a graph read from the compile cache) and :393 (compiled now)
    ("compile_cache_hits", re.compile(r"Directly load the compiled graph\(s\) for compile range"), lambda m: 1),
    ("compile_cache_misses", re.compile(r"Compiling a graph for compile range"), lambda m: 1),
    # compilation/backends.py:1089
    ("compile_cache_dir", re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile"), lambda m: m.group(1)),
    # v1/worker/gpu_worker.py:509
    ("kv_cache_memory_gib", re.compile(rf"Available KV cache memory: {_NUMBER} GiB"), lambda m: _number(m.group(1))),
    # v1/core/kv_cache_utils.py:2146-2148
    ("kv_cache_tokens", re.compile(rf"GPU KV cache size: {_NUMBER} tokens"), lambda m: int(_number(m.group(1)))),
    ("max_concurrency", re.compile(rf"Maximum concurrency for {_NUMBER} tokens per request: {_NUMBER}x"),
     lambda m: {"tokens": int(_number(m.group(1))), "requests": _number(m.group(2))}),
    # config/compilation.py:1353-1400 (vLLM lowered the CUDA-graph mode for this backend)
    ("cudagraph_mode_set", re.compile(r"setting cudagraph_mode=(\w+)"), lambda m: m.group(1)),
    # v1/worker/gpu_model_runner.py:6718 (tqdm description of each capture pass)
    ("cudagraph_captures", re.compile(r"Capturing CUDA graphs \(([\w -]+), (\w+)\)"), lambda m: f"{m.group(1)}: {m.group(2)}"),
    # v1/worker/gpu_model_runner.py:6657
    ("graph_capture_s", re.compile(rf"Graph capturing finished in {_NUMBER} secs"), lambda m: _number(m.group(1))),
    ("graph_memory_gib", re.compile(rf"Graph capturing finished in {_NUMBER} secs, took {_NUMBER} GiB"), lambda m: _number(m.group(2))),
    # v1/engine/core.py:328-345
    ("init_engine_s", re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_NUMBER} s"),
     lambda m: _number(m.group(1))),
    ("compilation_s", re.compile(rf"init engine .* took {_NUMBER} s \(compilation: {_NUMBER} s"), lambda m: _number(m.group(2))),
]
# flashinfer/autotuner.py:622 and :641 (flashinfer-python 0.6.12, run by vLLM's kernel warm-up):
# FlashInfer's own logger stamps its lines; the time between the two is its autotuning
_FLASHINFER_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - INFO - autotuner\.py:\d+ - flashinfer\.jit: \[Autotuner\]: "
_AUTOTUNE_START = re.compile(_FLASHINFER_STAMP + r"Autotuning process starts")
_AUTOTUNE_END = re.compile(_FLASHINFER_STAMP + r"Autotuning process ends")
_COUNTED = {"compile_cache_hits", "compile_cache_misses"}
_LISTED = {"cudagraph_captures"}


def parse_engine_log(text: str) -> dict:
    """The facts vLLM logged, by field (see _PATTERNS); fields it did not log are absent.

    >>> facts = parse_engine_log("(EngineCore pid=7) INFO [kv_cache_utils.py:2146] GPU KV cache size: 834,272 tokens")
    >>> facts["kv_cache_tokens"]
    834272
    """
    facts: dict[str, Any] = {}
    for raw in text.splitlines():
        # tqdm redraws its bar with carriage returns: each redraw is a line of its own
        for line in raw.split("\r"):
            _read_line(line, facts)
    if "compile_cache_hits" in facts or "compile_cache_misses" in facts:
        facts["compile_cache"] = _cache_state(facts.get("compile_cache_hits", 0), facts.get("compile_cache_misses", 0))
    autotune = flashinfer_autotune_s(text)
    if autotune is not None:
        facts["flashinfer_autotune_s"] = autotune
    return facts


def flashinfer_autotune_s(text: str) -> Optional[float]:
    """Seconds FlashInfer's autotuner ran during the engine's start (first start to last end), from
    its own time stamps; None when it did not log both.

    >>> flashinfer_autotune_s("2026-11-25 03:47:52,339 - INFO - autotuner.py:622 - flashinfer.jit: [Autotuner]: "
    ...     "Autotuning process starts ...\\n2026-11-25 03:49:49,975 - INFO - autotuner.py:641 - flashinfer.jit: "
    ...     "[Autotuner]: Autotuning process ends")
    117.636
    """
    from datetime import datetime

    starts, ends = _AUTOTUNE_START.findall(text), _AUTOTUNE_END.findall(text)
    if not starts or not ends:
        return None
    stamp = "%Y-%m-%d %H:%M:%S,%f"
    seconds = (datetime.strptime(ends[-1], stamp) - datetime.strptime(starts[0], stamp)).total_seconds()
    return round(seconds, 3) if seconds >= 0 else None


def _read_line(line: str, facts: dict) -> None:
    for name, pattern, read in _PATTERNS:
        match = pattern.search(line)
        if match is None:
            continue
        value = read(match)
        if name in _COUNTED:
            facts[name] = facts.get(name, 0) + value
        elif name in _LISTED:
            seen = facts.setdefault(name, [])
            if value not in seen:
                seen.append(value)
        else:
            facts.setdefault(name, value)


def _cache_state(hits: int, misses: int) -> str:
    """Whether torch.compile's work came from vLLM's compile cache (VLLM_CACHE_ROOT)."""
    if hits and not misses:
        return "hit"
    if misses and not hits:
        return "miss"
    return "partial"


def read_log(path, start: int = 0) -> str:
    """The log text from byte `start` on ("" when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def tail(text: str, limit: int = 600) -> str:
    """The end of a log, for an error line: the last non-empty lines within `limit` characters."""
    lines = [line for line in text.replace("\r", "\n").splitlines() if line.strip()]
    out: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line) + 1
        if size > limit and out:
            break
        out.append(line)
    return "\n".join(reversed(out))[-limit:]


_EXCEPTION_LINE = re.compile(r"\b(\w+(?:Error|Exception)): (.+)$")


def last_error(text: str, besides: str = "") -> Optional[str]:
    """The last line of the log that names an exception (`SomethingError: ...`) other than
    `besides`: vLLM's front end raises "Engine core initialization failed. See root cause above",
    and the root cause is the engine core's own exception, logged before it."""
    for line in reversed(text.replace("\r", "\n").splitlines()):
        match = _EXCEPTION_LINE.search(line)
        if match:
            found = f"{match.group(1)}: {match.group(2).strip()}"
            if not besides or (found not in besides and besides not in found):
                return found
    return None
