"""What vLLM's selector reads and what it answers, as plain data: the selector inputs
(`AttentionSelectorConfig`), the rest of what the rules read (`SelectionContext`), one backend's
verdict, a log line, what vLLM raises, and the whole `Explanation`. No torch, no rules."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnsel.attention.rules.spec import attn_type_str

if TYPE_CHECKING:  # type names only: rules/ is the floor the other rooms stand on
    from attnsel.attention.hybrid import HybridAnswer, HybridSetup
    from attnsel.attention.versions import RuleProfile

# Selector inputs that only some versions have (docs/vllm-rules.md §2, §9)
OPTIONAL_SELECTOR_FIELDS = (
    "use_per_head_quant_scales",
    "has_sliding_window",
    "use_non_causal",
    "use_batch_invariant",
    "use_kv_connector",
    "use_pcp",
    "use_adaptive_verification",
    "use_dcp",
    "use_rswa",
)


@dataclass(frozen=True)
class SelectorInputs:
    """vLLM's `AttentionSelectorConfig` (docs/vllm-rules.md §2). `block_size` is the user's --block-size."""

    head_size: int
    dtype: str  # "float16" | "bfloat16" | "float32"
    kv_cache_dtype: str | None = "auto"
    block_size: int | None = None
    use_mla: bool = False
    has_sink: bool = False
    use_sparse: bool = False
    use_mm_prefix: bool = False
    attn_type: str = "decoder"  # decoder | encoder | encoder_only | encoder_decoder
    use_per_head_quant_scales: bool = False
    # later selector inputs (docs/vllm-rules.md §9); ignored (with a note) by versions without them
    has_sliding_window: bool = False
    use_non_causal: bool = False
    use_batch_invariant: bool = False
    use_kv_connector: bool = False
    use_pcp: bool = False
    use_adaptive_verification: bool = False
    use_dcp: bool = False
    use_rswa: bool = False

    def replace(self, **changes: Any) -> SelectorInputs:
        return dataclasses.replace(self, **changes)

    def vllm_repr(self, profile: RuleProfile) -> str:
        """`AttentionSelectorConfig.__repr__` exactly as vLLM prints it (f-string fields) in the
        release `profile` describes (the vocabulary sits below the versions, so the caller names it)."""
        values = {
            "head_size": str(self.head_size),
            "dtype": f"torch.{self.dtype}",
            "kv_cache_dtype": str(self.kv_cache_dtype),
            "block_size": str(self.block_size),
            "use_mla": str(self.use_mla),
            "has_sink": str(self.has_sink),
            "use_sparse": str(self.use_sparse),
            "use_mm_prefix": str(self.use_mm_prefix),
            "use_per_head_quant_scales": str(self.use_per_head_quant_scales),
            "attn_type": attn_type_str(self.attn_type, profile.params.get("attn_type_str_enum", False)),
        }
        for name in OPTIONAL_SELECTOR_FIELDS:
            values[name] = str(getattr(self, name))
        body = ", ".join(f"{name}={values[name]}" for name in profile.params["selector_fields"])
        return f"AttentionSelectorConfig({body})"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SelectionContext:
    """Everything besides the selector inputs that vLLM's rules read (documented defaults).

    - `num_heads`: attention heads per GPU (total // TP); orders the Blackwell MLA sparse pair.
    - `user_backend`: --attention-backend (enum name, any case).
    - `qk_nope_head_dim`: from the model's text config; None means absent, which vLLM reads as 1.
    - `model_dims_known`: False for bare shapes with no model config and no MLA-dimension flag:
      vLLM then has `model_config is None`, and the checks that read hf_text_config (MLA dims,
      index_topk) do not run (e.g. mla/flashinfer_mla.py `supports_combination`). Nothing is invented.
    - `has_index_topk`: the model config has `index_topk` (DeepSeek V3.2 sparse attention).
    - `use_trtllm_attention`: attention_config.use_trtllm_attention (None = not set).
    - `batch_invariant`: VLLM_BATCH_INVARIANT=1.
    - `has_flashinfer_cubin`: has_nvidia_artifactory() is True (flashinfer_cubin installed, or
      VLLM_HAS_FLASHINFER_CUBIN=1, or the artifactory reachable). Default True.
    - `flash_attn_version_override`: --attention-config.flash_attn_version (2/3, or 4 where the version has FA4).
    - `importable`: module name -> present. None (default): every package vLLM ships with is
      present on the target machine; missing keys also count as present.
    - `is_hybrid`, `mamba_cache_float32`: attention+Mamba models (block size managed elsewhere;
      FlashAttention kernel blocks [16, 32, 64] with float32 Mamba state).
    """

    capability: tuple[int, int]
    num_heads: int | None = None
    user_backend: str | None = None
    is_hybrid: bool = False
    is_attention_free: bool = False
    mamba_cache_float32: bool = False
    qk_nope_head_dim: int | None = None
    model_dims_known: bool = True
    has_index_topk: bool = False
    use_trtllm_attention: bool | None = None
    batch_invariant: bool = False
    has_flashinfer_cubin: bool = True
    flash_attn_version_override: int | None = None
    importable: Mapping[str, bool] | None = None
    gpu_name: str | None = None
    # later rules (docs/vllm-rules.md §9): MLA dims for TOKENSPEED_MLA / sparse FlashInfer, the indexer
    # top-k for FLASH_ATTN_MLA_SPARSE_FA4, and the context-parallel sizes behind use_dcp/use_pcp.
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    kv_lora_rank: int | None = None
    index_topk: int | None = None
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    # KV heads per GPU (later FlashInfer: GQA on CC 10.x with TRT-LLM allows kernel blocks up to
    # 1024); None = unknown, read as "not GQA"
    num_kv_heads: int | None = None
    # a hybrid model's state layout and Mamba cache flags (attention/hybrid/pages.py HybridSetup);
    # None: vLLM's hybrid block size is not computed
    hybrid: HybridSetup | None = None

    def module_present(self, module: str) -> bool:
        if self.importable is None:
            return True
        return bool(self.importable.get(module, True))

    @property
    def effective_qk_nope_head_dim(self) -> int:
        # getattr(hf_text_config, "qk_nope_head_dim", 1) in FlashInfer MLA (docs/vllm-rules.md §3b)
        return 1 if self.qk_nope_head_dim is None else self.qk_nope_head_dim

    def replace(self, **changes: Any) -> SelectionContext:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class BackendVerdict:
    name: str
    priority: int | None  # index in vLLM's priority list; None when not in the list
    valid: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "priority": self.priority, "valid": self.valid, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class LogLine:
    level: str  # "debug" | "info" | "warning"
    message: str
    source: str  # where vLLM logs it

    def to_dict(self) -> dict:
        return {"level": self.level, "message": self.message, "source": self.source}


def reasons_str(invalid: Mapping[str, list[str]]) -> str:
    """The `Reasons: {...}` part of vLLM's selector messages: each invalid backend and its reasons."""
    return ", ".join(f"{name}: [{', '.join(reasons)}]" for name, reasons in invalid.items())


class VllmRaises(Exception):
    """What vLLM would raise; `message` is vLLM's text, `exc_type` its exception class."""

    def __init__(self, message: str, exc_type: str = "ValueError", phase: str = "config"):
        super().__init__(message)
        self.message = message
        self.exc_type = exc_type
        self.phase = phase


@dataclass(frozen=True)
class Explanation:
    profile: str
    vllm_version: str
    capability: tuple[int, int]
    gpu_name: str | None
    inputs: SelectorInputs
    context: SelectionContext
    backends: tuple[BackendVerdict, ...]  # the priority list, evaluated on `inputs` as given
    explicit_backend: BackendVerdict | None  # --attention-backend, evaluated on `inputs`
    selected: str | None
    block_size: int | None
    kernel_block_size: int | None
    kernel_block_sizes: tuple[Any, ...] | None
    kv_cache_layout: str | None
    flash_attn_version: int | None
    logs: tuple[LogLine, ...]
    error: str | None
    error_type: str | None
    error_phase: str | None
    layer_config_repr: str | None  # AttentionSelectorConfig the layers pass (final block size)
    notes: tuple[str, ...] = ()
    profile_note: str | None = None
    profile_reason: str | None = None  # which profile answered and why (set by the CLI)
    hybrid: HybridAnswer | None = None  # attention/hybrid/pages.py HybridAnswer: pages, padding, groups
    # attention/explain/explicit_block_sizes.py: what each explicit --block-size would do (hybrid models, set by explain)
    explicit_block_sizes: tuple[Any, ...] = ()
    # the forced flags that change what vLLM would do on its own (set by explain; None: not worked out)
    flags_to_paste: tuple[str, ...] | None = None
    # the release's known vLLM faults this answer meets (attention/versions/faults.py FaultMatch; set by explain)
    known_faults: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else 1

    @property
    def warnings(self) -> list[str]:
        """Messages vLLM logs at INFO/WARNING level, in order (debug lines left out)."""
        return [line.message for line in self.logs if line.level != "debug"]

    @property
    def valid_backends(self) -> list[str]:
        return [b.name for b in self.backends if b.valid]

    @property
    def vllm_args(self) -> list[str]:
        """The flags to paste: those that change what vLLM would do where explain worked them out,
        else the backend and block size that pin this answer."""
        if self.flags_to_paste is not None:
            return list(self.flags_to_paste)
        if self.error is not None or self.selected is None:
            return []
        args = ["--attention-backend", self.selected]
        if self.block_size is not None and self.hybrid is None:  # a hybrid's size is vLLM's to compute
            args += ["--block-size", str(self.block_size)]
        return args
