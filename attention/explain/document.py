"""The `explain --json` answer as typed dicts: one definition of its keys, written by
reports/explain/table.py (and attention_free.py), built in part here (the model section,
attention/explain/answers.py), and read by `attnsel report` (attention/explain/answers.py
saved_flags). A key renamed here is renamed for every writer and reader, under mypy.

TypedDicts, not dataclasses: the document is JSON, its key order is what `--json` prints
(docs/schemas/attnsel-explain.json), and a saved answer of an older attnsel is read as it is.
"""

from __future__ import annotations

from typing import TypedDict


class VitSection(TypedDict):
    """The ViT backend vLLM picks for a multimodal model's vision encoder (attention/selector/vit.py)."""

    head_size: int
    dtype: str
    backend: str | None
    log: str | None
    error: str | None  # vLLM's AssertionError, where it refuses


class ModelSection(TypedDict):
    """`model` of a one-GPU answer: the model read, vLLM's lines about it, its ViT backend."""

    name: str | None
    source: str | None  # "bundled default" | "catalog" | "path" | "folder" | "stdin" | ...
    model_type: str | None
    warnings: list[str]
    infos: list[str]
    notes: list[str]
    dtype_error: str | None
    vit: VitSection | None


class ModelRef(TypedDict):
    """`model` of `--gpu all` and `--vllm-version all`: which model was asked about."""

    name: str
    source: str
    model_type: str | None


class GpuRef(TypedDict):
    name: str | None
    capability: str  # "9.0"


class SelectionContextSection(TypedDict):
    """`context`: what vLLM's selector reads beside its inputs."""

    num_heads: int | None
    attention_backend: str | None
    is_hybrid: bool
    is_attention_free: bool
    mamba_cache_float32: bool | None
    qk_nope_head_dim: int | None
    has_index_topk: bool | None
    use_trtllm_attention: bool | None
    batch_invariant: bool
    has_flashinfer_cubin: bool
    flash_attn_version_override: int | None
    decode_context_parallel_size: int
    prefill_context_parallel_size: int
    num_kv_heads: int | None
    kv_lora_rank: int | None
    index_topk: int | None
    imports_checked: bool
    missing_modules: list[str]


class _ExplainAnswer(TypedDict):
    schema: str  # "attnsel-explain/1"
    profile: str
    profile_vllm_version: str
    profile_note: str | None
    profile_reason: str | None
    gpu: GpuRef
    inputs: dict
    context: SelectionContextSection
    backends: list[dict]
    explicit_backend: dict | None
    selected: str | None
    block_size: int | None
    kernel_block_size: int | None
    kernel_block_sizes: list | None
    kv_cache_layout: str | None
    flash_attn_version: int | None
    warnings: list[str]
    logs: list[dict]
    error: str | None
    error_type: str | None
    error_phase: str | None
    vllm_config_repr: str | None
    vllm_args: list[str]
    notes: list[str]
    hybrid: dict | None
    hybrid_explicit_block_sizes: list[dict]
    known_faults: list[dict]
    exit_code: int


class ExplainAnswer(_ExplainAnswer, total=False):
    """`explain --json` on one GPU (`attnsel-explain/1`); the last three keys only where they apply."""

    model: ModelSection  # a model was read
    memory: dict  # vLLM's memory plan on the GPU (attention/memory MemoryPlan.to_dict)
    memory_not_planned: str  # why there is none where a model and a GPU were named


class AttentionFreeAnswer(TypedDict):
    """`explain --json` for a model without attention layers (`attnsel-explain/1`, no backends)."""

    schema: str
    profile: str
    profile_vllm_version: str
    profile_reason: str | None
    gpu: GpuRef
    attention_free: bool
    answer: str
    inputs: None
    backends: list[dict]
    selected: None
    block_size: None
    block_size_rule: str
    ignored_flags: list[str]
    warnings: list[str]
    logs: list[dict]
    error: None
    error_type: None
    vllm_args: list[str]
    notes: list[str]
    model: ModelSection
    exit_code: int


class SavedAnswer(TypedDict, total=False):
    """What `attnsel report` reads of a saved answer (any attnsel version's: every key may be absent)."""

    explicit_backend: dict | None
    inputs: dict | None
    vllm_args: list[str] | None


class MatrixRowFields(TypedDict):
    """One GPU family of `explain --gpu all` (attention/explain/answers.py MatrixRow.to_dict)."""

    family: str
    gpu: str
    capability: str | None
    dtype: str | None
    selected: str | None
    block_size: int | None
    kernel_block_size: int | None
    valid_backends: list[str]
    valid_count: int
    total_count: int
    error: str | None
    error_phase: str | None
    model_warnings: list[str]
    known_faults: list[dict]
    exit_code: int  # what `explain --gpu` on this GPU exits with


class ExplainMatrix(TypedDict):
    """`explain --gpu all --json` (`attnsel-explain-matrix/1`)."""

    schema: str
    profile: str | None
    profile_vllm_version: str | None
    model: ModelRef | None
    inputs: dict | None  # the selector inputs, where no model was read
    rows: list[MatrixRowFields]
    notes: list[str]


class ReleaseFields(TypedDict):
    """One release's answer in `explain --vllm-version all`."""

    profile: str
    vllm_version: str
    selected: str | None
    block_size: int | None
    kernel_block_size: int | None
    valid_backends: list[str]
    backends: list[dict]
    error: str | None
    refused: bool  # the release refused the request before any backend was asked
    notes: list[str]
    exit_code: int


class Change(TypedDict):
    before: object
    after: object


class ChangeFields(TypedDict):
    """What changed from one release to the next."""

    before: str
    after: str
    changed: bool
    became_valid: list[str]
    became_invalid: list[str]
    selected: Change | None
    block_size: Change | None
    error: Change | None
    summary: list[str]


class ExplainHistory(TypedDict):
    """`explain --vllm-version all --json` (`attnsel-explain-history/1`)."""

    schema: str
    gpu: GpuRef
    model: ModelRef | None
    inputs: dict | None
    releases: list[ReleaseFields]
    changes: list[ChangeFields]


class LiveVerdictFields(TypedDict):
    """One backend as the installed vLLM's own selector judged it (attention/explain/live.py)."""

    name: str
    priority: int | None
    valid: bool
    reasons: list[str]


class LiveAnswerFields(TypedDict):
    """What the installed vLLM's selector answered (attention/explain/live.py LiveAnswer.to_dict)."""

    vllm_version: str
    api: str  # "pairs" | "candidates"
    backends: list[LiveVerdictFields]
    explicit_backend: LiveVerdictFields | None
    selected: str | None
    block_size: int | None
    error: str | None
    forced_backend: str | None
    selector_fields: list[str]


class LiveAnswerAsked(LiveAnswerFields):
    """`live` of `explain --live --json`: vLLM's answer with the GPU and inputs it was asked about."""

    gpu: GpuRef
    inputs: dict


class MismatchFields(TypedDict):
    what: str  # "priority list" | "backend" | "selected" | "block size" | "explicit backend"
    backend: str | None
    ours: object
    live: object


class _LiveReport(TypedDict):
    live: LiveAnswerAsked


class LiveReport(_LiveReport, total=False):
    """`explain --live --json`; with --compare-live the profile and where it differs too."""

    profile: str
    profile_reason: str | None
    mismatches: list[MismatchFields]
    agree: bool
