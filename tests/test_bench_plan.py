"""The sweep plan: vLLM's rules filter backend x block size before anything runs
(issue "attnsel tune": a refused combination is listed as skipped with vLLM's reason, never timed)."""

import importlib.util
from pathlib import Path

import pytest

from attnsel.bench.plan import build as P
from attnsel.bench.plan import make_shape, vllm_default_choice, vllm_verdict
from attnsel.bench.plan.workloads import WorkloadSpec, parse_workloads, workload_grid
from attnsel.bench.sweep import SweepOptions, items_for, skipped_rows
from attnsel.errors import UserInputError
from attnsel.probe import parse_capability

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
_spec = importlib.util.spec_from_file_location("tune_fake_rules", FIXTURES / "fake_rules.py")
fake_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_rules)


def _plan(shape, block_sizes=(8, 16, 64, 128), kinds=("decode",), grid="quick"):
    return P.build_plan(shape, (9, 0), block_sizes=block_sizes, kinds=kinds, grid=grid,
                        verdict=fake_rules.verdict, default_choice=fake_rules.default_choice)


def test_refused_combinations_are_skipped_with_vllms_reason_and_never_sent_to_a_worker():
    # head 72: FlashInfer supports only 64/128/256 (docs/vllm-rules.md §3a) -> "head_size not supported";
    # block 8 is not a multiple of 16 for FLASH_ATTN/FLASHINFER/TRITON_ATTN (§2) -> "block_size not supported"
    plan = _plan(make_shape(72, 32, 8, "bf16"))
    skipped = {(c.backend, c.block_size): c.reasons for c in plan.skipped_configs}
    assert skipped[("FLASHINFER", 64)] == ("head_size not supported",)
    assert skipped[("FLASHINFER", 8)] == ("head_size not supported", "block_size not supported")
    assert skipped[("FLASH_ATTN", 8)] == ("block_size not supported",)
    assert ("FLEX_ATTENTION", 8) not in skipped
    groups = items_for(plan, SweepOptions())
    assert "FLASHINFER" not in groups
    assert {item["block_size"] for item in groups["FLASH_ATTN"]} == {16, 64, 128}
    rows = skipped_rows(plan, SweepOptions())
    assert {r["status"] for r in rows} == {"skipped"}
    assert len(rows) == len(plan.skipped_configs) * len(plan.workloads)


def test_a_framework_block_is_reported_with_its_kernel_block():
    # FlashInfer kernels take 16/32/64; --block-size 128 is accepted and split into 64-token kernel blocks (§2)
    plan = _plan(make_shape(128, 32, 8, "bf16"))
    fi128 = next(c for c in plan.configs if (c.backend, c.block_size) == ("FLASHINFER", 128))
    assert fi128.runnable and fi128.kernel_block_size == 64
    assert plan.to_dict()["configs"][0].keys() >= {"backend", "block_size", "kernel_block_size", "status", "reasons"}


def test_vllm_default_is_recorded_in_the_plan():
    plan = _plan(make_shape(128, 32, 8, "bf16"))
    assert (plan.vllm_default_backend, plan.vllm_default_block_size) == ("FLASH_ATTN", 16)  # §5a, §5f


def test_heads_are_divided_by_tensor_parallelism_like_vllm():
    shape = make_shape(128, 64, 8, "bf16", tensor_parallel_size=16)
    assert (shape.num_q_heads, shape.num_kv_heads) == (4, 1)  # kv per GPU = max(1, 8 // 16)


@pytest.mark.parametrize("args", [
    (128, 32, 6, "bf16"),  # 32 query heads cannot be split into 6 equal groups
    (128, 32, 8, "int8"),  # unknown dtype
    (0, 32, 8, "bf16"),
])
def test_impossible_shapes_are_user_errors(args):
    with pytest.raises(UserInputError):
        make_shape(*args)


def test_default_decode_grid_is_the_documented_one():
    decode = workload_grid(["decode"], "default")
    pairs = {(w.batch, w.context_len) for w in decode}
    assert pairs == {(b, c) for b in (1, 16, 64, 256) for c in (1024, 4096, 16384)} - {(256, 16384)}
    assert all(w.kv_tokens <= 2**20 for w in decode)
    quick = workload_grid(["decode", "prefill", "mixed"], "quick")
    assert [w.kind for w in quick].count("decode") == 3 and len(quick) == 5


def test_mixed_query_tokens_follow_one_chunk_in_eight():
    w = WorkloadSpec("mixed", 32, 4096, 512)
    assert w.query_tokens == 28 * 1 + 4 * 512


def test_flag_parsers_reject_bad_values():
    assert P.parse_block_sizes("64,16,16") == [16, 64]
    assert parse_workloads("decode,mixed") == ["decode", "mixed"]
    assert P.parse_backends("flashinfer") == ["FLASHINFER"]
    for bad in (lambda: P.parse_block_sizes("16,x"), lambda: P.parse_block_sizes("-16"),
                lambda: parse_workloads("train"), lambda: P.parse_backends("XFORMERS"),
                lambda: parse_capability("99.9"), lambda: parse_capability("9.x")):
        with pytest.raises(UserInputError):
            bad()


def test_the_real_rules_refuse_what_vllm_refuses():
    """Through the one rules boundary (plan.vllm_verdict), pinned to the seed-era profile."""
    shape = make_shape(128, 32, 8, "bf16")
    seed = {"vllm_version": "0.17"}
    assert vllm_verdict("FLASH_ATTN", 8, shape, (9, 0), **seed)[0] == ["block_size not supported"]
    assert vllm_verdict("FLASHINFER", 256, shape, (9, 0), **seed) == ([], 64)
    assert vllm_verdict("FLASHINFER", 16, make_shape(72, 32, 8, "bf16"), (9, 0), **seed)[0] == ["head_size not supported"]
    assert "invalid choice: 48" in vllm_verdict("TRITON_ATTN", 48, shape, (9, 0), **seed)[0][0]  # §4 BlockSize literal
    assert vllm_default_choice(shape, (9, 0), **seed)[:2] == ("FLASH_ATTN", 16)
    assert vllm_default_choice(shape, (10, 0), **seed)[:2] == ("FLASHINFER", 16)  # Blackwell: FlashInfer first (§5a)


def test_the_0_33_profile_accepts_any_multiple_of_16_for_triton():
    """docs/vllm-rules.md §9: 0.33 dropped the BlockSize literal; TRITON_ATTN only needs bs % 16 == 0."""
    shape = make_shape(128, 32, 8, "bf16")
    assert vllm_verdict("TRITON_ATTN", 48, shape, (9, 0), vllm_version="0.33") == ([], 48)
    assert vllm_verdict("TRITON_ATTN", 40, shape, (9, 0), vllm_version="0.33")[0] == ["block_size not supported"]


def test_flex_attention_keeps_only_vllms_preferred_block_in_the_default_grid():
    shape = make_shape(128, 32, 8, "bf16")
    common = dict(verdict=fake_rules.verdict, default_choice=fake_rules.default_choice, kinds=("decode",))
    default = P.build_plan(shape, (9, 0), grid="default", **common)
    assert [c.block_size for c in default.configs if c.backend == "FLEX_ATTENTION"] == [16]
    assert any("FLEX_ATTENTION is timed at --block-size 16 only" in n for n in default.notes)
    full = P.build_plan(shape, (9, 0), grid="full", **common)
    assert [c.block_size for c in full.configs if c.backend == "FLEX_ATTENTION"] == list(P.DEFAULT_BLOCK_SIZES)
    asked = P.build_plan(shape, (9, 0), block_sizes=[16, 64], block_sizes_given=True, **common)
    assert [c.block_size for c in asked.configs if c.backend == "FLEX_ATTENTION"] == [16, 64]
