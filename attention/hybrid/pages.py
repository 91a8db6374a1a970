"""Page sizes and the aligned block size of a hybrid model, per vLLM version.

vLLM's code, restated (the version data's `hybrid` section says which variant a release runs):
- `align: "config_time"` (0.17 / the seed, 0.18-0.19): models/config.py `HybridAttentionMambaModelConfig`,
  before any backend is chosen, from --block-size or the default 16: kernel alignment 16 (0.17: 32
  for FlashInfer with head size 256 on CC 10.x), MLA 64 (128 with --attention-backend CUTLASS_MLA).
- `align: "first_backend"` (0.20-0.32, checked on 0.20-0.25 and 0.29; MLA >= 128 from 0.28): interface.py `_align_hybrid_block_size`
  with the first non-SSM layer's backend: alignment = max(its smallest kernel block, block size).
- `align: "all_backends"` (0.33): the same, then a multiple of every backend's smallest kernel
  block, MLA at least 128, and in "align" cache mode the GDN prefill-checkpoint grid
  (`get_mamba_prefill_checkpoint_alignment`: FlashInfer GDN prefill emits states every 64 tokens).
Page bytes: v1/kv_cache_interface.py `FullAttentionSpec` (2 x KV heads x head size x dtype bytes),
`MLAAttentionSpec` (one latent head), `MambaSpec` (sum of state shapes x dtype bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnsel.attention.hybrid.groups import KvCacheGroups, kv_cache_groups
from attnsel.attention.hybrid.layout import HybridLayout
from attnsel.attention.hybrid.state import state_dtypes, state_shapes
from attnsel.attention.rules import MultipleOf, VllmRaises, is_fp8

if TYPE_CHECKING:  # type names only: the version object is a floor above this room
    from attnsel.attention.rules import SelectionContext, SelectorInputs
    from attnsel.attention.versions import RuleProfile

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SOURCE = "interface.py Platform._align_hybrid_block_size"


@dataclass(frozen=True)
class HybridSetup:
    """What vLLM's alignment reads besides the selector inputs: the layout, the Mamba cache flags,
    TP and the KV heads per GPU. `prefix_caching` / `mamba_cache_mode` None: vLLM's default."""

    layout: HybridLayout
    mamba_ssm_cache_dtype: str = "auto"
    mamba_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    num_kv_heads: int = 1
    prefix_caching: bool | None = None
    mamba_cache_mode: str | None = None
    mamba_block_size: int | None = None


@dataclass(frozen=True)
class HybridAnswer:
    kind: str
    state_shapes: tuple[tuple[int, ...], ...]
    state_dtypes: tuple[str, ...]
    state_page_bytes: int
    attention_page_bytes_per_token: int
    alignment: int
    block_size: int
    attention_page_bytes: int
    padding_pct: float | None
    prefix_caching: bool
    mamba_cache_mode: str
    mamba_block_size: int | None
    groups: KvCacheGroups
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        doc = {k: getattr(self, k) for k in (
            "kind", "state_page_bytes", "attention_page_bytes_per_token", "alignment", "block_size",
            "attention_page_bytes", "padding_pct", "prefix_caching", "mamba_cache_mode", "mamba_block_size")}
        doc["state_shapes"] = [list(s) for s in self.state_shapes]
        doc["state_dtypes"] = list(self.state_dtypes)
        doc["kv_cache_groups"] = self.groups.to_dict()
        doc["notes"] = list(self.notes)
        return doc


def kv_dtype_bytes(kv_cache_dtype: str | None, model_dtype: str) -> int | None:
    if kv_cache_dtype in (None, "auto"):
        return DTYPE_BYTES[model_dtype]
    if kv_cache_dtype in DTYPE_BYTES:
        return DTYPE_BYTES[kv_cache_dtype]
    if is_fp8(kv_cache_dtype):
        return 1
    return None


def attention_page_per_token(inputs: SelectorInputs, num_kv_heads: int) -> int:
    """FullAttentionSpec(block_size=1).page_size_bytes, or MLAAttentionSpec's (no separate V)."""
    size = kv_dtype_bytes(inputs.kv_cache_dtype, inputs.dtype)
    if size is None:
        raise VllmRaises(f"attnsel does not size KV pages of --kv-cache-dtype {inputs.kv_cache_dtype} "
                         "for hybrid models", exc_type="attnsel")
    if inputs.use_mla:
        return num_kv_heads * inputs.head_size * size
    return 2 * num_kv_heads * inputs.head_size * size


def resolve_cache_mode(rules: dict, setup: HybridSetup, layout: HybridLayout, logs: list) -> tuple[bool, str]:
    """models/config.py `MambaModelConfig.verify_and_update_config`: prefix caching (default per
    version: `ModelConfig.is_prefix_caching_supported` says False for hybrid models before 0.33)
    decides the Mamba cache mode."""
    choices = rules["mamba_cache_modes"]
    if setup.mamba_cache_mode is not None and setup.mamba_cache_mode not in choices:
        raise VllmRaises(f"argument --mamba-cache-mode: invalid choice: {setup.mamba_cache_mode!r} "
                         f"(choose from {', '.join(choices)})", exc_type="argparse error")
    prefix = rules["prefix_caching_default"] if setup.prefix_caching is None else setup.prefix_caching
    mode = setup.mamba_cache_mode or "none"
    if setup.mamba_cache_mode is not None and rules.get("mamba_cache_mode_flag_ignored"):
        # 0.33 engine/arg_utils.py: the flag is parsed and warned about, never handed to CacheConfig
        logs.append(("warning", rules["mamba_cache_mode_flag_ignored"]))
        mode = "none"
    if not prefix:
        if mode != "none":
            logs.append(("warning", "Mamba cache mode is set to 'none' when prefix caching is disabled"))
        return False, "none"
    all_mode = layout.model_type in rules.get("all_mode_model_types", ())
    if mode == "none":  # 0.18-0.27 picked 'all' where the model supports it; 0.28+ always 'align'
        mode = "all" if all_mode and rules.get("all_mode_is_default") else "align"
        logs.append(("info", f"Mamba cache mode is set to '{mode}' for {layout.architecture} by default when "
                     "prefix caching is enabled"))
    elif mode == "all" and not all_mode:
        mode = "align"
        logs.append(("warning", "Hybrid or mamba-based model detected without support for prefix caching with "
                     "Mamba cache 'all' mode: falling back to 'align' mode."))
    return True, mode


def _min_kernel(profile: RuleProfile, backend: str, ctx: SelectionContext, inputs: SelectorInputs) -> int:
    sizes = profile.kernel_block_sizes(backend, ctx, inputs)
    return min((s.base if isinstance(s, MultipleOf) else s) for s in sizes) if sizes else 1


def _config_time_alignment(rules: dict, ctx: SelectionContext, inputs: SelectorInputs) -> int:
    if inputs.use_mla:
        return 128 if (ctx.user_backend or "").upper() == "CUTLASS_MLA" else 64
    blackwell_256 = rules.get("blackwell_head_256_alignment")  # flashinfer#1993 (0.17 only; 0.18 dropped it)
    if blackwell_256 and ctx.capability[0] == 10 and inputs.head_size == 256 \
            and (ctx.user_backend or "FLASHINFER").upper() == "FLASHINFER":
        return blackwell_256
    return 16


def checkpoint_alignment(rules: dict, layout: HybridLayout, ctx: SelectionContext) -> int:
    """0.33 qwen_gdn_linear_attn.py `_resolve_gdn_prefill_backend`: FlashInfer GDN prefill on SM90,
    or SM10.x / SM12.x with head_k_dim 128 (CUDA 13 wheels), exports checkpoints every 64 tokens."""
    grid = rules.get("gdn_checkpoint_alignment")
    if not grid or layout.kind != "gdn":
        return 1
    cc = tuple(ctx.capability)
    if cc == (9, 0) or (cc[0] in (10, 12) and layout.size("head_k_dim") == 128):
        return grid
    return 1


def indexer_kernel_block(rules: dict, layout: HybridLayout, ctx: SelectionContext) -> int:
    """0.33 mla/indexer.py `Glm5NextIndexerBackend.get_supported_kernel_block_sizes`: index_kpool x the
    paged-MQA page sizes (utils/deep_gemm.py: 32 or 64 entries, only 64 on SM12x); its smallest, or 0."""
    pages = rules.get("indexer_kernel_pages")
    if not pages or not layout.indexer_kpool:
        return 0
    return layout.indexer_kpool * min(pages.get(str(ctx.capability[0]), pages["default"]))


def _alignment(profile: RuleProfile, rules: dict, ctx: SelectionContext, inputs: SelectorInputs, backends: list[str], block_size: int | None,
               layout: HybridLayout, mode: str) -> tuple[int, int]:
    """(kernel alignment, the multiple the result is rounded to)."""
    if rules["align"] == "config_time":
        return _config_time_alignment(rules, ctx, inputs), 1
    mins = [_min_kernel(profile, b, ctx, inputs) for b in backends]
    indexer = indexer_kernel_block(rules, layout, ctx)
    if indexer:  # the indexer's K-cache layers come first in layer order (glm5next/common/attention.py);
        # without --block-size, phase 1 picks the smallest size every backend takes
        mins = [indexer, *mins]
        block_size = block_size or math.lcm(*mins)
    alignment = max(mins[0], block_size or 0)
    if inputs.use_mla and rules.get("mla_alignment"):  # TRTLLM / FlashInfer MLA decode kernels (0.28+)
        alignment = max(alignment, rules["mla_alignment"])
    if rules["align"] == "first_backend":
        return alignment, 1
    rounding = math.lcm(*mins)
    if mode == "align":
        alignment = math.lcm(alignment, checkpoint_alignment(rules, layout, ctx))
    return alignment, rounding


def align_hybrid_block_size(profile: RuleProfile, ctx: SelectionContext, inputs: SelectorInputs, backends: list[str],
                            block_size: int | None, logs: list) -> HybridAnswer:
    """The block size a hybrid model ends with; `logs` gets vLLM's (level, message) lines."""
    rules, setup = profile.data["hybrid"], ctx.hybrid
    assert setup is not None  # the block-size flow asks only for a hybrid model with its layout
    layout = setup.layout
    prefix, mode = resolve_cache_mode(rules, setup, layout, logs)
    shapes = state_shapes(layout, setup.tensor_parallel_size)
    dtypes = state_dtypes(rules, layout.kind, inputs.dtype, setup.mamba_cache_dtype, setup.mamba_ssm_cache_dtype)
    state_page = sum(math.prod(s) * DTYPE_BYTES[d] for s, d in zip(shapes, dtypes))
    per_token = attention_page_per_token(inputs, 1 if inputs.use_mla else setup.num_kv_heads)
    alignment, rounding = _alignment(profile, rules, ctx, inputs, backends, block_size, layout, mode)
    mamba_block = None
    if mode == "all":  # 0.17-0.32: align to the Mamba-2 kernel chunk (prefix caching "all" mode)
        chunk = math.lcm(setup.mamba_block_size or layout.chunk_size, alignment)
        needed = chunk * math.ceil(math.ceil(state_page / per_token) / chunk)
        mamba_block = needed
    else:
        needed = alignment * math.ceil(state_page / (alignment * per_token))
    needed = rounding * math.ceil(needed / rounding)
    final = block_size if block_size is not None and block_size >= needed else needed
    if final != block_size:
        logs.append(("info", f"Setting attention block size to {final} tokens to ensure that attention page size "
                     "is >= mamba page size."))
    if mode == "align":
        mamba_block = final
    attention_page = final * per_token
    padding = None
    if attention_page != state_page:
        padding = 100 * (attention_page - state_page) / state_page
        logs.append(("info", f"Padding mamba page size by {padding:.2f}% to ensure that mamba page size and "
                     "attention page size are exactly equal."))
    checkpoint = rules.get("gdn_checkpoint_alignment") and mode == "align" and checkpoint_alignment(rules, layout, ctx) > 1
    groups = kv_cache_groups(layout.attention_layers, layout.mamba_layers, mode, 1 if checkpoint else 0)
    return HybridAnswer(kind=layout.kind, state_shapes=shapes, state_dtypes=dtypes, state_page_bytes=state_page,
                        attention_page_bytes_per_token=per_token, alignment=alignment, block_size=final,
                        attention_page_bytes=attention_page, padding_pct=padding, prefix_caching=prefix,
                        mamba_cache_mode=mode, mamba_block_size=mamba_block, groups=groups)
