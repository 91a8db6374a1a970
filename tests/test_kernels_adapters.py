"""Which provider can run which shape, and why not (the reasons `attnsel tune` prints).

Sources: vllm-rules §3a (FLASHINFER kernel blocks [16, 32, 64], heads 64/128/256, fp16/bf16;
FLASH_ATTN and TRITON_ATTN `Block size must be a multiple of 16.`; FLASH_ATTN hs % 8 == 0 and
hs <= 256), flash-attn 2.x's own check "Paged KV cache block size must be divisible by 256"
(csrc/flash_attn/flash_api.cpp), and FlashInfer's CSR page metadata (indptr / indices /
last_page_len, last page full when seq_len % page == 0).
"""

from __future__ import annotations

import sys

import pytest

from attnsel.attention.kernels import flash_attn_adapter as fa
from attnsel.attention.kernels.base import KernelAdapter, kernel_block_size_for
from attnsel.attention.kernels.flashinfer_adapter import FlashInferAdapter, paged_kv_metadata, vllm_kv_layout
from attnsel.attention.kernels.registry import adapters_for, all_backends, first_available

torch = pytest.importorskip("torch")
from attnsel.attention.kernels.paged import Workload  # noqa: E402

BAR = Workload("decode", 64, 4096, 1, 32, 8, 128, "bfloat16")


def test_registry_lists_the_four_vllm_backends_with_best_provider_first():
    assert all_backends() == ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"]
    assert [a.name for a in adapters_for("FLASH_ATTN")] == ["vllm-flash-attn", "fa3", "fa4-cute", "flash-attn-2"]
    assert [a.name for a in adapters_for("FLASHINFER")] == ["flashinfer", "flashinfer-cuda-cores"]
    assert [a.name for a in adapters_for("triton_attn")] == ["vllm-triton", "attnsel-triton"]
    for backend in all_backends():
        for adapter in adapters_for(backend):
            assert isinstance(adapter, KernelAdapter)
            assert adapter.backend == backend


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend 'FLASH'"):
        adapters_for("FLASH")


def test_importing_the_registry_does_not_import_torch():
    import subprocess

    code = "import sys; import attnsel.attention.kernels.registry as r; r.all_backends(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("block_size", [16, 32, 64, 128])
def test_flash_attn_2_paged_path_refuses_blocks_not_multiple_of_256(block_size):
    reason = fa.FA2Adapter().unsupported_reason(BAR, block_size, "cuda")
    assert reason is not None and reason.startswith("Paged KV cache block size must be divisible by 256")


def test_flash_attn_2_accepts_256_as_far_as_shape_goes():
    reason = fa.FA2Adapter().unsupported_reason(BAR, 256, "cpu")
    assert reason == "needs a CUDA device, got 'cpu'"  # only the device is missing


@pytest.mark.parametrize("adapter", [fa.VllmFlashAttnAdapter(), fa.FA3Adapter(), fa.FA4Adapter()])
def test_flash_attn_providers_follow_vllm_block_and_head_rules(adapter):
    assert adapter.unsupported_reason(BAR, 8, "cuda") == "Block size must be a multiple of 16."
    odd_head = Workload("decode", 1, 64, 1, 4, 2, 36, "bfloat16")
    assert "hs % 8 == 0" in adapter.unsupported_reason(odd_head, 16, "cuda")
    fp32 = Workload("decode", 1, 64, 1, 4, 2, 64, "float32")
    assert "float32" in adapter.unsupported_reason(fp32, 16, "cuda")


def test_fa3_is_hopper_only_and_fa4_runs_on_hopper_and_blackwell():
    assert "Hopper" in fa.FA3Adapter().cc_reason((10, 0))
    assert fa.FA3Adapter().cc_reason((9, 0)) is None
    assert fa.FA4Adapter().cc_reason((9, 0)) is None
    assert fa.FA4Adapter().cc_reason((10, 0)) is None
    assert fa.FA4Adapter().cc_reason((8, 0)) is not None


def test_flashinfer_block_sizes_follow_vllm_kernel_blocks():
    adapter = FlashInferAdapter()
    # 128 and 256 run as 64-token kernel blocks (vLLM splits cache blocks), so they are not refused
    # for the block size; on this CPU machine only the device is missing.
    for bs in (16, 32, 64, 128, 256):
        assert adapter.unsupported_reason(BAR, bs, "cpu") == "needs a CUDA device, got 'cpu'"
    assert "kernel block sizes [16, 32, 64]" in adapter.unsupported_reason(BAR, 8, "cuda")
    assert kernel_block_size_for(256, (16, 32, 64)) == 64
    odd_head = Workload("decode", 1, 64, 1, 4, 2, 96, "bfloat16")
    assert "[64, 128, 256]" in adapter.unsupported_reason(odd_head, 16, "cuda")


def test_flashinfer_layout_is_hnd_only_on_blackwell():
    assert vllm_kv_layout((9, 0)) == "NHD"
    assert vllm_kv_layout((10, 0)) == "HND"
    assert vllm_kv_layout((12, 0)) == "NHD"


def test_flashinfer_page_metadata_by_hand():
    indptr, indices, last = paged_kv_metadata([17, 32, 5], [[5, 3, 0], [7, 2, 9], [4, 0, 0]], 16)
    assert indptr == [0, 2, 4, 5]
    assert indices == [5, 3, 7, 2, 4]
    assert last == [1, 16, 5]


def test_flashinfer_default_is_vllms_tensor_core_decode():
    assert FlashInferAdapter().use_tensor_cores is True
    assert FlashInferAdapter(use_tensor_cores=False).name == "flashinfer-cuda-cores"


def test_missing_libraries_are_reported_not_raised():
    for backend in all_backends():
        for adapter in adapters_for(backend):
            reason = adapter.availability()
            assert reason is None or isinstance(reason, str) and reason


def test_first_available_explains_skipped_providers():
    from attnsel.attention.kernels.base import installed_version

    if installed_version("vllm") is not None:
        pytest.skip("vLLM is installed here: its Triton kernel is the first provider")
    adapter, skipped = first_available("TRITON_ATTN")
    assert adapter is not None and adapter.name == "attnsel-triton"
    assert skipped == {"vllm-triton": "vllm is not installed"}
