"""tune drives each vLLM release's own backend classes with that release's adapter facts
(attention/versions/adapter_facts.py). `python -m attnsel.bench.tools.vllm_cpu_check --save
tests/fixtures/vllm_cpu/vllm_0_X.json`, run in an environment with the real release on CPU,
recorded what the release's classes look like (the parameter names of the methods the adapters
call, get_kv_cache_shape's shape and stride order) and that every row matched the fp32 reference.
These tests replay the adapters' calls and cache against those recordings without vLLM, so an
adapter or a release's facts that drift from what the release really has fails here."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path

import pytest

from attnsel.attention.versions import get_profile, installed_adapter_facts

RECORDINGS = sorted((Path(__file__).parent / "fixtures" / "vllm_cpu").glob("vllm_*.json"))
REPO = Path(__file__).resolve().parents[1]


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _signature(names: list[str]) -> inspect.Signature:
    """The recorded parameters ("name=" has a default, "*args" / "**kwargs") as a signature."""
    P = inspect.Parameter
    params = []
    for name in names:
        if name.startswith("**"):
            params.append(P(name[2:], P.VAR_KEYWORD))
        elif name.startswith("*"):
            params.append(P(name[1:], P.VAR_POSITIONAL))
        else:
            params.append(P(name.rstrip("="), P.POSITIONAL_OR_KEYWORD,
                            default=None if name.endswith("=") else P.empty))
    return inspect.Signature(params)


def test_there_is_a_recording_beyond_the_first_release():
    assert [p.name for p in RECORDINGS] and all(_load(p)["rows"] for p in RECORDINGS)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_every_row_of_the_recorded_check_matched_the_reference(path):
    rows = _load(path)["rows"]
    assert [r for r in rows if r["ok"] is False] == []
    # every dense backend and every MLA backend the check covers ran at least one row
    ran = {r["backend"] for r in rows if r["ok"]}
    assert {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "TRITON_MLA", "FLASHMLA"} <= ran


SPARSE_RECORDINGS = [p for p in RECORDINGS if any("top" in r["shape"] for r in _load(p)["rows"])]


def test_a_release_with_sparse_mla_was_checked_with_it():
    # every recording saved since the sparse adapter exists: 0.26 on (from 0.27 the sparse impls ask
    # vLLM's TP group while built: attention/kernels/vllm/mla_layer.py tp_world_of_one)
    assert [p.stem for p in SPARSE_RECORDINGS] == [p.stem for p in RECORDINGS
                                                   if tuple(get_profile(_load(p)["vllm"]).data["vllm_release"]) >= (0, 26, 0)]


@pytest.mark.parametrize("path", SPARSE_RECORDINGS, ids=lambda p: p.stem)
def test_sparse_mla_matched_the_topk_reference_at_the_heads_of_tp_8_and_tp_1(path):
    """Both Hopper sparse backends, at 16 and 128 heads, over a context shorter than the top-k
    (every position) and one longer (2048 chosen of it): vLLM's own index conversion and impl ran,
    and the recorded kernel's answer matched attention over the chosen positions only."""
    rows = [r for r in _load(path)["rows"] if "top2048" in r["shape"] and r["kv_cache_dtype"] == "auto"]
    ran = {(r["backend"], r["shape"].split()[3], r["shape"].split()[2]) for r in rows if r["ok"]}
    for backend in ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"):
        for heads in ("h16/1", "h128/1"):
            assert {(backend, heads, "ctx200"), (backend, heads, "ctx2500")} <= ran


def test_hoppers_flashinfer_sparse_backend_matched_the_topk_reference_where_the_release_has_it():
    """0.33's FLASHINFER_MLA_SPARSE_SM90: vLLM's builder planned FlashInfer's MLA wrapper, its Triton
    kernels packed the top-k and clamped each planned work to the valid count, and the recorded
    kernel's answer over the packed slots matched the reference at 16 and 128 heads."""
    def has_it(path):
        return "missing" not in _load(path)["backends"].get("FLASHINFER_MLA_SPARSE_SM90", {"missing": "not checked"})

    recorded = [p for p in SPARSE_RECORDINGS if has_it(p)]
    # added in 0.30: every recorded release from it on has it
    assert [p.stem for p in recorded] == [p.stem for p in SPARSE_RECORDINGS
                                          if tuple(get_profile(_load(p)["vllm"]).data["vllm_release"]) >= (0, 30, 0)]
    for path in recorded:
        rows = [r for r in _load(path)["rows"] if r["backend"] == "FLASHINFER_MLA_SPARSE_SM90"]
        ran = {(r["shape"].split()[3], r["shape"].split()[2]) for r in rows if r["ok"] and r["kv_cache_dtype"] == "auto"}
        assert ran == {(h, c) for h in ("h16/1", "h128/1") for c in ("ctx200", "ctx2500")}, path.stem
        assert all(r["ok"] is None and "kpe_scale" in r["skipped"] for r in rows if r["kv_cache_dtype"] == "fp8")
    for path in SPARSE_RECORDINGS:  # the releases before it say so in every row, in vLLM's enum's words
        if not has_it(path):
            rows = [r for r in _load(path)["rows"] if r["backend"] == "FLASHINFER_MLA_SPARSE_SM90"]
            assert all(r["ok"] is None and "has no FLASHINFER_MLA_SPARSE_SM90 backend" in r["skipped"] for r in rows)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_the_release_profile_holds_the_facts_the_check_ran_with(path):
    recording = _load(path)
    facts = get_profile(recording["vllm"]).adapter_facts
    assert json.loads(json.dumps(dataclasses.asdict(facts))) == recording["adapter_facts"]
    assert facts.checked and facts.checked_on == recording["vllm"]
    assert (REPO / facts.cpu_check).resolve() == path.resolve()


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_the_adapters_calls_bind_to_the_releases_own_signatures(path):
    from attnsel.attention.kernels.vllm.calls import keyword_arguments

    recording = _load(path)
    facts = get_profile(recording["vllm"]).adapter_facts
    for backend, entry in recording["backends"].items():
        if "missing" in entry:  # a backend of later releases
            continue
        calls = {"builder_build": keyword_arguments(facts.builder_build, 0, "common"),
                 "cudagraph_support": keyword_arguments(facts.cudagraph_support, "config", "spec")}
        if "impl_forward" in entry:
            calls["impl_forward"] = keyword_arguments(facts.impl_forward, *range(7))
        if "mla_forward_mqa" in entry:
            calls["mla_forward_mqa"] = keyword_arguments(facts.mla_forward_mqa, *range(4))
        for method, arguments in calls.items():
            try:
                _signature(entry[method]).bind(**arguments)
            except TypeError as exc:
                pytest.fail(f"{backend} {method}{tuple(entry[method])}: {exc}")


def _backend_from(entry: dict, spec_heads: int, spec_width: int):
    """A backend class answering get_kv_cache_shape / stride order as the recorded release did,
    for any size: each recorded dimension is matched to what it was (10 blocks, the block size,
    the recorded heads and width, K and V)."""
    recorded, block_size = entry["kv_cache_shape_10_blocks"], entry["block_size"]

    def shape(nb, bs, hkv, d, cache_dtype_str="auto"):
        by_value = {10: nb, block_size: bs, spec_heads: hkv, spec_width: d, 2 * spec_width: 2 * d, 2: 2}
        return tuple(by_value[v] for v in recorded)

    order = tuple(entry["stride_order"])
    return type("RecordedBackend", (), {"get_kv_cache_shape": staticmethod(shape),
                                        "get_kv_cache_stride_order": staticmethod(lambda: order)})


def _read_back(cache, kv_split: str, d: int):
    """K and V as the release's impls read them: 0.24 selects the size-2 axis; 0.26's impls do
    kv_cache.transpose(1, 2).split(head_size, dim=-1) (flash_attn.py, triton_attn.py)."""
    if kv_split == "kv_axis":
        axis = 1 if cache.shape[1] == 2 else 0
        return cache.select(axis, 0), cache.select(axis, 1)
    return cache.transpose(1, 2).split(d, dim=-1)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_the_cache_the_adapter_fills_is_read_back_as_the_release_reads_it(path, monkeypatch):
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from attnsel.attention.kernels import paged
    from attnsel.attention.kernels.vllm import inputs

    recording = _load(path)
    facts = get_profile(recording["vllm"]).adapter_facts
    w = paged.Workload("decode", 2, 100, 1, 8, 2, 64, "bfloat16")
    b = paged.make_paged_batch(w, 16, device="cpu", seed=7)
    for backend in ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"):
        entry = recording["backends"][backend]
        if facts.shape_from == "kv_cache_layouts":
            # the release's KVCacheLayout order for the backend, as recorded (vLLM is not imported)
            monkeypatch.setattr(inputs, "layer_view_order", lambda cls, order=tuple(entry["stride_order"]): order)
        stack = SimpleNamespace(backend_cls=_backend_from(entry, 8, 128), facts=facts,
                                layer=SimpleNamespace(impl=SimpleNamespace()),
                                spec=SimpleNamespace(kv_cache_dtype="auto", dtype="bfloat16"),
                                kv_cache_spec=SimpleNamespace(dtype=torch.bfloat16))
        recorded = (tuple(entry["kv_cache_shape_10_blocks"]), tuple(entry["stride_order"]))
        assert inputs.backend_cache_layout(stack, 10, entry["block_size"], 8, 128) == recorded, backend
        cache = inputs.kv_cache_tensor(stack, b)
        keys, values = _read_back(cache, facts.kv_split, 64)
        assert torch.equal(keys, b.key_cache) and torch.equal(values, b.value_cache), backend


def _installed(tmp_path, monkeypatch, version: str) -> None:
    info = tmp_path / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\n", encoding="utf-8")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])


def test_tune_says_in_one_line_when_the_installed_release_was_not_checked(tmp_path, monkeypatch):
    _installed(tmp_path, monkeypatch, "0.23.0")
    installed, facts, note = installed_adapter_facts()
    assert installed == "0.23.0" and facts.profile == "vllm_0_23" and not facts.checked
    assert "not checked" in note and "\n" not in note


def test_a_checked_release_needs_no_warning(tmp_path, monkeypatch):
    _installed(tmp_path, monkeypatch, "0.24.0")
    _installed_name, facts, note = installed_adapter_facts()
    assert facts.profile == "vllm_0_24" and facts.checked and note is None


def test_a_release_between_checked_ones_borrows_facts_and_says_whose(tmp_path, monkeypatch):
    _installed(tmp_path, monkeypatch, "0.23.0")
    _, facts, note = installed_adapter_facts()
    assert facts.kv_split == get_profile("0.24").adapter_facts.kv_split and "0.24.0" in note


def test_tune_names_the_unchecked_release_in_its_warnings(tmp_path, monkeypatch):
    from attnsel.bench.tune.run import vllm_adapter_note

    _installed(tmp_path, monkeypatch, "0.23.0")  # every release from 0.24.0 to 0.33.0 is checked
    note = vllm_adapter_note()
    assert note.startswith("vLLM 0.23.0 is installed") and "vllm_0_23" in note and "vLLM 0.24.0's checked facts" in note


def test_every_release_from_0_24_to_0_33_has_checked_adapter_facts_and_a_recording():
    for minor in range(24, 34):
        facts = get_profile(f"0.{minor}").adapter_facts
        assert facts.checked and facts.cpu_check, minor
        assert (REPO / facts.cpu_check).is_file(), facts.cpu_check
