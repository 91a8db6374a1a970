"""tune and verify plan a hybrid model with the block size vLLM really uses: vLLM's default is the
aligned size (Jamba on 0.33: 80, attention/hybrid), and a --block-size vLLM would raise is never
timed or launched (interface.py `_align_hybrid_block_size`)."""

from __future__ import annotations

import dataclasses

from attnsel.attention.versions import select_profile
from attnsel.bench.plan import (
    hybrid_block_size,
    shape_from_model,
    vllm_default_choice,
    vllm_verdict,
)
from attnsel.bench.plan.build import build_plan
from attnsel.bench.tune.request import TuneRequest, make_plan
from attnsel.bench.verify import plan as VP

H100 = (9, 0)


def jamba_plan(version: str):
    return make_plan(TuneRequest(choice=select_profile(version), model="jamba-v0.1"), H100, "H100")


def test_vllms_default_for_jamba_is_the_aligned_block_size():
    plan = jamba_plan("0.33")
    assert (plan.vllm_default_backend, plan.vllm_default_block_size) == ("FLASH_ATTN", 80)


def test_block_sizes_vllm_would_raise_are_skipped_and_its_own_size_is_timed():
    plan = jamba_plan("0.33")
    runnable = {(c.backend, c.block_size) for c in plan.runnable_configs}
    skipped = {(c.backend, c.block_size): c.reasons for c in plan.skipped_configs}
    assert ("FLASH_ATTN", 80) in runnable and ("FLASH_ATTN", 128) in runnable
    assert skipped[("FLASH_ATTN", 16)] == ("hybrid: vLLM raises --block-size 16 to 80 (Mamba state page)",)
    # 0.24 aligns to the user's size: 64 becomes 128 there too, so 64 is never what vLLM runs
    old = {(c.backend, c.block_size) for c in jamba_plan("0.24").skipped_configs}
    assert ("FLASH_ATTN", 64) in old and ("FLASH_ATTN", 16) in old


def test_the_plan_shape_carries_the_layout_to_verify():
    plan = jamba_plan("0.33")
    shape = VP.shape_from_document(plan.to_dict())
    assert shape.hybrid["layout"]["kind"] == "mamba1"
    assert vllm_default_choice(shape, H100, vllm_version="0.33")[:2] == ("FLASH_ATTN", 80)
    assert vllm_verdict("FLASH_ATTN", 32, shape, H100, vllm_version="0.33")[0]  # refused: vLLM runs 96


def test_verify_plans_its_engines_with_prefix_caching_off_as_they_run():
    # Qwen3-Next on Hopper, 0.33: prefix caching on aligns to the GDN checkpoint grid (576), off does not (544)
    shape = shape_from_model("qwen3-next-80b-a3b", capability=H100)
    assert hybrid_block_size("FLASH_ATTN", shape, H100, vllm_version="0.33") == 576
    assert hybrid_block_size("FLASH_ATTN", VP.engine_shape(shape), H100, vllm_version="0.33") == 544
    assert VP.engine_shape(dataclasses.replace(shape, hybrid=None)).hybrid is None


def test_a_dense_model_plan_is_unchanged_by_the_hybrid_rules():
    shape = shape_from_model("llama-3.1-8b", capability=H100)
    plan = build_plan(shape, H100)
    assert shape.hybrid is None and sorted({c.block_size for c in plan.configs}) == [16, 32, 64, 128, 256]


def test_tune_takes_vllms_prefix_caching_and_ssm_dtype_flags_for_a_hybrid():
    def default(**flags):
        return make_plan(TuneRequest(choice=select_profile("0.33"), model="qwen3-next-80b-a3b", **flags), H100,
                         "H100").vllm_default_block_size

    assert default() == 576 and default(prefix_caching=False) == 544
    # a float32 SSM state doubles the recurrent part of the page: a larger aligned block
    assert default(mamba_ssm_cache_dtype="float32") > 576


def test_tune_plans_a_hybrid_with_vllms_mamba_cache_mode_and_verify_engines_run_without_it():
    # Jamba on 0.29 (prefix caching on by default): --mamba-cache-mode all keeps one Mamba state per
    # 2048-token block; align (the default) pages attention at 80. verify's engines pass no mode.
    plan = make_plan(TuneRequest(choice=select_profile("0.29"), model="jamba-v0.1", mamba_cache_mode="all"), H100, "H100")
    assert (plan.vllm_default_backend, plan.vllm_default_block_size) == ("FLASH_ATTN", 2048)
    shape = VP.shape_from_document(plan.to_dict())
    assert shape.hybrid["mamba_cache_mode"] == "all"
    assert hybrid_block_size("FLASH_ATTN", shape, H100, vllm_version="0.29") == 2048
    assert VP.engine_shape(shape).hybrid["mamba_cache_mode"] is None
    assert hybrid_block_size("FLASH_ATTN", VP.engine_shape(shape), H100, vllm_version="0.29") == 80
