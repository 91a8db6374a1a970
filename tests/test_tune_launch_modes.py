"""Each row is timed the way vLLM launches it (issue "tune measures what vLLM really runs"): decode
batches vLLM captures in full CUDA graphs are replayed from a graph, everything else runs eagerly.
Without vLLM installed the choice comes from the rule profile's recorded AttentionCGSupport
(attention/versions/*.json, `cudagraph`, read from each release's wheel)."""

import pytest

from attnsel.attention import versions
from attnsel.attention.selector import cudagraph
from attnsel.bench.plan import build as P
from attnsel.bench.plan import make_shape


def _launch(version, backend, kind="decode", batch=64, cc=(9, 0)):
    profile = versions.get_profile(version)
    shape = make_shape(128, 32, 8, "bf16")
    plan = P.build_plan(shape, cc, backends=[backend], block_sizes=[16], kinds=[kind], grid="default")
    plan = P.Plan(**{**plan.__dict__, "rule_profile": profile.name})
    w = next(w for w in plan.workloads if w.kind == kind and (kind != "decode" or w.batch == batch))
    return plan.launch(backend, w)


@pytest.mark.parametrize("backend", ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"])
def test_decode_replays_a_graph_and_prefill_runs_eagerly_for_graph_capable_backends(backend):
    assert _launch("0.33", backend)[0] == "graph"
    assert _launch("0.33", backend, kind="prefill")[0] == "eager"
    assert "piecewise" in _launch("0.33", backend, kind="mixed")[1]


def test_flex_attention_got_cuda_graph_support_after_the_seed_era():
    # vLLM 0.17's FlexAttention builder has no _cudagraph_support (NEVER); 0.20+ says ALWAYS
    launch, why = _launch("0.17", "FLEX_ATTENTION")
    assert launch == "eager" and "NEVER" in why
    assert _launch("0.33", "FLEX_ATTENTION")[0] == "graph"


def test_flash_attn_without_fa3_still_captures_uniform_decode():
    # FA2 (CC 8.x) is UNIFORM_BATCH: mixed batches cannot be captured, uniform decode can
    facts = versions.get_profile("0.33").cudagraph
    assert cudagraph.cudagraph_support(facts, "FLASH_ATTN", (8, 0)) == "UNIFORM_BATCH"
    assert cudagraph.cudagraph_support(facts, "FLASH_ATTN", (9, 0)) == "ALWAYS"
    assert _launch("0.33", "FLASH_ATTN", cc=(8, 0))[0] == "graph"


@pytest.mark.parametrize("version, expected", [("0.32", "UNIFORM_BATCH"), ("0.33", "ALWAYS"), ("0.24", "UNIFORM_BATCH")])
def test_flash_attn_on_blackwell_is_always_capturable_only_once_fa4_is(version, expected):
    # 0.33 flash_attn.py: _cudagraph_support ALWAYS if get_flash_attn_version() in (3, 4); 0.32 and
    # older: only FA3 (Hopper) -- the FA4 that runs on CC 10.x is UNIFORM_BATCH there
    facts = versions.get_profile(version).cudagraph
    assert cudagraph.cudagraph_support(facts, "FLASH_ATTN", (10, 0)) == expected
    assert cudagraph.cudagraph_support(facts, "FLASH_ATTN", (9, 0)) == "ALWAYS"


def test_decode_batches_beyond_the_largest_capture_size_run_without_a_graph():
    facts = versions.get_profile("0.33").cudagraph
    assert cudagraph.decode_launch(facts, "0.33", "TRITON_ATTN", (9, 0), "decode", 512)[0] == "graph"
    launch, why = cudagraph.decode_launch(facts, "0.33", "TRITON_ATTN", (9, 0), "decode", 513)
    assert launch == "eager" and "capture size 512" in why


def test_the_dry_run_plan_lists_each_backends_launch_per_shape():
    profile = versions.get_profile("0.33")
    shape = make_shape(128, 32, 8, "bf16")
    plan = P.build_plan(shape, (9, 0), block_sizes=[16], grid="quick")
    plan = P.Plan(**{**plan.__dict__, "rule_profile": profile.name})
    launch = plan.to_dict()["launch"]
    assert launch["FLASH_ATTN"]["decode b=64 ctx=4096"] == "graph"
    assert launch["FLASH_ATTN"]["prefill b=1 q=2048 ctx=2048"] == "eager"
