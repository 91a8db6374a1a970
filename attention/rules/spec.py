"""The vocabulary of vLLM's attention rules: kernel block sizes, a backend's attributes as data,
and small facts several rule modules share (docs/vllm-rules.md §2, §3). No torch is imported here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

IMPORT_ERROR_REASON = "ImportError"  # docs/vllm-rules.md §5b: the literal reason for a missing package
# Rules that read the model from vLLM's current VllmConfig get it from the SelectionContext; where
# the context gives no head count, this stands in for it (the parity harness's model stand-in uses
# the same value: MHA, no GQA).
MODEL_HEADS_WHEN_UNKNOWN = 8
DEFAULT_INDEX_TOPK = 2048  # DeepSeek V3.2's index_topk: used when only has_index_topk is known
# vLLM's --kv-cache-dtype values whose cache holds the model dtype (nothing quantized)
UNQUANTIZED_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16")
# The plain fp8 caches (per-tensor scales; STR_DTYPE_TO_TORCH_DTYPE in vllm/utils/torch_utils.py):
# the quantized caches attnsel's kernels build and time (attention/kernels/kv_quant.py).
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class MultipleOf:
    """vLLM's `MultipleOf(base)` kernel block size: any multiple of `base` (docs/vllm-rules.md §2)."""

    base: int

    def __str__(self) -> str:
        return f"MultipleOf({self.base})"

    def vllm_repr(self) -> str:
        # vLLM's MultipleOf has no __repr__, so its messages print the default object repr, whose
        # address differs per process; we print it with an elided address.
        return "<vllm.v1.attention.backend.MultipleOf object at 0x...>"

    def to_dict(self) -> dict:
        return {"multiple_of": self.base}


KernelBlockSize = int | MultipleOf


def kernel_sizes_repr(sizes: list[KernelBlockSize] | None) -> str:
    """The Python list repr vLLM prints for `get_supported_kernel_block_sizes()`."""
    if sizes is None:
        return "None"
    return "[" + ", ".join(s.vllm_repr() if isinstance(s, MultipleOf) else repr(s) for s in sizes) + "]"


def kernel_sizes_display(sizes: list[KernelBlockSize]) -> str:
    return "[" + ", ".join(str(s) for s in sizes) + "]"



def parse_kernel_sizes(raw: list) -> tuple[KernelBlockSize, ...]:
    return tuple(MultipleOf(int(x["multiple_of"])) if isinstance(x, dict) else int(x) for x in raw)


def kernel_block_size_for(block_size: int, sizes: Sequence[KernelBlockSize]) -> int | None:
    """The kernel block size vLLM's GPU runner uses for a KV-cache block of `block_size`, given one
    backend's `get_supported_kernel_block_sizes()`, or None where vLLM raises "No common block size".

    vLLM's `select_common_block_size` (vllm/v1/worker/utils.py, from `prepare_kernel_block_sizes`):
    the block size itself if an entry accepts it (an int equal to it, or a MultipleOf it is a
    multiple of); else the largest int entry that divides it, and each cache block is split into
    block_size // size kernel blocks. (With one backend per KV-cache group an int entry always
    accepts itself; an empty list accepts nothing.)

    >>> kernel_block_size_for(128, [16, 32, 64]), kernel_block_size_for(128, [MultipleOf(16)])
    (64, 128)
    >>> kernel_block_size_for(8, [16, 32, 64]) is None
    True
    """
    if any((block_size % s.base == 0) if isinstance(s, MultipleOf) else block_size == s for s in sizes):
        return block_size
    divisors = [s for s in sizes if isinstance(s, int) and block_size % s == 0]
    return max(divisors) if divisors else None


def intersect_sizes(lhs: KernelBlockSize, rhs: KernelBlockSize) -> KernelBlockSize | None:
    """composite.py _intersect_kernel_block_sizes for one pair of entries."""
    if isinstance(lhs, MultipleOf):
        if isinstance(rhs, MultipleOf):
            return MultipleOf(math.lcm(lhs.base, rhs.base))
        return rhs if rhs % lhs.base == 0 else None
    if isinstance(rhs, MultipleOf):
        return lhs if lhs % rhs.base == 0 else None
    return lhs if lhs == rhs else None


# --- a backend's attributes as a release's data spells them (attention/versions/*.json, resolved) ----------
class _RuleName(TypedDict):
    rule: str


class NamedRule(_RuleName, total=False):
    """A rule the release's code implements, named in the data: {"rule": name, and its parameters}
    (the release's `Rules` method `_<kind>_<name>`, attention/versions/code.py)."""

    list: list[str]  # kv_cache_dtypes: the names the rule starts from
    versions: list[int]  # sink: the FlashAttention versions with sinks
    version: int  # per_head_quant_scales: the lowest FlashAttention version


class HeadSizeRule(TypedDict, total=False):
    """`supports_head_size`: a list, a multiple up to a maximum (another with FA4), or a minimum."""

    list: list[int]
    multiple_of: int
    max: int
    max_if_fa4: int
    min: int


class CapabilityRule(TypedDict, total=False):
    """`supports_compute_capability`: a range of (major, minor), or a set of majors."""

    min: list[int]
    max: list[int]
    majors: list[int]


class LayoutRule(TypedDict):
    HND_on_major: int  # the required KV-cache layout is HND on this compute-capability major


class CompositeRule(TypedDict, total=False):
    """A composite backend (vllm/v1/attention/backends/composite.py): a causal and a general child.
    (A `null` in a release's data removes a key: merge-patch, registry.py; no value here is None.)"""

    causal: str
    general: str
    causal_capability_major: int
    causal_combination: str
    device_major: int
    head_sizes: list[int]
    kernel_block_sizes: list[int]


FlagRule = bool | NamedRule  # a plain yes/no, or a rule of the release's code


@dataclass(frozen=True)
class BackendSpec:
    """One backend's attributes, as data (docs/vllm-rules.md §3a/§3b)."""

    name: str
    class_path: str
    dtypes: tuple[str, ...]
    kv_cache_dtypes: list[str] | NamedRule  # list of names, or {"rule": ..., "list": [...]}
    kernel_block_sizes: tuple[KernelBlockSize, ...]
    kernel_block_sizes_hybrid_float32_mamba: tuple[KernelBlockSize, ...] | None
    head_sizes: Literal["any"] | HeadSizeRule  # "any" | {"list": [...]} | {"multiple_of": n, "max": m} | {"min": n}
    capability: Literal["any"] | CapabilityRule  # "any" | {"min": [M, m], "max": [M, m]} | {"majors": [...]}
    sink: FlagRule  # bool | {"rule": ...}
    mm_prefix: FlagRule  # bool | {"rule": ...}
    mla: bool
    sparse: bool
    attn_types: tuple[str, ...]
    per_head_quant_scales: FlagRule
    combination: str | None
    imports: tuple[str, ...]
    required_layout: str | LayoutRule | None  # "HND", HND on one major, or none
    # later selector inputs (docs/vllm-rules.md §9 "New validation reasons"); older releases lack them.
    sliding_window: FlagRule = False
    rswa: FlagRule = False
    non_causal: FlagRule = False
    non_causal_dcp: FlagRule = False
    batch_invariance: FlagRule = False
    kv_connector: FlagRule = True
    pcp: FlagRule = False
    dcp: FlagRule | None = False
    device_cpu_query_lens_mismatch: FlagRule = True
    # kernel block sizes computed by a rule (FLASH_ATTN, FLASHINFER in later releases); a composite backend
    # (TRITON_FLASH_ATTN, TRITON_FLASHINFER: vllm/v1/attention/backends/composite.py)
    kernel_block_sizes_rule: str | None = None
    composite: CompositeRule | None = None
    vllm_name: str | None = None  # get_name(), when it differs from the enum name

    @property
    def module(self) -> str:
        return self.class_path.rsplit(".", 1)[0]


@dataclass(frozen=True)
class FlashAttnResolution:
    """`fa_utils.get_flash_attn_version()` as the `supports_*` helpers call it (no head size)."""

    version: int | None  # None: vLLM's function returns None (the chosen version is unsupported)
    warnings: tuple[str, ...] = ()



def is_fp8(kv_cache_dtype: str | None) -> bool:
    """True for the fp8 KV caches tune times (`is_quantized_kv_cache` below is
    vLLM's wider test: every cache but the model dtype's).

    >>> is_fp8("fp8"), is_fp8("auto"), is_fp8("fp8_e5m2")
    (True, False, True)
    """
    return str(kv_cache_dtype or "auto") in FP8_KV_CACHE_DTYPES


def is_quantized_kv_cache(kv_cache_dtype: str | None) -> bool:
    """vLLM's `is_quantized_kv_cache`: anything but auto/float16/bfloat16 (docs/vllm-rules.md §9)."""
    return kv_cache_dtype is not None and kv_cache_dtype not in UNQUANTIZED_KV_CACHE_DTYPES


def attn_type_str(attn_type: str, str_enum: bool = False) -> str:
    """How vLLM's f-strings print an `AttentionType` member under Python 3.11+ (docs/vllm-rules.md §2):
    `AttentionType.DECODER` while it is a `(str, Enum)`, the value `decoder` once it is a `StrEnum`
    (vllm/v1/attention/backend.py:34 @ 0.34.0; the version's `params.attn_type_str_enum`)."""
    return attn_type if str_enum else f"AttentionType.{attn_type.upper()}"
