"""Read what vLLM's engine logged about itself: the backend it used, its KV cache, its compile
and CUDA-graph work. `attnsel verify` keeps each engine's log (its stdout and stderr, where
vLLM's logger writes) and reads these lines from it; the engine worker also reads the backend
and the KV cache back in-process (bench/verify/engine_worker.py), and where both exist they must agree.

Each pattern of PATTERNS mirrors one vLLM 0.24.0 log call and is release data (`engine_log_patterns`,
attention/versions/vllm_0_33.json, which every release inherits: its file, format-string anchor and example line)
and reads that line in every release since (a release that moved or reworded the call says where in its
data, `engine.log_sources`). Lines a release brought are the release's data (`engine.log_patterns` in
attention/versions/vllm_0_X.json, inherited by later releases): `release_patterns` turns them into
patterns and `parse_engine_log(text, release_patterns(profile.engine))` reads them too. A line vLLM
no longer prints leaves its field out; nothing here is required. Lines carry vLLM's
prefix, e.g. "(EngineCore_DP0 pid=123) INFO 11-24 10:00:01 [cuda.py:481] Using ...", so every
pattern searches anywhere in the line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, NamedTuple

_NUMBER = r"([\d,]+(?:\.\d+)?)"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


class LogPattern(NamedTuple):
    """One fact read from one vLLM log call: `source` and `anchor` say where the call is (its file
    in the vllm package, a literal of its format string as the source spells it: what
    bench/tools/engine_cpu_check.py looks for in a release's wheel) and `example` is a line as
    vLLM prints it, which `regex` must read (tests/test_verify_engine_releases.py)."""

    field: str
    regex: re.Pattern[str]
    read: Callable[[re.Match[str]], Any]
    source: str
    anchor: str
    example: str


def _p(field: str, regex: str, read: Callable[[re.Match[str]], Any], source: str, anchor: str,
       example: str) -> LogPattern:
    return LogPattern(field, re.compile(regex), read, source, anchor, example)


def _base_patterns() -> tuple[LogPattern, ...]:
    """The log calls every release is read with: the release data's `engine_log_patterns` (vLLM 0.24.0's
    calls, in order; attention/versions/vllm_0_33.json, inherited by every release), read by READERS."""
    from attnsel.attention.versions import release_profiles
    from attnsel.attention.versions.registry import resolved_data

    return tuple(_pattern(spec) for spec in resolved_data(release_profiles()[-1])["engine_log_patterns"])


def release_source(pattern: LogPattern, log_sources: dict | None) -> tuple[str, str, str]:
    """(file, anchor, example) of a pattern's log call in one release: PATTERNS' own (vLLM 0.24.0),
    or where the release moved or reworded it (attention/versions `engine.log_sources`, by field)."""
    moved = (log_sources or {}).get(pattern.field) or {}
    return (moved.get("source", pattern.source), moved.get("anchor", pattern.anchor),
            moved.get("example", pattern.example))


# how a pattern of the data reads its match: the value of match `group` (default 1) ...
READERS: dict[str, Callable[[str], Any]] = {"number": _number, "int": lambda text: int(_number(text)), "text": str.strip}
# ... or the whole match: a counted line, a capture pass's "decode: FULL", the concurrency line's two numbers
MATCH_READERS: dict[str, Callable[[re.Match[str]], Any]] = {
    "one": lambda match: 1,
    "labelled": lambda match: f"{match.group(1)}: {match.group(2)}" if match.group(1) else match.group(2),
    "tokens_requests": lambda match: {"tokens": int(_number(match.group(1))), "requests": _number(match.group(2))},
}


def _pattern(spec: dict, field: str | None = None) -> LogPattern:
    name = spec.get("read", "text")
    if name in MATCH_READERS:
        read = MATCH_READERS[name]
    else:
        read = _group_reader(READERS[name], int(spec.get("group", 1)))
    return _p(field or spec["field"], spec["regex"], read, spec["source"], spec["anchor"], spec["example"])


def release_patterns(engine: dict | None) -> tuple[LogPattern, ...]:
    """The log lines a release brought or reworded beyond what PATTERNS reads, from its
    `engine.log_patterns` data: each field's `regex` (searched anywhere in a line), `read` (a READERS
    or MATCH_READERS name) of match `group` (default 1), and the call's `source`, `anchor` and `example`
    as in PATTERNS. A field PATTERNS has too is read by the release's pattern instead (patterns_for).
    Empty for a release without any."""
    return tuple(_pattern(spec, field) for field, spec in sorted(((engine or {}).get("log_patterns") or {}).items()))


def _group_reader(reader: Callable[[str], Any], group: int) -> Callable[[re.Match[str]], Any]:
    return lambda match: reader(match.group(group))


PATTERNS: tuple[LogPattern, ...] = _base_patterns()


def patterns_for(own: tuple[LogPattern, ...]) -> tuple[LogPattern, ...]:
    """PATTERNS, less the fields the release reads its own way, then the release's own patterns."""
    replaced = {p.field for p in own}
    return tuple(p for p in PATTERNS if p.field not in replaced) + own


# flashinfer/autotuner.py:622 and :641 (flashinfer-python 0.6.12, run by vLLM's kernel warm-up):
# FlashInfer's own logger stamps its lines; the time between the two is its autotuning
_FLASHINFER_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - INFO - autotuner\.py:\d+ - flashinfer\.jit: \[Autotuner\]: "
_AUTOTUNE_START = re.compile(_FLASHINFER_STAMP + r"Autotuning process starts")
_AUTOTUNE_END = re.compile(_FLASHINFER_STAMP + r"Autotuning process ends")
_COUNTED = {"compile_cache_hits", "compile_cache_misses"}
_LISTED = {"cudagraph_captures"}


def parse_engine_log(text: str, extra: tuple[LogPattern, ...] = ()) -> dict:
    """The facts vLLM logged, by field (see PATTERNS, then `extra`: the release's own, release_patterns);
    fields it did not log are absent.

    >>> facts = parse_engine_log("(EngineCore pid=7) INFO [kv_cache_utils.py:2146] GPU KV cache size: 834,272 tokens")
    >>> facts["kv_cache_tokens"]
    834272
    """
    facts: dict[str, Any] = {}
    patterns = patterns_for(extra) if extra else PATTERNS
    for raw in text.splitlines():
        # tqdm redraws its bar with carriage returns: each redraw is a line of its own
        for line in raw.split("\r"):
            _read_line(line, facts, patterns)
    if "compile_cache_hits" in facts or "compile_cache_misses" in facts:
        facts["compile_cache"] = _cache_state(facts.get("compile_cache_hits", 0), facts.get("compile_cache_misses", 0))
    autotune = flashinfer_autotune_s(text)
    if autotune is not None:
        facts["flashinfer_autotune_s"] = autotune
    return facts


def flashinfer_autotune_s(text: str) -> float | None:
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


def _read_line(line: str, facts: dict, patterns: tuple[LogPattern, ...]) -> None:
    for name, pattern, read, *_where in patterns:
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


def read_log(path: str | os.PathLike[str], start: int = 0) -> str:
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


def last_error(text: str, besides: str = "") -> str | None:
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
