"""The random held-out grid bench/tools/parity_live.py asks vLLM and a rule profile about: selector
inputs and context over every CUDA capability 7.0-12.1, dense and MLA, flags, explicit backends.
Deterministic for a seed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

CAPABILITIES = [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]
DENSE_HEADS = [16, 24, 32, 36, 40, 48, 64, 72, 80, 96, 100, 104, 112, 128, 130, 160, 192, 200, 256, 257, 320, 384, 512,
               576, 640]
MLA_HEADS = [128, 256, 320, 512, 576, 640]
DTYPES = ["float16", "bfloat16", "float32"]
# kv dtypes are filtered to the profile's CacheDType literal (vLLM asserts on unknown ones)
KV_DTYPES = [
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "nvfp4", "nvfp4_4over6", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "octave_k3v4", "ultraquant_4bit",
]
MLA_KV_DTYPES = ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla", "fp8_e5m2"]
BLOCK_SIZES = [None, None, None, 1, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024]
ATTN_TYPES = ["decoder", "decoder", "decoder", "encoder", "encoder_only", "encoder_decoder"]
# independent flags, each switched on with a small probability (so combinations occur too)
DENSE_FLAGS = ["has_sink", "use_mm_prefix", "has_sliding_window", "use_non_causal", "use_rswa",
               "use_kv_connector", "use_adaptive_verification", "use_per_head_quant_scales"]
MLA_FLAGS = ["use_non_causal", "use_kv_connector", "use_adaptive_verification", "use_mm_prefix", "has_sink"]


def _flag_probability(rng: random.Random) -> bool:
    return rng.random() < 0.12


def _ctx_common(rng: random.Random, inputs: dict, cc: tuple[int, int]) -> dict:
    ctx: dict[str, Any] = {"capability": cc}
    if rng.random() < 0.1:
        ctx["batch_invariant"] = True
        inputs["use_batch_invariant"] = True
    if rng.random() < 0.1:
        ctx["decode_context_parallel_size"] = rng.choice([2, 4])
        inputs["use_dcp"] = True
    if rng.random() < 0.06:
        ctx["prefill_context_parallel_size"] = 2
        inputs["use_pcp"] = True
    if rng.random() < 0.1:
        ctx["use_trtllm_attention"] = rng.choice([False, True])
    if rng.random() < 0.1:
        ctx["flash_attn_version_override"] = rng.choice([2, 3, 4])
    if rng.random() < 0.08:
        ctx["has_flashinfer_cubin"] = False  # no cubins and no artifactory: TRT-LLM attention is off
    return ctx


def dense_case(rng: random.Random, cc: tuple[int, int]) -> tuple[dict, dict]:
    inputs: dict[str, Any] = {
        "head_size": rng.choice(DENSE_HEADS),
        "dtype": rng.choice(DTYPES),
        "kv_cache_dtype": rng.choice(KV_DTYPES[:6] * 3 + KV_DTYPES),
        "block_size": rng.choice(BLOCK_SIZES),
        "attn_type": rng.choice(ATTN_TYPES),
    }
    for flag in DENSE_FLAGS:
        if _flag_probability(rng):
            inputs[flag] = True
    ctx = _ctx_common(rng, inputs, cc)
    if rng.random() < 0.4:
        heads = rng.choice([8, 16, 32, 64])
        ctx["num_heads"] = heads
        ctx["num_kv_heads"] = rng.choice([h for h in (1, 2, 4, 8, heads) if heads % h == 0])
    if rng.random() < 0.05:
        ctx["is_hybrid"] = True
        ctx["mamba_cache_float32"] = rng.random() < 0.5
    return inputs, ctx


def mla_case(rng: random.Random, cc: tuple[int, int]) -> tuple[dict, dict]:
    sparse = rng.random() < 0.4
    inputs: dict[str, Any] = {
        "head_size": rng.choice(MLA_HEADS[2:] * 4 + MLA_HEADS),
        "dtype": rng.choice(["bfloat16", "bfloat16", "float16", "float32"]),
        "kv_cache_dtype": rng.choice(MLA_KV_DTYPES),
        "block_size": rng.choice(BLOCK_SIZES),
        "use_mla": True,
        "use_sparse": sparse,
        "attn_type": "decoder" if rng.random() < 0.95 else "encoder_only",
    }
    for flag in MLA_FLAGS:
        if _flag_probability(rng):
            inputs[flag] = True
    ctx = _ctx_common(rng, inputs, cc)
    ctx["num_heads"] = rng.choice([None, 4, 8, 16, 32, 64, 128])
    # (qk_nope, qk_rope, v, kv_lora_rank): DeepSeek R1/V3, variants, GLM-5-Next-like NoPE; an MLA
    # model config always has all four
    dims = rng.choice([(128, 64, 128, 512), (128, 64, 128, 512), (64, 64, 128, 512), (192, 64, 128, 512),
                       (256, 0, 256, 512), (128, 0, 128, 512), (128, 64, 128, 256), (128, 32, 128, 512)])
    for name, value in zip(("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"), dims):
        if value is not None:
            ctx[name] = value
    if sparse or rng.random() < 0.1:
        if rng.random() < 0.85:
            ctx["has_index_topk"] = True
            ctx["index_topk"] = rng.choice([2048, 2048, 512, 1000])
    if rng.random() < 0.1:  # bare shapes: no model config, so no dimension is known (vLLM: model_config None)
        for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank", "index_topk"):
            ctx.pop(name, None)
        ctx["has_index_topk"] = False
        ctx["model_dims_known"] = False
    return inputs, ctx


FP8_KV_DTYPES = ["fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
FA_HEADS = [64, 72, 80, 96, 128, 160, 192, 200, 256, 320, 512, 576]


def fp8_blackwell_case(rng: random.Random, cc: tuple[int, int]) -> tuple[dict, dict]:
    """The corner vLLM's FLASH_ATTN validity is most intricate in: CC 10.x/11.x (and 9.0), an fp8 KV
    cache, FA version overrides, FA4's head-size and block-size rules (docs/vllm-rules.md §3c, §9)."""
    inputs, ctx = dense_case(rng, rng.choice([(10, 0), (10, 0), (10, 3), (11, 0), (9, 0), (12, 0)]))
    inputs["head_size"] = rng.choice(FA_HEADS)
    inputs["kv_cache_dtype"] = rng.choice(FP8_KV_DTYPES * 3 + ["auto", "bfloat16", "float16"])
    inputs["dtype"] = rng.choice(["bfloat16", "bfloat16", "float16"])
    if rng.random() < 0.5:
        ctx["flash_attn_version_override"] = rng.choice([2, 3, 4])
    if rng.random() < 0.4:
        ctx["user_backend"] = "FLASH_ATTN"
    return inputs, ctx


FOCUS = {"all": None, "fp8-blackwell": fp8_blackwell_case}


def cases(
    count: int, seed: int, kv_dtypes: tuple[str, ...], backends: list[str], mla_backends: set[str],
    focus: str = "all",
) -> Iterator[tuple[dict, dict]]:
    """`count` cases, the same for a given seed: every capability in turn, 60 % dense, 40 % MLA,
    10 % with an explicit --attention-backend. `focus="fp8-blackwell"` makes half of them
    `fp8_blackwell_case`s."""
    rng = random.Random(seed)
    produced = 0
    focused = FOCUS[focus]
    while produced < count:
        cc = CAPABILITIES[produced % len(CAPABILITIES)]
        if focused is not None and rng.random() < 0.5:
            inputs, ctx = focused(rng, cc)
        else:
            inputs, ctx = (mla_case if rng.random() < 0.4 else dense_case)(rng, cc)
        if inputs["kv_cache_dtype"] not in kv_dtypes:
            inputs["kv_cache_dtype"] = rng.choice(["auto", "bfloat16", "fp8"])
        if "user_backend" not in ctx and rng.random() < 0.1:
            # an explicit backend of the same family: vLLM's MLA rules read MLA dims that a
            # non-MLA model config lacks (AttributeError inside vLLM, no answer to compare)
            family = [b for b in backends if (b in mla_backends) == bool(inputs.get("use_mla"))]
            ctx["user_backend"] = rng.choice(family)
        produced += 1
        yield inputs, ctx
