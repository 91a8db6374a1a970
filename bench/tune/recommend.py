"""Turn result rows into a recommendation: per workload and overall, the fastest valid
`--attention-backend` / `--block-size`, its margin over vLLM's own default, and whether that
margin is above noise. Pure functions over row dicts (CI runs them on recorded results).

Rules (docs/tune.md, "How tune recommends"):
  * A config is (backend, block size). It is **disqualified** if any of its rows failed the
    correctness check (status "wrong"): it is reported, never recommended.
  * Within a workload kind, a config is a candidate only if every shape of that kind was timed
    ("ok"); one that crashed, hung or ran out of memory on some shape is listed as incomplete.
  * Workload score = geometric mean of the per-shape median times (shapes weigh equally).
  * Overall score = weighted geometric mean of the per-workload scores, weights from
    `--weights` (default decode=0.7, prefill=0.2, mixed=0.1: serving is decode-dominated),
    renormalised over the workload kinds that were run. Lower is better; the margin over vLLM's
    default is exp(sum_k w_k * ln(T_k(default) / T_k(best))) - 1.
  * Noise gate: the margin counts as real only if every compared shape has >= 10 samples and the
    margin exceeds both 2% and the typical combined spread -- the median over shapes of
    ((p80-p20)/median of the winner + the same for the default) / 2. Otherwise: "noisy", and
    vLLM's default is as good as anything measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from attnsel.bench.sweep import results as R
from attnsel.bench.timing import stats as T
from attnsel.bench.tune.records import Choice, ResultRow, Timing
from attnsel.bench.tune.verdict import Verdict
from attnsel.bench.tune.weights import DEFAULT_WEIGHTS, parse_weights  # noqa: F401  (REC.parse_weights)

# A margin above noise but below this is not worth a flag change: attention is only part of a
# decode step (a 30% kernel margin was 1% of an engine step on an H100, issue "tune --verify"), and
# a larger --block-size costs KV-cache granularity. `--min-gain` lowers or raises it.
DEFAULT_MIN_GAIN = 0.05

Config = tuple[str, int]  # (backend, block size)


def geometric_mean(values: Iterable[float]) -> float:
    """Shapes weigh equally.

    >>> geometric_mean([1.0, 4.0])
    2.0
    """
    vals = list(values)
    if not vals or any(v <= 0 for v in vals):
        raise ValueError("geometric mean needs positive values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def flags_for(backend: str, block_size: int) -> str:
    return f"--attention-backend {backend} --block-size {block_size}"


LAUNCH_WORDS = {"graph": "CUDA-graph replay", "eager": "eager launches",
                "graph+eager": "CUDA-graph replay where vLLM captures the batch, eager launches elsewhere"}


def launch_of(rows: Iterable[ResultRow]) -> str | None:
    """"graph", "eager" or "graph+eager": how these rows' kernels were launched while timed."""
    return _launch_word(r.launch or (r.timing or Timing()).mode for r in rows)


def _launch_word(launches: Iterable[str | None]) -> str | None:
    modes = {"graph" if m in ("graph", "cuda_graph") else m for m in launches if m}
    if not modes or not modes <= {"graph", "eager"}:
        return None
    return "graph+eager" if len(modes) == 2 else modes.pop()


@dataclass
class Decision:
    """The fastest config of one workload kind (or overall) against vLLM's default."""

    scope: str  # a WorkloadKind, or "overall"
    best: Choice | None
    default: Choice | None
    speedup_vs_default: float | None  # > 1: best is faster than the default
    noise_threshold: float | None  # relative margin the speedup had to exceed
    verdict: Verdict  # what the margin advises (bench/tune/verdict.py)
    ranking: list[Choice] = field(default_factory=list)
    incomplete: list[dict] = field(default_factory=list)
    weights: dict | None = None
    stand_in: str | None = None  # the stand-in provider behind verdict "stand-in"
    min_gain: float = DEFAULT_MIN_GAIN

    @property
    def above_noise(self) -> bool:
        return self.verdict.advises_flags

    @property
    def flags(self) -> str | None:
        return flags_for(self.best.backend, self.best.block_size) if self.best else None

    def advice(self) -> str:
        text = self._advice()
        if self.best is not None and self.best.launch in LAUNCH_WORDS:
            text += f"; timed with {LAUNCH_WORDS[self.best.launch]}"
        return text

    def _advice(self) -> str:
        if self.best is None:
            return "no valid configuration was measured"
        best = f"{self.best.backend} with --block-size {self.best.block_size}"
        if self.verdict is Verdict.DEFAULT_IS_FASTEST:
            return f"vLLM's default ({best}) is the fastest measured: no flags needed"
        if self.verdict is Verdict.DEFAULT_NOT_MEASURED:
            return f"fastest measured: {best}; vLLM's default could not be measured, so no margin"
        margin = (self.speedup_vs_default - 1) * 100 if self.speedup_vs_default else 0.0
        if self.verdict is Verdict.FASTER:
            # a kernel-level gain: prefill's attention is a fraction of a request's time (vLLM 0.34's engine
            # gave +1.5% / +3.1% for a +8.1% prefill pick, docs/evidence.md), so it points to verify
            return (f"{best} is {margin:.1f}% faster than vLLM's default in the attention kernels: pass "
                    f"{self.flags}{self._ties_text()} (`attnsel verify` checks the gain in vLLM's engine)")
        if self.verdict is Verdict.SMALL:
            return (f"{best} measured {margin:.1f}% faster than vLLM's default: above noise, but below the "
                    f"{self.min_gain * 100:.0f}% worth changing flags for (--min-gain): keeping the default is as good")
        if self.verdict is Verdict.STAND_IN:
            return stand_in_advice(best, margin, self.stand_in)
        return (f"{best} measured {margin:.1f}% faster than vLLM's default, within noise "
                f"({(self.noise_threshold or 0) * 100:.1f}%): keeping the default is as good")

    @property
    def equally_good(self) -> list[Choice]:
        """Configs within noise of the best (`tie`): any of them is as good a choice, and which
        one ranks first can change between runs (FlashInfer's page sizes, docs/gpu-facts.md §1)."""
        return [c for c in self.ranking if c.vs_best == "tie"]

    def _ties_text(self) -> str:
        ties = self.equally_good
        if not ties:
            return ""
        names = ", ".join(f"{c.backend} --block-size {c.block_size}" for c in ties[:4])
        more = f" and {len(ties) - 4} more" if len(ties) > 4 else ""
        return f" (within noise of it: {names}{more})"

    def to_dict(self) -> dict:
        return {
            "scope": self.scope,
            "best": self.best.to_dict() if self.best else None,
            "vllm_default": self.default.to_dict() if self.default else None,
            "speedup_vs_default": self.speedup_vs_default,
            "margin_pct": (self.speedup_vs_default - 1) * 100 if self.speedup_vs_default else None,
            "noise_threshold_pct": self.noise_threshold * 100 if self.noise_threshold is not None else None,
            "verdict": self.verdict,
            "stand_in": self.stand_in,
            "min_gain_pct": self.min_gain * 100,
            "above_noise": self.above_noise,
            "flags": self.flags,
            "advised_flags": self.flags if self.above_noise else None,  # what to pass vLLM; None: keep its default
            "advice": self.advice(),
            "ranking": [c.to_dict() for c in self.ranking],
            "equally_good": [c.to_dict() for c in self.equally_good],
            "incomplete": self.incomplete,
            "weights": self.weights,
        }


@dataclass
class Recommendation:
    vllm_default: Config | None
    per_workload: dict[str, Decision]
    overall: Decision | None
    disqualified: list[dict]

    def to_dict(self) -> dict:
        return {
            "vllm_default": ({"backend": self.vllm_default[0], "block_size": self.vllm_default[1]}
                             if self.vllm_default else None),
            "workloads": {k: d.to_dict() for k, d in self.per_workload.items()},
            "overall": self.overall.to_dict() if self.overall else None,
            "disqualified": self.disqualified,
        }


# ---------------------------------------------------------------------------------------------


def _config(row: ResultRow) -> Config:
    return (row.backend, int(row.block_size))


def disqualified_configs(rows: Iterable[ResultRow]) -> dict[Config, str]:
    """Configs with a failed correctness check -> the first failure's text."""
    out: dict[Config, str] = {}
    for row in rows:
        if row.status == R.STATUS_WRONG:
            out.setdefault(_config(row), f"{row.workload_label}: {row.error}")
    return out


def _stats(row: ResultRow) -> T.TimingStats:
    """A measured row's timing (its record read back as the stats it was written from)."""
    if row.timing is None:
        raise KeyError("timing")
    return T.TimingStats.from_dict(row.timing.to_dict())


def _timed_by_config(rows: Sequence[ResultRow], kind: str) -> dict[Config, dict[str, ResultRow]]:
    table: dict[Config, dict[str, ResultRow]] = {}
    for row in rows:
        if row.kind == kind and row.status != R.STATUS_SKIPPED_BY_VLLM:
            table.setdefault(_config(row), {})[str(row.workload_label)] = row
    return table


def _noise_threshold(best_rows: Sequence[ResultRow], default_rows: Sequence[ResultRow]) -> tuple[float, bool]:
    """(relative margin to beat, enough samples everywhere)."""
    spreads = []
    enough = True
    for a, b in zip(best_rows, default_rows):
        sa, sb = _stats(a), _stats(b)
        spreads.append((sa.relative_spread + sb.relative_spread) / 2)
        enough = enough and min(sa.n, sb.n) >= T.MIN_SAMPLES
    spreads.sort()
    typical = T.percentile(spreads, 50) if spreads else 0.0
    return max(T.RELATIVE_NOISE_THRESHOLD, typical), enough


def decide_workload(
    rows: Sequence[ResultRow], kind: str, shape_labels: Sequence[str], vllm_default: Config | None,
    disqualified: Mapping[Config, str], min_gain: float = DEFAULT_MIN_GAIN,
) -> Decision:
    by_config = _timed_by_config(rows, kind)
    scores: list[Choice] = []
    incomplete: list[dict] = []
    for config, by_label in sorted(by_config.items()):
        if config in disqualified:
            continue
        missing = [lbl for lbl in shape_labels if lbl not in by_label or by_label[lbl].status != R.STATUS_OK]
        if missing:
            statuses = sorted({by_label[l].status for l in missing if l in by_label} or {"not run"})
            incomplete.append({"backend": config[0], "block_size": config[1], "missing": len(missing),
                               "statuses": statuses})
            continue
        chosen = [by_label[lbl] for lbl in shape_labels]
        scores.append(Choice(backend=config[0], block_size=config[1],
                             kernel_block_size=chosen[0].kernel_block_size,
                             geomean_ms=geometric_mean(_stats(r).median_ms for r in chosen), shapes=len(chosen),
                             launch=launch_of(chosen)))
    scores.sort(key=lambda s: s.score_ms)
    best = scores[0] if scores else None
    if best is not None:
        _mark_ties(scores, by_config, shape_labels)
    default = next((s for s in scores if s.config == vllm_default), None)
    if best is None:
        return Decision(kind, None, None, None, None, Verdict.NO_VALID_CONFIG, scores, incomplete)
    if default is None:
        return Decision(kind, best, None, None, None, Verdict.DEFAULT_NOT_MEASURED, scores, incomplete)
    if best.config == default.config:
        return Decision(kind, best, default, 1.0, None, Verdict.DEFAULT_IS_FASTEST, scores, incomplete)
    per_shape_best = [by_config[best.config][l] for l in shape_labels]
    per_shape_default = [by_config[default.config][l] for l in shape_labels]
    threshold, enough = _noise_threshold(per_shape_best, per_shape_default)
    speedup = default.score_ms / best.score_ms
    verdict = Verdict.FASTER if enough and speedup - 1 > threshold else Verdict.NOISY
    decision = Decision(kind, best, default, speedup, threshold, verdict, scores, incomplete)
    return _guard_stand_ins(_guard_small_gains(decision, min_gain), per_shape_best + per_shape_default)


def _guard_small_gains(decision: Decision, min_gain: float) -> Decision:
    decision.min_gain = min_gain
    if decision.verdict is Verdict.FASTER and decision.speedup_vs_default is not None and \
            decision.speedup_vs_default - 1 < min_gain:
        decision.verdict = Verdict.SMALL
    return decision


def stand_in_advice(best: str, margin: float, stand_in: str | None) -> str:
    """A margin that a stand-in kernel measured: shown, never advised."""
    return (f"{best} measured {margin:.1f}% faster than vLLM's default, but {stand_in} stood in for "
            f"vLLM's own kernel: keep vLLM's default until tune runs here with vLLM installed")


def stand_ins_among(rows: Sequence[ResultRow]) -> str | None:
    """The providers that stood in for vLLM's own kernel on these rows ("FLASH_ATTN by fa4"), or None."""
    stand_ins = sorted({p for p in (R.stand_in_provider(r) for r in rows) if p})
    return "; ".join(stand_ins) if stand_ins else None


def _guard_stand_ins(decision: Decision, compared_rows: Sequence[ResultRow]) -> Decision:
    """A margin measured with a stand-in for vLLM's own kernel (FA4 for FA3, attnsel's Triton kernel
    for vLLM's, FlashInfer called directly) is not advice: on an H100 our Triton kernel read 148 us
    where vLLM's own runs 152-312 us (issue "tune measures what vLLM really runs"). The winner is
    still ranked and shown; the flags stay vLLM's default."""
    if decision.verdict is not Verdict.FASTER:
        return decision
    stand_in = stand_ins_among(compared_rows)
    if stand_in:
        decision.verdict = Verdict.STAND_IN
        decision.stand_in = stand_in
    return decision


def _mark_ties(scores: list[Choice], by_config: Mapping[Config, Mapping[str, ResultRow]],
               shape_labels: Sequence[str]) -> None:
    """Label each config against the best with the same gate as the recommendation: configs
    that tie with the best are equally good choices (e.g. FlashInfer page sizes, docs/gpu-facts.md §1)."""
    best = scores[0]
    best.vs_best = "best"
    best_rows = [by_config[best.config][l] for l in shape_labels]
    for score in scores[1:]:
        threshold, enough = _noise_threshold(best_rows, [by_config[score.config][l] for l in shape_labels])
        faster = score.score_ms / best.score_ms - 1 > threshold
        score.vs_best = "slower" if enough and faster else "tie"


def decide_overall(decisions: Mapping[str, Decision], weights: Mapping[str, float],
                   vllm_default: Config | None, rows: Sequence[ResultRow],
                   workload_labels: Mapping[str, Sequence[str]], min_gain: float = DEFAULT_MIN_GAIN) -> Decision | None:
    """Weighted geometric mean over the workload kinds that have candidates and weight > 0."""
    kinds = [k for k, d in decisions.items() if d.ranking and weights.get(k, 0) > 0]
    if not kinds:
        return None
    total = sum(weights[k] for k in kinds)
    norm = {k: weights[k] / total for k in kinds}
    common = set.intersection(*({s.config for s in decisions[k].ranking} for k in kinds))
    if not common:
        return Decision("overall", None, None, None, None, Verdict.NO_VALID_CONFIG, [], [], norm)

    def score(config: Config) -> float:
        return math.exp(sum(norm[k] * math.log(_score_of(decisions[k], config).score_ms) for k in kinds))

    def launch(config: Config) -> str | None:
        modes = {_score_of(decisions[k], config).launch for k in kinds}
        return _launch_word(m for part in modes if part for m in part.split("+"))

    ranking = sorted(
        (Choice(backend=c[0], block_size=c[1], kernel_block_size=_score_of(decisions[kinds[0]], c).kernel_block_size,
                geomean_ms=score(c), shapes=len(kinds), launch=launch(c))
         for c in common),
        key=lambda s: s.score_ms,
    )
    best = ranking[0]

    def pair_bar(other: Choice) -> tuple[float, bool]:
        # The overall bar: the per-workload bars of this very pair, weighted like the score.
        threshold, enough = 0.0, True
        for k in kinds:
            by_config = _timed_by_config(rows, k)
            labels = workload_labels[k]
            pair_threshold, pair_enough = _noise_threshold([by_config[best.config][l] for l in labels],
                                                           [by_config[other.config][l] for l in labels])
            threshold += norm[k] * pair_threshold
            enough = enough and pair_enough
        return threshold, enough

    best.vs_best = "best"
    for other in ranking[1:]:
        bar, enough = pair_bar(other)
        other.vs_best = "slower" if enough and other.score_ms / best.score_ms - 1 > bar else "tie"
    default = next((s for s in ranking if s.config == vllm_default), None)
    if default is None:
        return Decision("overall", best, None, None, None, Verdict.DEFAULT_NOT_MEASURED, ranking, [], norm)
    if default.config == best.config:
        return Decision("overall", best, default, 1.0, None, Verdict.DEFAULT_IS_FASTEST, ranking, [], norm)
    speedup = default.score_ms / best.score_ms
    threshold, enough = pair_bar(default)
    verdict = Verdict.FASTER if enough and speedup - 1 > threshold else Verdict.NOISY
    compared = [r for r in rows if (r.backend, r.block_size) in (best.config, default.config)
                and r.kind in kinds and r.status == R.STATUS_OK]
    decision = Decision("overall", best, default, speedup, threshold, verdict, ranking, [], norm)
    return _guard_stand_ins(_guard_small_gains(decision, min_gain), compared)


def _score_of(decision: Decision, config: Config) -> Choice:
    return next(s for s in decision.ranking if s.config == config)


def recommend(
    rows: Iterable[ResultRow | Mapping],
    *,
    workload_labels: Mapping[str, Sequence[str]],
    vllm_default: Config | None,
    weights: Mapping[str, float] | None = None,
    min_gain: float = DEFAULT_MIN_GAIN,
) -> Recommendation:
    """`workload_labels`: kind -> the shape labels the plan timed for it (the comparison set).
    `rows`: result rows, as records or as the objects results.jsonl / tune.json hold."""
    weights = dict(weights or DEFAULT_WEIGHTS)
    records = [r if isinstance(r, ResultRow) else ResultRow.from_dict(r) for r in rows]
    disqualified = disqualified_configs(records)
    decisions = {
        kind: decide_workload(records, kind, labels, vllm_default, disqualified, min_gain)
        for kind, labels in workload_labels.items() if labels
    }
    overall = decide_overall(decisions, weights, vllm_default, records, workload_labels, min_gain)
    dq = [{"backend": c[0], "block_size": c[1], "reason": why} for c, why in sorted(disqualified.items())]
    return Recommendation(vllm_default, decisions, overall, dq)

