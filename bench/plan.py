"""The `attnsel tune` sweep plan: which (backend, block size, workload) rows to time.

Before anything runs, every (backend, --block-size) pair is checked with the `explain` rules for
this GPU: a pair vLLM would refuse is listed as skipped with vLLM's own reason and never timed.
This module is torch-free (`--dry-run` works without a GPU).

The ONE place that talks to the rules engine is `vllm_verdict` / `vllm_default_choice` below:
if the rules API changes, adapt it here.

Default grid (sized so one model shape takes < 3 min cold, < 60 s warm on one GPU):
  backends     FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION (vllm-rules §5a, non-MLA)
  block sizes  16, 32, 64, 128, 256 (FLEX_ATTENTION: 16 only, unless --full or --block-sizes:
               it recompiles per shape and block size)
  decode       batch {1, 16, 64, 256} x context {1024, 4096, 16384}, minus shapes whose KV cache
               exceeds 2**20 tokens (256 x 16384): 11 shapes
  prefill      chunked prefill: 1 x 2048 new tokens on an empty cache, 1 x 2048 new tokens
               after 14336 cached ones (context 16384), 4 x 512 new after 3584 (context 4096)
  mixed        decodes and chunked prefills in one step, as vLLM's scheduler mixes them (one
               request in eight brings a chunk): 32 requests at context 4096 with 512-token
               chunks, 128 requests at context 2048 with 256-token chunks
`--quick` keeps 3 decode, 1 prefill and 1 mixed shape; `--full` widens decode to batch
{1,4,16,32,64,128,256} x context {512 ... 32768} (up to 2**22 KV tokens) and adds prefill/mixed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable, Optional, Sequence

from attnsel.errors import UserInputError

BACKENDS: tuple[str, ...] = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
DEFAULT_BLOCK_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)
# FlexAttention recompiles per shape and block size; the default/quick grids keep vLLM's own
# preferred size (16, vllm-rules §5f) so the sweep stays inside its time budget.
LIMITED_DEFAULT_BLOCK_SIZES: dict[str, tuple[int, ...]] = {"FLEX_ATTENTION": (16,)}
WORKLOAD_KINDS: tuple[str, ...] = ("decode", "prefill", "mixed")
GRIDS: tuple[str, ...] = ("quick", "default", "full")

DTYPE_ALIASES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "half": "float16", "float16": "float16",
    "fp32": "float32", "float": "float32", "float32": "float32",
}
# vllm-rules §4 CacheDType.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")


@dataclass(frozen=True)
class TuneShape:
    """The attention shape of one model layer group, per GPU (after tensor parallelism)."""

    head_size: int
    num_q_heads: int  # per GPU
    num_kv_heads: int  # per GPU
    dtype: str  # "bfloat16" | "float16" | "float32"
    kv_cache_dtype: str = "auto"
    use_mla: bool = False
    model: Optional[str] = None
    assumed: Optional[str] = None  # what tune assumed that the user did not say (default head layout)
    tensor_parallel_size: int = 1
    # Model-derived selector facts that change vLLM's verdict (vllm-rules §2, §6); the kernels
    # timed here do not model them (no sinks, no sliding window): rows say so in their notes.
    has_sink: bool = False
    use_sparse: bool = False
    use_mm_prefix: bool = False
    attn_type: str = "decoder"
    is_hybrid: bool = False
    mamba_cache_float32: bool = False
    sliding_window: Optional[int] = None
    # MLA layers (bench/plan_mla.py): head_size = kv_lora_rank + qk_rope_head_dim, one KV head
    kv_lora_rank: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    qk_nope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None

    def describe(self) -> str:
        src = f"{self.model}, TP={self.tensor_parallel_size}: " if self.model else ""
        if self.use_mla and self.kv_lora_rank is not None:
            from attnsel.bench import plan_mla

            return f"{src}{plan_mla.describe(self)}, {self.dtype}, kv cache {self.kv_cache_dtype}"
        gqa = f"{self.num_q_heads}/{self.num_kv_heads} heads"
        return f"{src}head_size {self.head_size}, {gqa} per GPU, {self.dtype}, kv cache {self.kv_cache_dtype}"

    def to_dict(self) -> dict:
        return asdict(self)


def normalize_dtype(value: str) -> str:
    key = str(value).strip().lower().replace("torch.", "")
    if key not in DTYPE_ALIASES:
        raise UserInputError(f"unknown --dtype {value!r}; use bf16, fp16 or fp32")
    return DTYPE_ALIASES[key]


# `attnsel tune --head-size N --dtype D` with no head counts times one representative layout per
# head size: the query / KV heads (per GPU) of widely served models with that head size. The output
# names it; --num-heads / --num-kv-heads or --model tune the real one.
DEFAULT_HEAD_LAYOUTS: dict[int, tuple[int, int, str]] = {
    64: (32, 8, "Llama-3.2-1B, gpt-oss-20b at TP 2"),
    80: (32, 32, "Phi-2, StableLM-3B"),
    96: (32, 32, "Phi-3-mini"),
    128: (32, 8, "Llama-3.1-8B, Qwen3-8B, Mistral-7B"),
    256: (16, 8, "Gemma-2-9B, Gemma-3-12B"),
}
# other head sizes: GQA group 4 (32 query / 8 KV heads), the most common group among served models
FALLBACK_HEAD_LAYOUT = (32, 8, "GQA group 4, the most common among served models")


def default_head_layout(head_size: int) -> tuple[int, int, str]:
    """(query heads, KV heads, the note the output prints) assumed when only --head-size is given.

    >>> default_head_layout(128)[:2]
    (32, 8)
    """
    q, kv, like = DEFAULT_HEAD_LAYOUTS.get(head_size, FALLBACK_HEAD_LAYOUT)
    note = (f"no --num-heads given: assumed {q} query / {kv} KV heads per GPU at head size {head_size} "
            f"({like}); pass --num-heads/--num-kv-heads or --model to tune your model's layout")
    return q, kv, note


def make_shape(
    head_size: int,
    num_heads: int,
    num_kv_heads: Optional[int],
    dtype: str,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
) -> TuneShape:
    """A shape from explicit flags; heads are model totals, divided by TP like vLLM does
    (heads per GPU = total // TP, KV heads per GPU = max(1, kv // TP))."""
    kv = num_heads if num_kv_heads is None else num_kv_heads
    if head_size <= 0 or num_heads <= 0 or kv <= 0:
        raise UserInputError("--head-size, --num-heads and --num-kv-heads must be positive")
    if tensor_parallel_size <= 0:
        raise UserInputError("--tensor-parallel-size must be positive")
    if num_heads % kv:
        raise UserInputError(f"--num-heads {num_heads} is not a multiple of --num-kv-heads {kv} (GQA groups must be equal)")
    if num_heads % tensor_parallel_size:
        raise UserInputError(f"--num-heads {num_heads} is not divisible by --tensor-parallel-size {tensor_parallel_size}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise UserInputError(f"unknown --kv-cache-dtype {kv_cache_dtype!r}; one of {', '.join(KV_CACHE_DTYPES)}")
    return TuneShape(
        head_size=head_size,
        num_q_heads=num_heads // tensor_parallel_size,
        num_kv_heads=max(1, kv // tensor_parallel_size),
        dtype=normalize_dtype(dtype),
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel_size=tensor_parallel_size,
    )


def shape_from_model(
    model: str,
    *,
    capability: Optional[tuple[int, int]],
    dtype: str = "auto",
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
) -> TuneShape:
    """The same derivation as `explain --model` (attention/model_config.py)."""
    from attnsel.attention import model_config
    from attnsel.bench import plan_mla

    hf = model_config.load_model_config(model)
    facts = model_config.derive_model_facts(
        hf, capability=capability, dtype=dtype, tensor_parallel_size=tensor_parallel_size
    )
    if getattr(facts, "dtype_error", None):
        raise UserInputError(facts.dtype_error)
    if facts.is_attention_free:
        raise UserInputError(f"{model} has no attention layers (model_type {facts.model_type}): vLLM picks no "
                             "attention backend for it, so there is nothing to tune")
    return TuneShape(
        head_size=int(facts.head_size),
        num_q_heads=int(facts.num_heads_per_gpu),
        num_kv_heads=max(1, int(facts.num_kv_heads) // tensor_parallel_size),
        dtype=normalize_dtype(str(facts.dtype)),
        kv_cache_dtype=(getattr(facts, "kv_cache_dtype_forced", None) if kv_cache_dtype == "auto" else None)
        or kv_cache_dtype,
        use_mla=bool(facts.use_mla),
        model=str(model),
        tensor_parallel_size=tensor_parallel_size,
        has_sink=bool(facts.has_sink),
        use_sparse=bool(facts.use_sparse),
        use_mm_prefix=bool(facts.use_mm_prefix),
        attn_type=str(facts.attn_type),
        is_hybrid=bool(facts.is_hybrid),
        mamba_cache_float32=bool(facts.mamba_cache_float32),
        sliding_window=getattr(facts, "sliding_window", None),
        **plan_mla.mla_fields_from_facts(facts),
    )


# ---------------------------------------------------------------------------------------------
# Workloads


@dataclass(frozen=True)
class WorkloadSpec:
    """One timed shape, as attention/kernels/paged.py `Workload` builds it. `context_len` is each
    request's KV length (cached + new tokens, like vLLM's seq_lens; lengths are ragged around it);
    `query_len` the new tokens per request (1 for decode). For "mixed", one request in eight (at
    least one) brings a `query_len` chunk and the rest decode (paged.mixed_prefill_count)."""

    kind: str
    batch: int
    context_len: int
    query_len: int = 1

    def label(self) -> str:
        if self.kind == "decode":
            return f"decode b={self.batch} ctx={self.context_len}"
        if self.kind == "prefill":
            return f"prefill b={self.batch} q={self.query_len} ctx={self.context_len}"
        return f"mixed b={self.batch} ctx={self.context_len} chunk={self.query_len}"

    @property
    def kv_tokens(self) -> int:
        return self.batch * self.context_len

    @property
    def query_tokens(self) -> int:
        if self.kind == "mixed":
            chunks = mixed_prefill_count(self.batch)
            return (self.batch - chunks) + chunks * self.query_len
        return self.batch * self.query_len

    def to_dict(self) -> dict:
        d = asdict(self)
        d["label"] = self.label()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "WorkloadSpec":
        return cls(d["kind"], int(d["batch"]), int(d["context_len"]), int(d.get("query_len", 1)))


def mixed_prefill_count(batch: int) -> int:
    """Same rule as attention/kernels/paged.py (kept here so the parent stays torch-free)."""
    if batch == 1:
        return 1
    return min(batch - 1, max(1, batch // 8))


def _decode_grid(batches: Iterable[int], contexts: Iterable[int], max_kv_tokens: int) -> list[WorkloadSpec]:
    return [WorkloadSpec("decode", b, c) for b in batches for c in contexts if b * c <= max_kv_tokens]


def workload_grid(kinds: Sequence[str], grid: str = "default") -> list[WorkloadSpec]:
    """The shapes timed for each workload kind (see the module docstring for the reasoning)."""
    if grid not in GRIDS:
        raise UserInputError(f"unknown grid {grid!r}")
    decode = {
        "quick": [WorkloadSpec("decode", 1, 4096), WorkloadSpec("decode", 64, 4096), WorkloadSpec("decode", 256, 1024)],
        "default": _decode_grid((1, 16, 64, 256), (1024, 4096, 16384), 2**20),
        "full": _decode_grid((1, 4, 16, 32, 64, 128, 256), (512, 1024, 2048, 4096, 8192, 16384, 32768), 2**22),
    }
    prefill = {
        "quick": [WorkloadSpec("prefill", 1, 2048, 2048)],
        "default": [WorkloadSpec("prefill", 1, 2048, 2048), WorkloadSpec("prefill", 1, 16384, 2048),
                    WorkloadSpec("prefill", 4, 4096, 512)],
        "full": [WorkloadSpec("prefill", 1, 2048, 2048), WorkloadSpec("prefill", 1, 16384, 2048),
                 WorkloadSpec("prefill", 4, 4096, 512), WorkloadSpec("prefill", 1, 8192, 8192),
                 WorkloadSpec("prefill", 8, 8192, 1024), WorkloadSpec("prefill", 1, 32768, 512)],
    }
    mixed = {
        "quick": [WorkloadSpec("mixed", 32, 4096, 512)],
        "default": [WorkloadSpec("mixed", 32, 4096, 512), WorkloadSpec("mixed", 128, 2048, 256)],
        "full": [WorkloadSpec("mixed", 32, 4096, 512), WorkloadSpec("mixed", 128, 2048, 256),
                 WorkloadSpec("mixed", 16, 16384, 2048), WorkloadSpec("mixed", 256, 1024, 128)],
    }
    table = {"decode": decode, "prefill": prefill, "mixed": mixed}
    out: list[WorkloadSpec] = []
    for kind in kinds:
        out.extend(table[kind][grid])
    return out


def parse_workloads(value: str) -> list[str]:
    value = (value or "all").strip().lower()
    if value == "all":
        return list(WORKLOAD_KINDS)
    kinds = [v.strip() for v in value.split(",") if v.strip()]
    bad = [k for k in kinds if k not in WORKLOAD_KINDS]
    if bad or not kinds:
        raise UserInputError(f"unknown --workload {value!r}; use decode, prefill, mixed or all")
    return list(dict.fromkeys(kinds))


MAX_BLOCK_SIZE_VALUES = 32  # the grid grows with every value: bound it before anything is built
MAX_TUNE_BLOCK_SIZE = 65536  # tokens per KV block; beyond this a page is larger than most KV caches


def parse_block_sizes(value: Optional[str]) -> list[int]:
    if value is None:
        return list(DEFAULT_BLOCK_SIZES)
    if value.count(",") >= MAX_BLOCK_SIZE_VALUES * 4 or len(value) > 4096:
        raise UserInputError(f"--block-sizes lists too many values (at most {MAX_BLOCK_SIZE_VALUES})")
    try:
        sizes = [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise UserInputError(f"--block-sizes must be a comma-separated list of integers, got {value!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise UserInputError(f"--block-sizes must be positive integers, got {value!r}")
    if max(sizes) > MAX_TUNE_BLOCK_SIZE or len(set(sizes)) > MAX_BLOCK_SIZE_VALUES:
        raise UserInputError(f"--block-sizes: at most {MAX_BLOCK_SIZE_VALUES} values, each at most "
                             f"{MAX_TUNE_BLOCK_SIZE} tokens")
    return sorted(set(sizes))


def parse_backends(value: Optional[str]) -> list[str]:
    """--backends as a list; empty: the model's grid (dense backends, or vLLM's MLA backends for an
    MLA model: bench/plan_mla.py)."""
    from attnsel.bench.plan_mla import MLA_BACKENDS

    if not value:
        return []
    names = [v.strip().upper() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in BACKENDS + MLA_BACKENDS]
    if bad:
        raise UserInputError(f"unknown backend(s) {', '.join(bad)}; tune supports {', '.join(BACKENDS + MLA_BACKENDS)}")
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------
# The rules boundary (the only place that imports the explain engine)


# (reasons vLLM would give, kernel block size) for one (backend, --block-size) on this GPU.
Verdict = Callable[[str, int, TuneShape, tuple[int, int]], tuple[list[str], Optional[int]]]
# (backend vLLM picks with no flags, the block size it then uses) or an error string.
DefaultChoice = Callable[[TuneShape, tuple[int, int]], tuple[Optional[str], Optional[int], Optional[str]]]


def rule_profile_choice(vllm_version: Optional[str] = None):
    """The rule profile `explain` would use: --vllm-version, else the installed vLLM, else the newest."""
    from attnsel.attention import rules

    return rules.select_profile(vllm_version)


def _rules(vllm_version: Optional[str] = None):
    """(profile, rules module, selector module) for this vLLM version (attention/rules.py)."""
    from attnsel.attention import rules, selector

    return rule_profile_choice(vllm_version).profile, rules, selector


def _selector_inputs(selector, shape: TuneShape, block_size: Optional[int]):
    return selector.SelectorInputs(
        head_size=shape.head_size,
        dtype=shape.dtype,
        kv_cache_dtype=shape.kv_cache_dtype,
        block_size=block_size,
        use_mla=shape.use_mla,
        has_sink=shape.has_sink,
        use_sparse=shape.use_sparse,
        use_mm_prefix=shape.use_mm_prefix,
        attn_type=shape.attn_type,
    )


def _selection_context(selector, shape: TuneShape, capability: tuple[int, int], backend: Optional[str]):
    # importable=None: judge the target machine as vLLM ships (every package present), the way
    # `explain` does by default; tune times its own adapters, not vLLM's imports.
    from attnsel.bench import plan_mla

    return selector.SelectionContext(
        capability=tuple(capability),
        num_heads=shape.num_q_heads,
        user_backend=backend,
        is_hybrid=shape.is_hybrid,
        mamba_cache_float32=shape.mamba_cache_float32,
        **plan_mla.selection_context_fields(shape),
    )


def vllm_verdict(backend: str, block_size: int, shape: TuneShape, capability: tuple[int, int], *,
                 vllm_version: Optional[str] = None) -> tuple[list[str], Optional[int]]:
    """What vLLM says about `--attention-backend BACKEND --block-size N` (vllm-rules §2, §5f):
    its reasons (empty = accepted) and the kernel block size the framework block is split into."""
    profile, rules, selector = _rules(vllm_version)
    cli_error = rules.block_size_cli_error(profile, block_size)
    if cli_error:
        # where the version has the BlockSize literal its argument parser refuses other sizes (vllm-rules §4, §9)
        return [cli_error], None
    ctx = _selection_context(selector, shape, capability, backend)
    try:
        reasons = list(selector.validate_backend(profile, backend, _selector_inputs(selector, shape, block_size), ctx))
    except Exception as exc:  # noqa: BLE001 -- VllmRaises / not modelled: vLLM's message is the reason
        return [getattr(exc, "message", str(exc))], None
    if reasons:
        return reasons, None
    try:
        return [], int(selector.kernel_block_size_for(profile, backend, block_size, ctx))
    except Exception as exc:  # noqa: BLE001 -- "No common block size for N."
        return [getattr(exc, "message", str(exc)).strip()], None


def vllm_default_choice(shape: TuneShape, capability: tuple[int, int], *,
                        vllm_version: Optional[str] = None) -> tuple[Optional[str], Optional[int], Optional[str]]:
    """What `explain` says vLLM picks with neither flag: (backend, block size, error)."""
    profile, _rules_module, selector = _rules(vllm_version)
    ctx = _selection_context(selector, shape, capability, None)
    explanation = selector.explain(profile, _selector_inputs(selector, shape, None), ctx)
    return explanation.selected, explanation.block_size, explanation.error


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class PlannedConfig:
    backend: str
    block_size: int
    kernel_block_size: Optional[int]
    reasons: tuple[str, ...] = ()  # vLLM's reasons; non-empty => skipped, never timed

    @property
    def runnable(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "block_size": self.block_size,
            "kernel_block_size": self.kernel_block_size,
            "status": "planned" if self.runnable else "skipped",
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Plan:
    shape: TuneShape
    capability: tuple[int, int]
    gpu_name: Optional[str]
    configs: tuple[PlannedConfig, ...]
    workloads: tuple[WorkloadSpec, ...]
    grid: str
    vllm_default_backend: Optional[str]
    vllm_default_block_size: Optional[int]
    vllm_default_error: Optional[str] = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    rule_profile: Optional[str] = None  # the vLLM rule profile that filtered the grid
    rule_profile_reason: Optional[str] = None

    @property
    def runnable_configs(self) -> list[PlannedConfig]:
        return [c for c in self.configs if c.runnable]

    @property
    def skipped_configs(self) -> list[PlannedConfig]:
        return [c for c in self.configs if not c.runnable]

    def launch(self, backend: str, w: "WorkloadSpec") -> tuple[str, str]:
        """How vLLM would launch this row's attention (graph replay or eager), from the recorded
        CUDA-graph facts of the plan's release (attention/cudagraph.py); the worker replaces it
        with the installed vLLM's own dispatcher answer when it drives vLLM's classes."""
        from attnsel.attention import cudagraph, rules

        profile = rules.get_profile(self.rule_profile) if self.rule_profile else None
        version = profile.vllm_version if profile else "?"
        return cudagraph.decode_launch(profile.cudagraph if profile else None, version, backend,
                                       tuple(self.capability), w.kind, w.query_tokens)

    def launch_summary(self) -> dict[str, dict[str, str]]:
        """{backend: {workload label: "graph" | "eager"}} for the runnable backends."""
        out: dict[str, dict[str, str]] = {}
        for backend in dict.fromkeys(c.backend for c in self.runnable_configs):
            out[backend] = {w.label(): self.launch(backend, w)[0] for w in self.workloads}
        return out

    @property
    def timed_row_count(self) -> int:
        return len(self.runnable_configs) * len(self.workloads)

    def estimated_seconds(self, *, per_row_s: float = 0.15, per_backend_startup_s: float = 10.0) -> float:
        """A rough warm-run estimate: <= 0.15 s per row (25 ms warm-up + 100 ms timed budget, capped
        at 300 samples, + batch setup) plus imports per backend worker (FlashInfer: 8.5 s import,
        gpu-facts.md). Cold runs add JIT: ~12 s FlashInfer, ~11 s torch.compile(flex) per shape."""
        backends = {c.backend for c in self.runnable_configs}
        return self.timed_row_count * per_row_s + len(backends) * per_backend_startup_s

    def to_dict(self) -> dict:
        return {
            "shape": self.shape.to_dict(),
            "capability": f"{self.capability[0]}.{self.capability[1]}",
            "gpu": self.gpu_name,
            "grid": self.grid,
            "rule_profile": self.rule_profile,
            "rule_profile_reason": self.rule_profile_reason,
            "vllm_default": {
                "backend": self.vllm_default_backend,
                "block_size": self.vllm_default_block_size,
                "error": self.vllm_default_error,
            },
            "configs": [c.to_dict() for c in self.configs],
            "workloads": [w.to_dict() for w in self.workloads],
            "launch": self.launch_summary(),
            "timed_rows": self.timed_row_count,
            "skipped_configs": len(self.skipped_configs),
            "estimated_seconds_warm": round(self.estimated_seconds(), 1),
            "notes": list(self.notes),
        }


def build_plan(
    shape: TuneShape,
    capability: tuple[int, int],
    *,
    backends: Sequence[str] = (),
    block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
    kinds: Sequence[str] = WORKLOAD_KINDS,
    grid: str = "default",
    gpu_name: Optional[str] = None,
    verdict: Verdict = vllm_verdict,
    default_choice: DefaultChoice = vllm_default_choice,
    block_sizes_given: bool = False,
) -> Plan:
    """Filter backend x block size with vLLM's rules for this GPU; attach the workload shapes.
    `backends` empty: the model's grid (MLA models: vLLM's MLA backends, bench/plan_mla.py).
    `block_sizes_given`: the user passed --block-sizes (then every backend gets all of them)."""
    from attnsel.bench import plan_mla

    notes: list[str] = [shape.assumed] if shape.assumed else []
    backends = list(backends) or plan_mla.default_backends(shape.use_mla, BACKENDS)
    kinds, mla_notes = plan_mla.workload_kinds(shape.use_mla, kinds)
    notes += mla_notes + plan_mla.shape_notes(shape)
    if shape.has_sink:
        notes.append("the model uses attention sinks; the timed kernels run without them, so the ranking is indicative")
    if shape.sliding_window:
        notes.append(f"the model uses a sliding window ({shape.sliding_window} tokens) on some layers; the timed "
                     f"kernels attend to the full context")
    if shape.is_hybrid:
        notes.append("hybrid (attention + Mamba) model: vLLM sizes its KV block from the Mamba state; only the "
                     "attention kernels are timed")
    configs = []
    for backend in backends:
        sizes = list(block_sizes)
        limited = LIMITED_DEFAULT_BLOCK_SIZES.get(backend)
        if limited and not block_sizes_given and grid != "full":
            sizes = [bs for bs in sizes if bs in limited]
            notes.append(f"{backend} is timed at --block-size {', '.join(map(str, limited))} only in the {grid} grid: "
                         f"torch.compile builds flex_attention again for every shape and block size (~11 s each "
                         f"cold, gpu-facts.md); pass --full or --block-sizes to time more")
        for bs in sizes:
            reasons, kernel_bs = verdict(backend, bs, shape, capability)
            configs.append(PlannedConfig(backend, bs, kernel_bs, tuple(reasons)))
    default_backend, default_bs, default_error = default_choice(shape, capability)
    return Plan(
        shape=shape,
        capability=tuple(capability),
        gpu_name=gpu_name,
        configs=tuple(configs),
        workloads=tuple(workload_grid(kinds, grid)),
        grid=grid,
        vllm_default_backend=default_backend,
        vllm_default_block_size=default_bs,
        vllm_default_error=default_error,
        notes=tuple(notes),
    )


def parse_capability(value: str) -> tuple[int, int]:
    from attnsel.probe.capability import parse_capability as parse  # the one parser (range-checked)

    return parse(value, "--capability")


def with_kv_cache_dtype(shape: TuneShape, kv_cache_dtype: str) -> TuneShape:
    return replace(shape, kv_cache_dtype=kv_cache_dtype)
