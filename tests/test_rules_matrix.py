"""A broad matrix over compute capabilities 7.0..12.1 x head sizes x dtypes x KV dtypes x block
sizes: invariants every answer must keep, plus hand-derived spot cases (docs/vllm-rules.md §2-§5)."""

import itertools

import pytest

from attnsel.attention.rules import SelectionContext, SelectorInputs
from attnsel.attention.selector import explain
from attnsel.attention.versions import get_profile

PROFILE = get_profile()

CAPABILITIES = [(7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 1), (10, 3),
                (11, 0), (12, 0), (12, 1)]
HEAD_SIZES = [32, 64, 80, 96, 128, 192, 256]
DTYPES = ["float16", "bfloat16", "float32"]
KV_DTYPES = ["auto", "bfloat16", "fp8", "fp8_e5m2"]
BLOCK_SIZES = [None, 16, 64]
MLA_KV_DTYPES = ["auto", "fp8", "fp8_e4m3", "fp8_ds_mla"]
MLA_BLOCK_SIZES = [None, 32, 64, 128]

MLA_BACKENDS = {"FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA_SPARSE",
                "FLASHINFER_MLA_SPARSE"}

# docs/vllm-rules.md §2: the order in which validate_configuration appends reasons, by kind
REASON_ORDER = [
    ("head_size not supported",),
    ("dtype not supported",),
    ("kv_cache_dtype not supported",),
    ("block_size not supported",),
    ("partial multimodal token full attention not supported",),
    ("MLA not supported", "non-MLA not supported"),
    ("sink setting not supported",),
    ("sparse not supported", "non-sparse not supported"),
    ("per-head quant scales not supported",),
    ("compute capability not supported",),
    ("attention type ",),
]


def _reason_rank(reason: str) -> int:
    for rank, prefixes in enumerate(REASON_ORDER):
        if any(reason.startswith(p) for p in prefixes):
            return rank
    return len(REASON_ORDER)  # a supports_combination text comes last (§2 #11)


def _cases():
    for cc, hs, dtype, kv, bs in itertools.product(CAPABILITIES, HEAD_SIZES, DTYPES, KV_DTYPES, BLOCK_SIZES):
        yield cc, SelectorInputs(hs, dtype, kv, bs), SelectionContext(capability=cc)
    for cc, dtype, kv, bs, sparse, heads in itertools.product(
        CAPABILITIES, DTYPES, MLA_KV_DTYPES, MLA_BLOCK_SIZES, (False, True), (16, 128)
    ):
        ctx = SelectionContext(capability=cc, num_heads=heads, qk_nope_head_dim=128, has_index_topk=sparse)
        yield cc, SelectorInputs(576, dtype, kv, bs, use_mla=True, use_sparse=sparse), ctx


def _check_invariants(cc, inputs, ctx):
    e = explain(PROFILE, inputs, ctx)
    names = [b.name for b in e.backends]
    assert names == PROFILE.priority_list(inputs, ctx)
    assert [b.priority for b in e.backends] == list(range(len(names)))
    if inputs.use_mla:
        assert set(names) <= MLA_BACKENDS
    else:
        assert not set(names) & MLA_BACKENDS
    for verdict in e.backends:
        assert verdict.valid == (not verdict.reasons)
        ranks = [_reason_rank(r) for r in verdict.reasons]
        assert ranks == sorted(ranks), (verdict.name, verdict.reasons)
        assert len(set(verdict.reasons)) == len(verdict.reasons)
    valid = [b.name for b in e.backends if b.valid]
    bf16_refused = inputs.dtype == "bfloat16" and cc < (8, 0)
    if bf16_refused:
        assert e.error.startswith("Bfloat16 is only supported") and e.exit_code == 1
        return
    # §5c: the lowest index wins; with these inputs config and layer time agree (§5f)
    if valid:
        assert e.error is None and e.selected == valid[0] and e.exit_code == 0
        expected_block = inputs.block_size or PROFILE.preferred_block_size(e.selected, ctx, 16)
        assert e.block_size == expected_block
        assert PROFILE.supports_block_size(e.selected, e.block_size, ctx)
        assert e.block_size % e.kernel_block_size == 0
        assert e.vllm_args == ["--attention-backend", e.selected, "--block-size", str(e.block_size)]
    else:
        assert e.selected is None and e.exit_code == 1
        assert e.error.startswith("No valid attention backend found for ")
    if "FLASH_ATTN" in valid:
        assert cc >= (8, 0)  # §3a
    if "FLASHINFER" in valid:
        assert (7, 5) <= cc <= (12, 1)  # §3a


def test_matrix_invariants():
    count = 0
    for cc, inputs, ctx in _cases():
        _check_invariants(cc, inputs, ctx)
        count += 1
    assert count > 4000


# (capability, inputs, context kwargs, selected, block size) derived by hand
SPOT_CASES = [
    ((12, 0), SelectorInputs(128, "bfloat16", "fp8"), {}, "FLASHINFER", 16),  # §3a FA2 on 12.x: no fp8
    ((8, 9), SelectorInputs(128, "float16", "fp8_e4m3"), {}, "FLASHINFER", 16),  # §3a FA fp8 needs 9.x
    ((10, 0), SelectorInputs(256, "float16"), {}, "FLASHINFER", 16),  # §5a FI first on major 10
    ((7, 0), SelectorInputs(128, "float16"), {}, "TRITON_ATTN", 16),  # §3a FA >= 8.0, FI >= 7.5
    ((11, 0), SelectorInputs(96, "bfloat16"), {}, "FLASH_ATTN", 16),  # §5a "other" list on 11.x
    ((10, 0), SelectorInputs(80, "bfloat16"), {}, "FLASH_ATTN", 16),  # §3a FI heads 64/128/256
    ((9, 0), SelectorInputs(128, "float32"), {}, "TRITON_ATTN", 16),  # §3a FA/FI no fp32
    ((9, 0), SelectorInputs(576, "bfloat16", "fp8", use_mla=True), {}, "FLASHMLA", 64),  # §3b FA_MLA kv auto/bf16
    ((10, 0), SelectorInputs(576, "bfloat16", "fp8", use_mla=True), {}, "CUTLASS_MLA", 128),  # qk_nope absent
    ((12, 0), SelectorInputs(576, "bfloat16", use_mla=True), {}, "TRITON_MLA", 16),  # §3b CC rules
    ((12, 0), SelectorInputs(576, "bfloat16", "fp8", use_mla=True), {}, None, 16),  # TRITON_MLA kv auto/bf16
    ((10, 0), SelectorInputs(64, "bfloat16", has_sink=True), {}, "FLASHINFER", 16),  # §3a TRT-LLM sinks
    ((10, 0), SelectorInputs(64, "bfloat16", has_sink=True), {"has_flashinfer_cubin": False}, "TRITON_ATTN", 16),
    ((9, 0), SelectorInputs(64, "bfloat16", has_sink=True), {}, "FLASH_ATTN", 16),  # §3a FA3 sinks
    ((9, 0), SelectorInputs(256, "bfloat16", use_mm_prefix=True), {}, "TRITON_ATTN", 16),  # gemma3 (§3a mm_prefix)
    ((8, 0), SelectorInputs(64, "float32", attn_type="encoder_only"), {}, "TRITON_ATTN", 16),  # §3a
    ((8, 0), SelectorInputs(64, "float16", attn_type="encoder_only"), {}, "FLASH_ATTN", 16),  # §3a all types
]


@pytest.mark.parametrize("cc,inputs,ctx_kw,selected,block_size", SPOT_CASES)
def test_spot_cases(cc, inputs, ctx_kw, selected, block_size):
    e = explain(PROFILE, inputs, SelectionContext(capability=cc, **ctx_kw))
    assert (e.selected, e.block_size) == (selected, block_size)
    assert e.exit_code == (0 if selected else 1)
