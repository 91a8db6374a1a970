"""What `attnsel verify` will run, decided before any engine starts (torch-free, no GPU needed):
which (backend, block size) pairs, which shapes, which pairs vLLM would refuse, how much GPU
memory each engine may take, and roughly how long it will all take.

Candidates (choose_candidates):
  * vLLM's default: started with neither --attention-backend nor --block-size, as a deployment
    without flags; what it picked is read back from the engine and compared with `explain`'s answer;
  * tune's pick: the first config of tune's overall ranking (decode's when no overall), the one
    whose flags tune prints -- checking it is the point; where tune advised keeping vLLM's default
    (that first config was within noise or below --min-gain) it runs as "tune's fastest, not
    advised": the pair a user would be tempted by;
  * the runner-up: the best-ranked config of ANOTHER backend than the pick (block sizes of one
    backend are usually ties, e.g. FlashInfer's), that is not vLLM's default either;
or the pairs the user names (`--candidates FLASH_ATTN:16,TRITON_ATTN:64`), always with vLLM's default;
`--candidates default` starts vLLM's default alone (with `--repeat-engine N`: an A/A check).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from attnsel.attention.rules import shape_dtype
from attnsel.attention.selector import capture_sizes_for_batches
from attnsel.bench.plan import TuneShape, vllm_verdict
from attnsel.bench.plan import build as P
from attnsel.bench.tune import DecisionRecord, RecommendationRecord, advised_flags
from attnsel.bench.tune import recommend as REC
from attnsel.errors import UserInputError

GIB = 1024 ** 3
MEMORY_HEADROOM_BYTES = GIB // 2  # left free besides vLLM's share, so its start-up check passes
VLLM_DEFAULT_UTILIZATION = 0.92  # CacheConfig's default where a release's data does not say (0.20-0.33)
# Shapes verified by default, when tune timed them: one long-context request (attention-heavy
# per token) and the batch x context of the comparison (docs/gpu-facts.md §6: 64 x 4096).
PREFERRED_SHAPES: tuple[tuple[int, int], ...] = ((1, 16384), (64, 4096))
MAX_DEFAULT_KV_TOKENS = 2 ** 18  # a default shape prefills at most this many tokens per call

ROLE_DEFAULT, ROLE_PICK, ROLE_RUNNER_UP, ROLE_NAMED = "vllm-default", "tune-pick", "runner-up", "named"
# tune ranked it first but advised keeping vLLM's default (within noise or below --min-gain)
ROLE_FASTEST = "tune-fastest"
ROLE_TITLES = {ROLE_DEFAULT: "vLLM's default", ROLE_PICK: "tune's pick", ROLE_RUNNER_UP: "runner-up",
               ROLE_NAMED: "named", ROLE_FASTEST: "tune's fastest, not advised"}
ROLE_SHORT = {ROLE_DEFAULT: "default", ROLE_PICK: "pick", ROLE_RUNNER_UP: "runner-up", ROLE_NAMED: "named",
              ROLE_FASTEST: "fastest"}


@dataclass
class Candidate:
    """One engine to start. backend/block_size None: vLLM chooses (its default pair)."""

    roles: list[str]
    backend: str | None = None
    block_size: int | None = None
    predicted: tuple[str, int] | None = None  # explain's answer for vLLM's default
    reasons: list[str] = field(default_factory=list)  # vLLM would refuse: never launched

    @property
    def config(self) -> tuple[str, int] | None:
        if self.backend and self.block_size:
            return (self.backend, int(self.block_size))
        return self.predicted

    @property
    def flags(self) -> str:
        return REC.flags_for(self.backend, self.block_size) if self.backend and self.block_size else ""

    @property
    def name(self) -> str:
        config = self.config
        pair = f"{config[0]} --block-size {config[1]}" if config else "vLLM's choice"
        return f"{pair} ({', '.join(ROLE_TITLES[r] for r in self.roles)})"

    @property
    def short(self) -> str:
        """For table cells: `FLASHINFER/64 pick`."""
        config = self.config
        roles = "+".join(ROLE_SHORT[r] for r in self.roles)
        return f"{config[0]}/{config[1]} {roles}" if config else f"vLLM's choice {roles}"

    @property
    def slug(self) -> str:
        config = self.config
        return f"{config[0]}-{config[1]}" if config else "vllm-default"

    def to_dict(self) -> dict:
        return {"roles": list(self.roles), "backend": self.backend, "block_size": self.block_size,
                "predicted": list(self.predicted) if self.predicted else None, "flags": self.flags,
                "name": self.name, "short": self.short, "reasons": list(self.reasons)}


DEFAULT_WORD = "default"  # in --candidates: vLLM's default pair, which always runs
MAX_LIST = 32  # candidates or shapes: each one starts an engine or times a shape; bound the work first
MAX_BATCH = 4096  # sequences in one decode batch
MAX_CONTEXT = 1 << 24  # tokens of context (beyond any model's max_model_len)


def _bounded_list(text: str, flag: str) -> list[str]:
    if len(text) > MAX_LIST * 64:
        raise UserInputError(f"{flag} is {len(text)} characters long: no list of at most {MAX_LIST} values is")
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) > MAX_LIST:
        raise UserInputError(f"{flag} lists too many values (at most {MAX_LIST})")
    return parts


def _whole(text: str, maximum: int) -> bool:
    """A whole number in [1, maximum], checked on its digits first (int() of thousands raises)."""
    return text.isdigit() and len(text) <= 9 and 0 < int(text) <= maximum


def parse_candidates(text: str | None) -> list[tuple[str, int]] | None:
    """`FLASH_ATTN:16,TRITON_ATTN:64` -> [("FLASH_ATTN", 16), ("TRITON_ATTN", 64)]; `default` names
    vLLM's default, which always runs, so `default` alone is [] (vLLM's default and nothing else).

    >>> parse_candidates("flash_attn:16, TRITON_ATTN:64")
    [('FLASH_ATTN', 16), ('TRITON_ATTN', 64)]
    >>> parse_candidates("default")
    []
    """
    if text is None:
        return None
    out: list[tuple[str, int]] = []
    parts = _bounded_list(text, "--candidates")
    for part in parts:
        if part.lower() == DEFAULT_WORD:
            continue
        backend, sep, size = part.partition(":")
        if not sep or not _whole(size.strip(), P.MAX_TUNE_BLOCK_SIZE):
            raise UserInputError(f"--candidates takes BACKEND:BLOCK_SIZE pairs, e.g. FLASH_ATTN:16,TRITON_ATTN:64; got {part!r}")
        pair = (P.parse_backends(backend)[0], int(size))
        if pair not in out:
            out.append(pair)
    if not parts:
        raise UserInputError("--candidates is empty; pass BACKEND:BLOCK_SIZE pairs, e.g. FLASH_ATTN:16, or `default`")
    return out


def parse_shapes(text: str | None) -> list[tuple[int, int]] | None:
    """`1x16384,64x4096` -> [(1, 16384), (64, 4096)] (batch x context).

    >>> parse_shapes("1x32768, 16X32768")
    [(1, 32768), (16, 32768)]
    """
    if text is None:
        return None
    out = []
    for part in [p.lower() for p in _bounded_list(text, "--shapes")]:
        batch, sep, context = part.partition("x")
        if not sep or not _whole(batch, MAX_BATCH) or not _whole(context, MAX_CONTEXT):
            raise UserInputError(f"--shapes takes BATCHxCONTEXT pairs, e.g. 1x16384,64x4096; got {part!r}")
        out.append((int(batch), int(context)))
    if not out:
        raise UserInputError("--shapes is empty; pass BATCHxCONTEXT pairs, e.g. 64x4096")
    return list(dict.fromkeys(out))


def tune_scope(recommendation: Mapping | RecommendationRecord | None) -> DecisionRecord | None:
    """The decision whose flags tune prints: overall, else decode, else the first workload."""
    record = RecommendationRecord.from_dict(recommendation) if isinstance(recommendation, Mapping) else recommendation
    if not isinstance(record, RecommendationRecord) or not record:
        return None
    if record.overall and record.overall.ranking:
        return record.overall
    workloads = record.workloads or {}
    for kind in ("decode", *workloads):
        decision = workloads.get(kind)
        if decision and decision.ranking:
            return decision
    return None


def choose_candidates(recommendation: Mapping | RecommendationRecord | None, vllm_default: tuple[str, int] | None,
                      named: Sequence[tuple[str, int]] | None = None) -> list[Candidate]:
    """vLLM's default first, then tune's pick and runner-up (or the named pairs); see the module doc."""
    default = Candidate([ROLE_DEFAULT], predicted=vllm_default)
    out = [default]

    def add(role: str, config: tuple[str, int]) -> None:
        if vllm_default and tuple(config) == tuple(vllm_default):
            default.roles.append(role)
        elif all(c.config != tuple(config) for c in out):
            out.append(Candidate([role], config[0], int(config[1])))

    if named is not None:  # [] (`--candidates default`): vLLM's default alone
        for config in named:
            add(ROLE_NAMED, config)
        return out
    scope = tune_scope(recommendation)
    ranking = [(c.backend, int(c.block_size)) for c in (scope.ranking if scope else None) or []]
    if not ranking or scope is None:
        return out
    pick = ranking[0]
    advised = advised_flags(scope) is not None
    is_default = vllm_default is not None and tuple(pick) == tuple(vllm_default)
    add(ROLE_PICK if advised or is_default else ROLE_FASTEST, pick)
    others = [c for c in ranking[1:] if c != pick and c != (tuple(vllm_default) if vllm_default else None)]
    runner_up = next((c for c in others if c[0] != pick[0]), others[0] if others else None)
    if runner_up:
        add(ROLE_RUNNER_UP, runner_up)
    return out


def check_refusals(candidates: Sequence[Candidate], shape: TuneShape, capability: tuple[int, int],
                   vllm_version: str | None = None) -> None:
    """`explain`'s verdict for each pair with flags; a refused pair keeps vLLM's reasons and is never launched."""
    for cand in candidates:
        if cand.backend and cand.block_size:
            reasons, _kernel = vllm_verdict(cand.backend, int(cand.block_size), shape, capability,
                                            vllm_version=vllm_version)
            cand.reasons = list(reasons)


def engine_shape(shape: TuneShape) -> TuneShape:
    """The shape as verify's engines run it: prefix caching off and no --mamba-cache-mode
    (engine_worker.py), which for a hybrid model decide the Mamba cache mode and so the block size
    vLLM aligns to."""
    if not shape.hybrid:
        return shape
    return replace(shape, hybrid={**shape.hybrid, "prefix_caching": False, "mamba_cache_mode": None})


def shape_from_document(plan: dict, capability: tuple[int, int] | None = None) -> TuneShape:
    """The TuneShape a tune.json was planned for (fields this version knows; others ignored). Its
    dtype goes to every engine as `dtype=`: read by the one dtype parser (a spelling no command
    accepts is bad input here too, before any engine starts; "auto" is this GPU's preferred dtype)."""
    known = {f.name for f in fields(TuneShape)}
    shape = TuneShape(**{k: v for k, v in (plan.get("shape") or {}).items() if k in known})
    return replace(shape, dtype=shape_dtype(str(shape.dtype), capability))


def decode_shapes_of(plan: dict) -> list[tuple[int, int]]:
    return [(int(w["batch"]), int(w["context_len"])) for w in plan.get("workloads") or [] if w.get("kind") == "decode"]


def default_shapes(timed: Sequence[tuple[int, int]], max_context: int | None) -> list[tuple[int, int]]:
    """PREFERRED_SHAPES where tune timed them (so the kernel margin sits beside the engine's);
    otherwise tune's longest batch-1 decode and its largest batch x context up to 2**18 tokens."""
    fits = [s for s in (timed or PREFERRED_SHAPES) if not max_context or s[1] < max_context]
    chosen = [s for s in PREFERRED_SHAPES if s in fits]
    if not chosen and fits:
        singles = [s for s in fits if s[0] == 1]
        if singles:
            chosen.append(max(singles, key=lambda s: s[1]))
        bounded = [s for s in fits if s[0] * s[1] <= MAX_DEFAULT_KV_TOKENS and s not in chosen and s[0] > 1]
        if bounded:
            chosen.append(max(bounded, key=lambda s: (s[0] * s[1], s[0])))
    if not chosen:
        limit = max_context or 4096
        chosen = [(1, max(256, limit // 2))]
    return chosen


def max_model_len_for(shapes: Sequence[tuple[int, int]], decode_steps: int, model_max: int | None) -> int | None:
    """Room for the longest prompt plus the N2 generated tokens (bench/engine_worker.step_counts,
    with a scheduler budget of at least 2048 tokens per step), rounded up to 256, within the model's limit."""
    if not shapes:
        return model_max
    need = max(c + math.ceil(b * c / 2048) + 8 + decode_steps for b, c in shapes)
    need = 256 * math.ceil(need / 256)
    return min(need, model_max) if model_max else need


def graph_overrides(cudagraph: dict | None, shapes: Sequence[tuple[int, int]]) -> dict:
    """The engine arguments that capture CUDA graphs only for the verified decode batches: each batch
    padded to the size vLLM's default list would pad it to, so every timed decode step replays the
    graph a default deployment replays (bench/verify/engine_worker.py: the N2 - N1 extra steps are all
    full-batch decode). Prefill and mixed steps do not count in the figure. Saves capturing the ~51
    default sizes per engine (5-25 s on an H100, docs/verify.md "Speed"). {} where the release's
    facts (attention/versions, `cudagraph.engine_option`) do not say how to pass them.

    >>> facts = {"max_capture_size": 512, "engine_option": "compilation_config.cudagraph_capture_sizes",
    ...          "default_capture_sizes": {"listed": [1, 2, 4], "step_8_from": 8, "step_16_from": 256}}
    >>> graph_overrides(facts, [(1, 32768), (4, 16384), (64, 4096)])
    {'compilation_config': {'cudagraph_capture_sizes': [1, 4, 64]}}
    """
    sizes = capture_sizes_for_batches(cudagraph, [int(b) for b, _ in shapes])
    if not sizes or not cudagraph:
        return {}
    group, _, option = str(cudagraph["engine_option"]).partition(".")
    return {group: {option: sizes}} if option else {group: sizes}


def memory_budget(total_bytes: int | None, free_bytes: int | None, requested: float | None,
                  release_memory: Mapping[str, Any] | None = None) -> tuple[float | None, str | None]:
    """The gpu_memory_utilization an engine can start with: vLLM refuses to start when free memory
    is below utilization x total (v1/worker/utils.py request_memory). Memory another process
    already holds lowers it, and says so. `requested` None: the release's own default, passed as nothing
    (None) where it starts as it is -- with 0.34's extensible KV cache always, which sizes the cache from
    the memory it measures and makes no free-memory check (docs/memory.md)."""
    if requested is None:
        memory = release_memory or {}
        if (memory.get("extensible_kv_cache") or {}).get("default_on"):
            return None, _held_elsewhere(total_bytes, free_bytes)
        default = float(memory.get("gpu_memory_utilization") or VLLM_DEFAULT_UTILIZATION)
        util, note = memory_budget(total_bytes, free_bytes, default)
        return (None, None) if util == default else (util, note)
    if not total_bytes or free_bytes is None:
        return requested, None
    fits = (free_bytes - MEMORY_HEADROOM_BYTES) / total_bytes
    if fits >= requested:
        return requested, None
    used = (total_bytes - free_bytes) / GIB
    util = max(0.01, math.floor(fits * 100) / 100)
    return util, (f"{used:.1f} GiB of the GPU's {total_bytes / GIB:.1f} GiB are already in use by other "
                  f"processes (NVML): engines start with gpu_memory_utilization {util:.2f} instead of {requested:.2f}, "
                  f"so KV-cache capacity is lower than on an idle GPU")


def _held_elsewhere(total_bytes: int | None, free_bytes: int | None) -> str | None:
    """With 0.34's extensible KV cache nothing is lowered, but memory other processes hold still shrinks it."""
    if not total_bytes or free_bytes is None or free_bytes >= total_bytes - MEMORY_HEADROOM_BYTES:
        return None
    return (f"{(total_bytes - free_bytes) / GIB:.1f} GiB of the GPU's {total_bytes / GIB:.1f} GiB are already in use by "
            "other processes (NVML): vLLM's extensible KV cache sizes itself from what is free, so KV-cache capacity "
            "is lower than on an idle GPU")


def _text_config(hf_config: dict) -> dict:
    text = hf_config.get("text_config")
    return text if isinstance(text, dict) else hf_config


def model_max_len(hf_config: dict) -> int | None:
    text = _text_config(hf_config)
    value = text.get("max_position_embeddings") or hf_config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else None


def vocab_size(hf_config: dict) -> int:
    text = _text_config(hf_config)
    value = text.get("vocab_size") or hf_config.get("vocab_size")
    return int(value) if isinstance(value, int) and value > 1 else 32000


def compile_cache_root(env: Mapping[str, str] = os.environ) -> Path:
    """Where vLLM keeps its torch.compile cache (vllm/envs.py VLLM_CACHE_ROOT): every engine of a
    run gets the same root. vLLM 0.24 keys the compiled graphs on the block size and the attention
    backend too (CacheConfig / AttentionConfig.compute_hash), so another pair compiles again (21-35 s
    on an H100); what a later engine reuses is the first one's kernel JIT (Triton, FlashInfer)."""
    root = env.get("VLLM_CACHE_ROOT") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm")
    return Path(root).expanduser()


# ---------------------------------------------------------------------------------------------
# Estimates (shown with the progress; engine starts took 27-187 s on an H100, docs/gpu-facts.md §6)

COLD_START_S = 180.0  # first engine of a model: torch.compile + CUDA graphs
WARM_START_S = 60.0  # later engines: their own torch.compile, the first engine's kernel JIT reused
FLASHINFER_JIT_S = 100.0  # FlashInfer's JIT when flashinfer-cubin is absent


def start_estimate(candidate: Candidate, previous_starts: Sequence[float], cache_warm: bool,
                   flashinfer_cubin: bool) -> float:
    base = min(previous_starts) if previous_starts else (WARM_START_S if cache_warm else COLD_START_S)
    backend = (candidate.config or ("", 0))[0]
    return base + (FLASHINFER_JIT_S if backend == "FLASHINFER" and not flashinfer_cubin else 0.0)


def measure_estimate(shapes: Sequence[tuple[int, int]], repeats: int, decode_steps: int,
                     measured: Sequence[float] = ()) -> float:
    """Seconds of timed calls for one candidate: the previous candidate's if known, else a rough
    guess (an 8B model on an H100 prefills ~40k tokens/s and decodes a step in ~15 ms)."""
    if measured:
        return max(measured)
    calls = 1 + 2 * repeats
    return sum(calls * (b * c / 40000.0 + (decode_steps + 32) * 0.015) for b, c in shapes)
