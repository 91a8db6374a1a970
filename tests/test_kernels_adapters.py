"""Which provider can run which shape, and why not (the reasons `attnsel tune` prints).

Sources: docs/vllm-rules.md §3a (FLASHINFER kernel blocks [16, 32, 64], heads 64/128/256, fp16/bf16;
FLASH_ATTN and TRITON_ATTN `Block size must be a multiple of 16.`; FLASH_ATTN hs % 8 == 0 and
hs <= 256), flash-attn 2.x's own check "Paged KV cache block size must be divisible by 256"
(csrc/flash_attn/flash_api.cpp), and FlashInfer's CSR page metadata (indptr / indices /
last_page_len, last page full when seq_len % page == 0).
"""

from __future__ import annotations

import sys

import pytest

from attnsel.attention.kernels import flash_attn_adapter as fa
from attnsel.attention.kernels.base import KernelAdapter
from attnsel.attention.kernels.flashinfer_adapter import (
    FlashInferAdapter,
    paged_kv_metadata,
    vllm_kv_layout,
)
from attnsel.attention.kernels.registry import (
    adapters_for,
    all_backends,
    first_available,
)
from attnsel.attention.rules import kernel_block_size_for

torch = pytest.importorskip("torch")
from attnsel.attention.kernels.paged import Workload  # noqa: E402

BAR = Workload("decode", 64, 4096, 1, 32, 8, 128, "bfloat16")


def test_registry_lists_the_vllm_backends_with_best_provider_first():
    assert all_backends() == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION",
                              "FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA",
                              "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE",
                              "FLASHINFER_MLA_SPARSE_SM90"]
    # vLLM's own classes first wherever vLLM is installed; stand-ins after (issue "tune measures what vLLM runs")
    assert [a.name for a in adapters_for("FLASH_ATTN")] == ["vllm", "vllm-flash-attn", "fa3", "fa4-cute", "flash-attn-2"]
    assert [a.name for a in adapters_for("FLASHINFER")] == ["vllm", "flashinfer", "flashinfer-cuda-cores"]
    assert [a.name for a in adapters_for("triton_attn")] == ["vllm", "attnsel-triton"]
    # MLA: vLLM's own MLA impl; FlashInfer's MLA wrapper stands in for FLASHINFER_MLA without vLLM;
    # the other MLA kernels ship only inside vLLM
    assert [a.name for a in adapters_for("FLASHINFER_MLA")] == ["vllm", "flashinfer-mla-wrapper"]
    assert [a.name for a in adapters_for("FLASHMLA")] == ["vllm"]
    # sparse MLA (DeepSeek-V3.2): vLLM's own sparse impl only
    assert [type(a).__name__ for a in adapters_for("FLASHMLA_SPARSE")] == ["VllmSparseMlaAdapter"]
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
            assert reason is None or (isinstance(reason, str) and reason)


def test_first_available_explains_skipped_providers():
    from attnsel.attention.kernels.base import installed_version

    if installed_version("vllm") is not None:
        pytest.skip("vLLM is installed here: its Triton kernel is the first provider")
    adapter, skipped = first_available("TRITON_ATTN")
    assert adapter is not None and adapter.name == "attnsel-triton"
    assert skipped == {"vllm": "vllm is not installed"}


# --- FlashInfer JIT pre-build: which modules a sweep's plan() calls will compile. Source:
# flashinfer-python 0.7.2.post1, decode.py BatchDecodeWithPagedKVCacheWrapper.plan (tensor cores,
# backend "auto" -> "fa2" for 16-bit q/kv -> get_batch_prefill_module("fa2", ...)), prefill.py
# BatchPrefillWithPagedKVCacheWrapper.plan (determine_attention_backend: "fa3" on CC 9.x with
# CUDA >= 12.3, head dims 64/128/256), get_batch_prefill_module ("fa2" -> the equal-stride primary
# module); vLLM's decode wrapper uses use_tensor_cores=True (flashinfer_adapter.py docstring).

from attnsel.attention.kernels import flashinfer_adapter as fi  # noqa: E402 -- the adapter and, through it, its JIT pre-build (flashinfer_jit)
from attnsel.bench.plan import WorkloadSpec  # noqa: E402


def _modules(kinds, capability=(9, 0), torch_cuda="12.8", **kw):
    args = dict(dtype="bfloat16", head_size=128)
    args.update(kw)
    return [(r.purpose, r.generator, r.backend)
            for r in fi.jit_module_requests(kinds, capability=capability, torch_cuda=torch_cuda, **args)]


def test_decode_rows_need_the_fa2_prefill_module_that_tensor_core_decode_plans():
    assert _modules(["decode"]) == [("decode (tensor cores)", "prefill_primary", "fa2")]


def test_prefill_and_mixed_rows_on_hopper_also_need_the_fa3_prefill_module():
    assert _modules(["prefill"]) == [("prefill", "prefill", "fa3")]
    assert _modules(["decode", "prefill", "mixed"]) == [("decode (tensor cores)", "prefill_primary", "fa2"),
                                                        ("prefill", "prefill", "fa3")]


@pytest.mark.parametrize("capability, torch_cuda", [((8, 0), "12.8"), ((10, 0), "12.8"), ((9, 0), "12.2"), (None, "12.8")])
def test_without_fa3_prefill_shares_the_decode_module_and_it_is_built_once(capability, torch_cuda):
    assert _modules(["mixed"], capability, torch_cuda) == [("decode (tensor cores)", "prefill_primary", "fa2")]
    assert _modules(["prefill"], capability, torch_cuda) == [("prefill", "prefill_primary", "fa2")]


def test_the_cuda_core_comparison_needs_flashinfers_decode_module():
    assert _modules(["decode"], use_tensor_cores=False) == [("decode (CUDA cores)", "decode", None)]


@pytest.mark.parametrize("dtype, head_size", [("float32", 128), ("bfloat16", 96)])
def test_rows_flashinfer_refuses_need_no_module(dtype, head_size):
    assert _modules(["decode", "prefill"], dtype=dtype, head_size=head_size) == []


def test_module_arguments_follow_flashinfers_generator_signatures():
    decode, prefill = fi.jit_module_requests(["mixed"], "float16", 64, (9, 0), "12.8")
    # q, kv, o dtypes (o = q), index dtype, head_dim qk, head_dim vo, pos-encoding NONE (0),
    # sliding window, logits soft-cap, then (prefill generators only) fp16 qk reduction
    common = (torch.float16, torch.float16, torch.float16, torch.int32, 64, 64, 0, False, False)
    assert decode.generator_args(torch) == ("fa2", *common, False)
    assert prefill.generator_args(torch) == ("fa3", *common, False)
    cuda_cores = fi.JitModuleRequest("decode (CUDA cores)", "decode", None, "float16", 64)
    assert cuda_cores.generator_args(torch) == common


def test_the_adapters_prebuild_asks_for_its_workloads_modules(monkeypatch):
    asked = []
    monkeypatch.setattr(fi, "build_jit_modules", lambda requests: asked.append(requests) or {"modules": [], "built": 0})
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # a CUDA build of torch (fa3 needs >= 12.3)
    workloads = [WorkloadSpec("decode", 4, 1024), WorkloadSpec("mixed", 8, 2048, 256)]
    summary = fi.FlashInferAdapter().prebuild(workloads, dtype="bfloat16", head_size=128, capability=[9, 0])
    assert [(r.generator, r.backend) for r in asked[0]] == [("prefill_primary", "fa2"), ("prefill", "fa3")]
    assert summary["requests"] == [f"{r.purpose} ({r.backend})" for r in asked[0]]
    fi.FlashInferAdapter().prebuild(workloads, dtype="bfloat16", head_size=128, kv_cache_dtype="fp8_e4m3",
                                    capability=[9, 0])
    # an fp8 cache with a bf16 query: FA3 would need an fp8 query (is_fa3_backend_supported), so
    # tensor-core decode and prefill both plan fa2, one module with the fp8 KV dtype
    assert [(r.generator, r.backend, r.kv_dtype) for r in asked[1]] == [("prefill_primary", "fa2", "float8_e4m3fn")]
    assert asked[1][0].generator_args(torch)[1:4] == (torch.bfloat16, torch.float8_e4m3fn, torch.bfloat16)


class _FakeSpec:
    """Stands in for flashinfer's JitSpec (name, is_compiled, build(need_lock=...))."""

    def __init__(self, name, compiled=False, fails=False):
        self.name, self.is_compiled, self.fails, self.calls = name, compiled, fails, []

    def build(self, verbose=None, need_lock=False):
        import os

        self.calls.append({"need_lock": need_lock, "max_jobs": os.environ.get("MAX_JOBS")})
        if self.fails:
            raise RuntimeError("Ninja build failed.\nnvcc fatal: Unsupported gpu architecture")


def test_building_skips_cached_modules_locks_each_build_and_reports_failures(monkeypatch):
    import types

    specs = {"fa2": _FakeSpec("prefill_fa2_primary"), "fa3": _FakeSpec("prefill_fa3", fails=True)}
    fake = types.ModuleType("flashinfer.jit.attention.modules")
    fake._gen_batch_prefill_primary_module = lambda backend, *args: specs[backend]
    fake.gen_batch_prefill_module = lambda backend, *args: specs[backend]
    fake.gen_batch_decode_module = lambda *args: _FakeSpec("decode", compiled=True)
    package = types.ModuleType("flashinfer.jit.attention")
    package.modules = fake
    for name, module in {"flashinfer": types.ModuleType("flashinfer"), "flashinfer.jit": types.ModuleType("flashinfer.jit"),
                         "flashinfer.jit.attention": package, "flashinfer.jit.attention.modules": fake}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delenv("MAX_JOBS", raising=False)
    requests = fi.jit_module_requests(["mixed"], "bfloat16", 128, (9, 0), "12.8")
    requests.append(fi.JitModuleRequest("decode (CUDA cores)", "decode", None, "bfloat16", 128))
    summary = fi.build_jit_modules(requests)
    assert summary["modules"] == ["prefill_fa2_primary", "prefill_fa3", "decode"]
    assert (summary["built"], summary["cached"]) == (1, 1)  # the cached decode module is not rebuilt
    assert summary["error"].startswith("prefill (fa3): RuntimeError: Ninja build failed.")
    assert "Unsupported gpu architecture" in summary["error"]  # the compiler's own words, not only ninja's
    # each build holds the module's file lock, so a plan() that comes early waits for it instead of
    # running a second ninja on the same module; each ninja may use every core this process may use
    # (niced: the jobs past the cores take idle time; split by modules, the H200 build took 129 s, not 85)
    from attnsel.probe.cpus import usable_cpu_count

    for spec in specs.values():
        [call] = spec.calls
        assert call["need_lock"] is True and int(call["max_jobs"]) == usable_cpu_count()
    assert "MAX_JOBS" not in __import__("os").environ  # restored afterwards


@pytest.mark.gpu
def test_prebuilt_modules_are_the_cache_entries_flashinfers_plan_uses():
    from attnsel.attention.kernels import flashinfer_jit

    modules = pytest.importorskip("flashinfer.jit.attention.modules")
    for request in fi.jit_module_requests(["mixed"], "bfloat16", 128, torch.cuda.get_device_capability(), torch.version.cuda):
        args = request.generator_args(torch)
        spec = flashinfer_jit._jit_spec(modules, request, torch)
        assert spec.name.startswith(modules.get_batch_prefill_uri(*args))


def test_the_prebuild_passes_what_each_flashinfer_release_requires_to_build():
    # flashinfer 0.6.12 (vLLM 0.24's pin): build(self, verbose, need_lock=True) -- `verbose` is
    # required; 0.7.x: build(self, need_lock=...). A missing `verbose` made every H100 pre-build
    # fail with TypeError, leaving ~100 s of JIT inside FlashInfer's turn.
    from attnsel.attention.kernels.flashinfer_jit import build_kwargs

    class Spec06:
        def build(self, verbose, need_lock=True):
            pass

    class Spec07:
        def build(self, need_lock=False):
            pass

    assert build_kwargs(Spec06().build) == {"verbose": False, "need_lock": True}
    assert build_kwargs(Spec07().build) == {"need_lock": True}
