"""FLEX_ATTENTION on CPU: torch's flex_attention over the paged cache, masked through the block
table the way vLLM's flex_attention backend does (physical -> logical blocks, doc ids, decode
offset), checked against the fp32 reference (issue "attnsel tune": bf16 passes below ~1e-2)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.attention.flex_attention")

from attnsel.attention.kernels.flex_adapter import FlexAttentionAdapter  # noqa: E402
from attnsel.attention.kernels.paged import (  # noqa: E402
    Workload,
    make_paged_batch,
    reference_attention,
    relative_error,
)


@pytest.mark.parametrize(
    "kind,query_len,dtype",
    [("decode", 1, "bfloat16"), ("prefill", 9, "float16"), ("mixed", 6, "bfloat16"), ("prefill", 9, "float32")],
)
def test_flex_eager_matches_reference(kind, query_len, dtype):
    w = Workload(kind, 4, 50, query_len, 4, 2, 32, dtype)
    b = make_paged_batch(w, 16, device="cpu", seed=11)
    pk = FlexAttentionAdapter(compile=False).prepare(b)
    assert bool(pk.output().isnan().all()), "output must be poisoned before the timed runs"
    err = relative_error(pk.run(), reference_attention(b))
    assert err < (1e-2 if dtype != "float32" else 1e-5)


def test_flex_compiled_matches_reference_on_cpu():
    w = Workload("mixed", 3, 40, 5, 4, 2, 32, "bfloat16")
    b = make_paged_batch(w, 16, device="cpu", seed=12)
    pk = FlexAttentionAdapter(compile=True).prepare(b)
    assert "flex_attention (compiled)" in pk.provider
    assert relative_error(pk.run(), reference_attention(b)) < 1e-2


def test_flex_never_reads_pages_of_other_requests_or_past_the_end():
    # Fill every page no request owns with huge values: a mask that lets any through shows.
    w = Workload("decode", 3, 40, 1, 2, 1, 16, "float32")
    b = make_paged_batch(w, 16, device="cpu", seed=13)
    owned = set()
    for row, n in zip(b.block_table.tolist(), b.seq_lens.tolist()):
        owned.update(row[: math.ceil(n / 16)])
    for page in range(b.num_blocks):
        if page not in owned:
            b.key_cache[page] = 1e4
            b.value_cache[page] = 1e4
    pk = FlexAttentionAdapter(compile=False).prepare(b)
    assert relative_error(pk.run(), reference_attention(b)) < 1e-5


def test_flex_block_sizes_need_power_of_two_pages():
    w = Workload("decode", 1, 10, 1, 2, 1, 16, "bfloat16")
    adapter = FlexAttentionAdapter()
    assert adapter.unsupported_reason(w, 16, "cpu") is None
    assert adapter.unsupported_reason(w, 256, "cpu") is None
    assert "power of two" in adapter.unsupported_reason(w, 48, "cpu")
