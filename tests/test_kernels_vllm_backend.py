"""tune drives vLLM's own backend classes when vLLM is installed (attention/kernels/vllm/backend.py).

A fake vLLM 0.24 tree (tests/fixtures/fake_vllm/kernels, answering what the real 0.24.0 classes
answered, recorded by bench/tools/vllm_cpu_check.py) stands at our boundary: the tests check what
attnsel hands vLLM's Attention layer, metadata builder and AttentionImpl, that the output computed
from that is right, which provider and launch mode a row records, and the fallback when vLLM's
classes cannot be driven. The same adapter against the REAL vLLM 0.24.0 on CPU:
`python -m attnsel.bench.tools.vllm_cpu_check` (all three backends match the fp32 reference)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from attnsel.attention.kernels import paged, registry  # noqa: E402

FAKE = Path(__file__).parent / "fixtures" / "fake_vllm" / "kernels"


@pytest.fixture
def fake_vllm(monkeypatch):
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(FAKE))
    import vllm._calls as calls

    calls.CALLS.clear()
    yield calls
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        sys.modules.pop(name, None)


def _batch(kind="decode", batch=3, context=200, query_len=1, block_size=16, dtype="bfloat16"):
    w = paged.Workload(kind, batch, context, query_len, 8, 2, 64, dtype)
    return paged.make_paged_batch(w, block_size, device="cpu", seed=3)


def _calls(calls, what):
    return [d for w, d in calls.CALLS if w == what]


def test_with_vllm_installed_its_own_classes_are_the_first_provider(fake_vllm):
    for backend in ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"):
        first = registry.adapters_for(backend, device="cpu")[0]
        assert first.name == "vllm" and first.availability() is None


def test_without_vllm_the_stand_ins_are_used_and_say_why(monkeypatch):
    if any(p for p in sys.path if Path(p, "vllm").is_dir()):
        pytest.skip("a vLLM is importable here")
    first = registry.adapters_for("TRITON_ATTN", device="cpu")[0]
    assert first.name == "vllm" and first.availability() == "vllm is not installed"


@pytest.mark.parametrize("backend, block_size, kernel_block_size", [
    ("FLASH_ATTN", 16, 16), ("TRITON_ATTN", 64, 64),
    ("FLASHINFER", 256, 64),  # vLLM splits a 256-token cache block into 64-token kernel pages (0.24)
])
def test_the_adapter_hands_vllms_classes_the_batch_and_gets_the_right_answer(fake_vllm, backend, block_size,
                                                                                kernel_block_size):
    from attnsel.attention.kernels.vllm import VllmBackendAdapter

    b = _batch(block_size=block_size)
    prepared = VllmBackendAdapter(backend, device="cpu").prepare(b)
    prepared.poison_output()
    err = paged.relative_error(prepared.run(), paged.reference_attention(b))
    assert err < 1e-2
    layer = _calls(fake_vllm, "Attention")[-1]
    assert (layer["num_heads"], layer["num_kv_heads"], layer["head_size"]) == (8, 2, 64)
    assert layer["scale"] == pytest.approx(64 ** -0.5) and layer["block_size"] == block_size
    assert layer["backend"] == backend and layer["default_dtype"] == torch.bfloat16  # built as model code does
    builder = _calls(fake_vllm, "Builder")[-1]
    assert builder["block_size"] == kernel_block_size and builder["layer_names"] == [layer["prefix"]]
    common = _calls(fake_vllm, "build")[-1]["common"]
    assert common.seq_lens.tolist() == b.seq_lens.tolist()
    assert common.query_start_loc.tolist() == b.cu_query_lens.tolist()
    assert (common.num_reqs, common.num_actual_tokens) == (3, 3)
    assert common.max_seq_len == max(b.seq_lens.tolist()) and common.max_query_len == 1
    assert common.block_table_tensor.shape[1] == b.block_table.shape[1] * (block_size // kernel_block_size)
    model = _calls(fake_vllm, "ModelConfig")[-1]["config"]
    assert (model["num_attention_heads"], model["num_key_value_heads"], model["head_dim"]) == (8, 2, 64)
    assert prepared.provider.startswith(f"vllm 0.24.0 {backend}: ")
    assert prepared.kernel_block_size == kernel_block_size


def test_the_kv_cache_has_vllms_own_shape_for_each_backend(fake_vllm):
    from attnsel.attention.kernels.vllm import VllmBackendAdapter

    b = _batch()
    for backend in ("FLASH_ATTN", "TRITON_ATTN"):
        VllmBackendAdapter(backend, device="cpu").prepare(b)
        shape = _calls(fake_vllm, "forward")[-1]["kv_cache_shape"]
        assert shape == (b.num_blocks, 2, 16, 2, 64)  # vLLM 0.24: (num_blocks, 2, block, kv heads, head)


def test_launch_mode_comes_from_vllms_own_dispatcher(fake_vllm):
    from attnsel.attention.kernels.vllm import VllmBackendAdapter

    adapter = VllmBackendAdapter("TRITON_ATTN", device="cpu")
    decode = adapter.prepare(_batch()).details
    assert decode["launch"] == "graph" and "FULL for 3 tokens" in decode["launch_reason"]
    assert decode["cudagraph_support"] == "ALWAYS" and decode["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    mixed = adapter.prepare(_batch("mixed", batch=4, context=96, query_len=40)).details
    assert mixed["launch"] == "eager"
    assert _calls(fake_vllm, "resolve_cudagraph_mode")[-1]["max_num_reqs"] == 1024  # vllm serve on an H100


def _runner(backend, extra_notes=()):
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "tune"))
    try:
        from cpu_toolkit import CpuKernelToolkit
    finally:
        sys.path.pop(0)
    from attnsel.bench.worker.items import ItemRunner

    shape = {"head_size": 64, "num_q_heads": 8, "num_kv_heads": 2, "dtype": "float16", "kv_cache_dtype": "auto"}
    return ItemRunner(CpuKernelToolkit(), backend, shape, {"launch": "vllm"})


def _item(kind="decode", batch=3, context=200, query_len=1):
    from attnsel.bench.plan import WorkloadSpec

    return {"key": "k", "block_size": 16, "kernel_block_size": 16, "check": True, "launch": "eager",
            "launch_reason": "recorded rule", "workload": WorkloadSpec(kind, batch, context, query_len).to_dict()}


def test_a_tune_row_records_vllms_provider_and_vllms_launch_decision(fake_vllm):
    row = _runner("FLASH_ATTN").run(_item())
    assert row["status"] == "ok", row.get("error")
    assert row["adapter"] == "vllm" and row["provider"].startswith("vllm 0.24.0 FLASH_ATTN")
    # the installed vLLM's dispatcher overrides the plan's recorded rule ("eager" in the item)
    assert (row["launch"], row["launch_source"]) == ("graph", "installed vLLM")
    assert row["checked"] and row["rel_error"] < 1e-2
    assert row["provider_details"]["builder"] == "FLASH_ATTNMetadataBuilder"


FALLBACK_SCRIPT = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import vllm.v1.attention.backends.recorded as recorded
original = recorded.backend_class
def broken(name):
    cls = original(name)
    class Broken(cls.get_builder_cls()):
        def __init__(self, *args, **kwargs):
            raise TypeError("unexpected keyword argument 'kv_cache_spec'")
    cls.get_builder_cls = staticmethod(lambda: Broken)
    return cls
recorded.backend_class = broken
from cpu_toolkit import CpuKernelToolkit
from attnsel.bench.plan.workloads import WorkloadSpec
from attnsel.bench.worker.items import ItemRunner
shape = {"head_size": 64, "num_q_heads": 8, "num_kv_heads": 2, "dtype": "float16", "kv_cache_dtype": "auto"}
item = {"key": "k", "block_size": 16, "kernel_block_size": 16, "check": True,
        "workload": WorkloadSpec("decode", 2, 64, 1).to_dict()}
print(json.dumps(ItemRunner(CpuKernelToolkit(), "TRITON_ATTN", shape, {}).run(item), default=str))
"""


def test_when_vllms_classes_cannot_be_driven_the_row_falls_back_and_says_so():
    import json
    import os
    import subprocess

    # a subprocess: Triton's CPU interpreter must be chosen before triton is first imported
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", FALLBACK_SCRIPT, str(FAKE), str(Path(__file__).parent / "fixtures" / "tune")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["status"] == "ok", row.get("error")
    assert row["adapter"] == "attnsel-triton"
    assert any("could not be driven" in n and "fell back to attnsel-triton" in n for n in row["notes"])


def test_a_prespawned_worker_imports_vllms_modules_before_go(fake_vllm):
    # `import vllm` took 18.5 s on an H100: the worker pays it while the previous backend times
    from attnsel.attention.kernels.vllm import VllmBackendAdapter
    from attnsel.bench.worker.prebuild import import_backend_libraries

    adapter = VllmBackendAdapter("FLASHINFER", device="cpu")
    assert "vllm.v1.attention.backends.recorded" in adapter.preload_modules()
    import_backend_libraries([adapter], "FLASHINFER")
    assert {"vllm.v1.attention.backends.recorded", "vllm.v1.cudagraph_dispatcher",
            "vllm.model_executor.layers.attention"} <= set(sys.modules)


def _stack_reading_fp8_as(read_as):
    from types import SimpleNamespace

    from attnsel.attention.versions import get_profile

    class TritonLikeBackend:  # vLLM 0.24 TritonAttentionBackend's cache shape: (nb, 2, bs, hkv, d)
        @staticmethod
        def get_kv_cache_shape(nb, bs, hkv, d, cache_dtype_str="auto"):
            return (nb, 2, bs, hkv, d)

    return SimpleNamespace(backend_cls=TritonLikeBackend, layer=SimpleNamespace(impl=SimpleNamespace(fp8_dtype=read_as)),
                           spec=SimpleNamespace(kv_cache_dtype="fp8_e5m2", dtype="bfloat16"),
                           kv_cache_spec=SimpleNamespace(dtype=torch.uint8), facts=get_profile("0.24").adapter_facts)


def test_an_e5m2_cache_is_filled_in_the_fp8_format_vllms_triton_impl_reads():
    # vLLM 0.24's TritonAttentionImpl writes and reads any fp8 cache as the platform's e4m3: filled
    # with e5m2 bytes, its answer was off by 0.88 (relative) on an H100; filled as vLLM fills it, it
    # holds the batch's values.
    from attnsel.attention.kernels.vllm import inputs as vllm_inputs

    w = paged.Workload("decode", 2, 100, 1, 8, 2, 64, "bfloat16", "fp8_e5m2")
    b = paged.make_paged_batch(w, 16, device="cpu", seed=5)
    assert b.key_cache.dtype == torch.float8_e5m2
    cache = vllm_inputs.kv_cache_tensor(_stack_reading_fp8_as(torch.float8_e4m3fn), b)
    keys = cache.select(1, 0).view(torch.float8_e4m3fn).float()
    assert torch.allclose(keys, b.key_cache.float(), rtol=0.07, atol=2e-3)
    # the same bytes read as e4m3 without the conversion are far off: that is what the check caught
    raw = vllm_inputs.kv_cache_tensor(_stack_reading_fp8_as(None), b).select(1, 0).view(torch.float8_e4m3fn).float()
    assert paged.relative_error(raw, b.key_cache.float()) > 0.3


def test_the_model_folder_handed_to_vllm_is_not_left_in_the_temp_dir(fake_vllm):
    # tune's workers end with os._exit (no finalizers): a folder kept for later piled up in /tmp,
    # one per head layout and worker, run after run
    from attnsel.attention.kernels.vllm import VllmBackendAdapter

    VllmBackendAdapter("TRITON_ATTN", device="cpu").prepare(_batch())
    folder = _calls(fake_vllm, "ModelConfig")[-1]["model"]
    assert Path(folder).name.startswith("attnsel-model-")
    assert not Path(folder).exists()
