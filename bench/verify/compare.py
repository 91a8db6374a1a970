"""From an engine's timed calls to figures, and from figures to a verdict: does tune's
recommendation hold in vLLM's own engine? Pure functions over the dicts the engine worker sends
(bench/verify/engine_worker.py); CI runs them on fake and recorded results.

Per shape (batch x context), from the calls of one engine:
  decode step   (T(N2) - T(N1)) / (N2 - N1) for each ABBA pair of timed calls; the median, and
                the relative spread (max - min) / median of the pairs;
  prefill       the time until the whole batch has its first token: T(N) - (N - 1) x step for
                every timed call (median); prefill tokens/s = batch x prompt tokens / that time;
  tokens/s      batch x N2 generated tokens / T(N2): what a deployment feels, prefill included.

Noise rule (the same gate as tune, bench/tune/recommend.py): a margin between two engines counts only
when it exceeds max(2%, the mean of the two engines' relative spreads) of that figure over their
repeated calls. Otherwise the two are "within noise" of each other.

Several engine starts per pair (`--repeat-engine N`, N >= 2; across_starts): each figure of a pair is
the median of its starts' medians, its within-engine noise the mean of their spreads, and its
start-to-start spread (max - min) / median of the per-start medians. A margin then counts only when it
also exceeds the larger of the two pairs' start-to-start spreads: a gap two starts of the same pair can
open by themselves is no gap. With one start per pair nothing of this applies (and nothing changes).

Verdict for tune's pick against vLLM's default, per shape, on tokens/s (end to end), where tune
advised the pick's flags (recommendation_verdict):
  holds         the pick is faster beyond noise;
  within noise  neither is faster beyond noise: keep vLLM's default, no flags needed;
  reversed      vLLM's default is faster beyond noise.
Overall: reversed if any shape is reversed, holds if at least one holds, else within noise. The
decode step gets the same words, beside it. Where tune advised keeping vLLM's default (its pick
is the default, or its fastest pair was within noise / below --min-gain), the question is
whether another pair beats the default by --min-gain end to end: bench/verify/verdict.py.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from attnsel.bench.timing import stats as T
from attnsel.words import Word


class Judgement(Word):
    """One figure of a candidate against vLLM's default at one shape (verify.json "result")."""

    FASTER = "faster"
    SLOWER = "slower"
    WITHIN_NOISE = "within noise"


class EngineVerdict(Word):
    """verify.json "verdict": what vLLM's own engine says about tune's advice (module docstring).
    str-valued, so the document holds the words it always did."""

    HOLDS = "holds"
    WITHIN_NOISE = "within noise"
    REVERSED = "reversed"
    NOT_MEASURED = "not measured"

    @property
    def keeps_default(self) -> bool:
        """The engine saw no pair worth changing flags for against vLLM's default."""
        return self is EngineVerdict.WITHIN_NOISE

    @property
    def measured(self) -> bool:
        """False: no pair could be compared, so nothing was checked (`attnsel verify` exits 1)."""
        return self is not EngineVerdict.NOT_MEASURED



def relative_spread(values: Sequence[float]) -> float | None:
    """(max - min) / median; None with fewer than two values.

    >>> relative_spread([10.0, 10.4, 9.8])
    0.06
    """
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return None
    mid = statistics.median(vals)
    return round((max(vals) - min(vals)) / mid, 12) if mid else None


def _pairs(calls: Sequence[dict], n1: int, n2: int) -> list[tuple[float, float]]:
    """(T(N1), T(N2)) per consecutive pair of timed calls (ABBA order: one N1 and one N2 each)."""
    timed = [c for c in calls if c.get("phase") == "measure"]
    pairs = []
    for a, b in zip(timed[0::2], timed[1::2]):
        by_n = {int(a["max_tokens"]): float(a["seconds"]), int(b["max_tokens"]): float(b["seconds"])}
        if set(by_n) == {n1, n2}:
            pairs.append((by_n[n1], by_n[n2]))
    return pairs


def _figure(values: Sequence[float], scale: float = 1.0) -> dict | None:
    if not values:
        return None
    vals = [v * scale for v in values]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals),
            "spread": relative_spread(vals)}


def shape_figures(result: dict) -> dict | None:
    """Decode step (ms), prefill (s, tokens/s) and tokens/s of one shape's timed calls; None
    when there is no complete N1/N2 pair."""
    n1, n2 = int(result["n1"]), int(result["n2"])
    pairs = _pairs(result.get("calls") or [], n1, n2)
    if not pairs:
        return None
    batch, prompt = int(result["batch"]), int(result["prompt_tokens"])
    slopes = [(t2 - t1) / (n2 - n1) for t1, t2 in pairs]
    step = statistics.median(slopes)
    timed = [t for pair in pairs for t in pair]
    ns = [n for _ in pairs for n in (n1, n2)]
    prefill = [t - (n - 1) * step for t, n in zip(timed, ns)]
    return {
        "decode_step_ms": _figure(slopes, 1e3),
        "prefill_s": _figure(prefill),
        "prefill_tokens_per_s": _figure([batch * prompt / p for p in prefill if p > 0]),
        "output_tokens_per_s": _figure([batch * n2 / t2 for _, t2 in pairs]),
        "decode_tokens_per_s": _figure([batch / s for s in slopes if s > 0]),
        "pairs": len(pairs),
    }


FIGURE_KEYS = ("decode_step_ms", "output_tokens_per_s", "prefill_tokens_per_s")


def across_starts(per_start: Sequence[dict | None]) -> dict | None:
    """One pair's figures at one shape over its engine starts (None: a start that measured nothing);
    module docstring. None when no start measured the shape.

    >>> fig = lambda m, s: {"output_tokens_per_s": {"median": m, "spread": s}}
    >>> across_starts([fig(100.0, 0.01), fig(104.0, 0.03), None])["output_tokens_per_s"]
    {'median': 102.0, 'spread': 0.02, 'start_spread': 0.039215686275, 'medians': [100.0, 104.0], 'n': 2}
    """
    measured = [f for f in per_start if f]
    if not measured:
        return None
    out: dict = {"starts": len(per_start), "measured": len(measured)}
    for key in FIGURE_KEYS:
        figures = [f[key] for f in measured if f.get(key) and f[key].get("median") is not None]
        if not figures:
            continue
        medians = [float(g["median"]) for g in figures]
        spreads = [float(g["spread"]) for g in figures if g.get("spread") is not None]
        out[key] = {"median": statistics.median(medians), "spread": sum(spreads) / len(spreads) if spreads else None,
                    "start_spread": relative_spread(medians), "medians": medians, "n": len(medians)}
    return out


def noise_bar(a: dict | None, b: dict | None) -> float:
    """The relative margin two figures must exceed: max(2%, the mean of their spreads)."""
    spreads = [float(f["spread"]) for f in (a, b) if f and f.get("spread") is not None]
    typical = sum(spreads) / len(spreads) if spreads else 0.0
    return max(T.RELATIVE_NOISE_THRESHOLD, typical)


def margin(candidate: dict | None, default: dict | None, *, lower_is_better: bool) -> float | None:
    """The candidate's gain over the default as a fraction (> 0: the candidate is better)."""
    if not candidate or not default or not candidate.get("median") or not default.get("median"):
        return None
    c, d = float(candidate["median"]), float(default["median"])
    return d / c - 1.0 if lower_is_better else c / d - 1.0


def judge(gain: float | None, bar: float) -> Judgement | None:
    """faster / slower / within noise, for a gain against its noise bar."""
    if gain is None:
        return None
    if gain > bar:
        return Judgement.FASTER
    if gain < -bar:
        return Judgement.SLOWER
    return Judgement.WITHIN_NOISE


def compare_shape(candidate: dict, default: dict) -> dict:
    """One candidate against vLLM's default at one shape: decode step and tokens/s."""
    out = {}
    for name, key, lower in (("decode", "decode_step_ms", True), ("end_to_end", "output_tokens_per_s", False),
                             ("prefill", "prefill_tokens_per_s", False)):
        c, d = candidate.get(key), default.get(key)
        gain = margin(c, d, lower_is_better=lower)
        bar = noise_bar(c, d)
        entry = {"margin_pct": None if gain is None else gain * 100, "noise_pct": bar * 100}
        starts = [f["start_spread"] for f in (c, d) if f and f.get("start_spread") is not None]
        if any(f and "start_spread" in f for f in (c, d)):  # several engine starts per pair
            entry["within_noise_pct"] = bar * 100
            entry["start_spread_pct"] = max(starts) * 100 if starts else None
            bar = max([bar, *starts])
            entry["noise_pct"] = bar * 100
        out[name] = {**entry, "result": judge(gain, bar)}
    return out


def recommendation_verdict(result: str | None, pick_is_default: bool) -> EngineVerdict | None:
    """What one shape's comparison says about tune's recommendation (module docstring)."""
    if result is None:
        return None
    if pick_is_default:  # the comparison was runner-up vs default
        return EngineVerdict.REVERSED if result == Judgement.FASTER else EngineVerdict.HOLDS
    verdicts: dict[str, EngineVerdict] = {Judgement.FASTER: EngineVerdict.HOLDS, Judgement.SLOWER: EngineVerdict.REVERSED}
    return verdicts.get(result, EngineVerdict.WITHIN_NOISE)


def overall_verdict(verdicts: Iterable[str | None]) -> EngineVerdict | None:
    """reversed if any shape is reversed, holds if one holds, within noise otherwise (None: nothing measured)."""
    seen = [v for v in verdicts if v]
    if not seen:
        return None
    if EngineVerdict.REVERSED in seen:
        return EngineVerdict.REVERSED
    return EngineVerdict.HOLDS if EngineVerdict.HOLDS in seen else EngineVerdict.WITHIN_NOISE


def attention_share(kernel_ms: float | None, attention_layers: int | None, step_ms: float | None) -> float | None:
    """Share of one decode step spent in attention: kernel time x layers / step time."""
    if not kernel_ms or not attention_layers or not step_ms:
        return None
    return kernel_ms * attention_layers / step_ms


def expected_step_gain(default_kernel_ms: float | None, pick_kernel_ms: float | None,
                       attention_layers: int | None, default_step_ms: float | None) -> float | None:
    """The step gain the kernel margin alone predicts (Amdahl): the default's step minus the
    kernel time saved in every attention layer.

    >>> round(expected_step_gain(0.376, 0.250, 32, 18.1), 4)  # a 50% kernel gain saves 4 ms of 18 ms
    0.2866
    """
    if not (default_kernel_ms and pick_kernel_ms and attention_layers and default_step_ms):
        return None
    saved = (default_kernel_ms - pick_kernel_ms) * attention_layers
    remaining = default_step_ms - saved
    return default_step_ms / remaining - 1.0 if remaining > 0 else None


def geomean_ratio(ratios: Iterable[float | None]) -> float | None:
    vals = [r for r in ratios if r and r > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
