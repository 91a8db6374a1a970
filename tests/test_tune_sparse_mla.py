"""Sparse MLA in tune (issue 21 item 4: "Sparse MLA, where users have seen vLLM's pick lose"):
`attnsel tune --model deepseek-v3.2 -tp N --workload decode` plans vLLM's sparse MLA backends at
the per-GPU heads of that TP (128 / N), names vLLM's default, and times each decode token over
the indexer's top-k positions only (attention/kernels/mla.py, attention/kernels/vllm/sparse_mla.py)."""

import json

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app


def plan_json(*args):
    result = CliRunner().invoke(app, ["tune", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def deepseek_v32(tp: int, version: str) -> dict:
    return plan_json("--model", "deepseek-v3.2", "-tp", str(tp), "--gpu", "H100", "--workload", "decode",
                     "--dry-run", "--json", "--vllm-version", version)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_hopper_plans_both_sparse_backends_at_the_heads_of_each_tp(tp):
    doc = deepseek_v32(tp, "0.26")
    shape = doc["shape"]
    assert (shape["use_sparse"], shape["num_q_heads"], shape["index_topk"]) == (True, 128 // tp, 2048)
    planned = {c["backend"] for c in doc["configs"] if c["status"] == "planned"}
    assert planned == {"FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"}
    # both run 64-token kernel pages; FlashInfer's sparse MLA is Blackwell-only
    assert {c["kernel_block_size"] for c in doc["configs"] if c["status"] == "planned"} == {64}
    skipped = [c for c in doc["configs"] if c["backend"] == "FLASHINFER_MLA_SPARSE"]
    assert skipped and all("compute capability not supported" in c["reasons"] for c in skipped)
    assert doc["vllm_default"]["backend"] == "FLASH_ATTN_MLA_SPARSE"
    assert any("top-k" in n for n in doc["notes"])
    assert {k for w in doc["launch"].values() for k in w.values()} == {"graph"}  # UNIFORM_BATCH builders


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_0_33_on_hopper_also_plans_flashinfers_sm90_sparse_backend(tp):
    # FLASHINFER_MLA_SPARSE_SM90 (vLLM 0.30+; vllm issue 56564: picked on 8xH100 and slower than
    # FLASH_ATTN_MLA_SPARSE): tune times it beside the other two at 64-token kernel pages
    doc = plan_json("--model", "deepseek-v3.2", "-tp", str(tp), "--gpu", "H100", "--workload", "decode",
                    "--block-sizes", "64", "--dry-run", "--json", "--vllm-version", "0.33")
    planned = {c["backend"]: c["kernel_block_size"] for c in doc["configs"] if c["status"] == "planned"}
    assert planned == {"FLASH_ATTN_MLA_SPARSE": 64, "FLASHMLA_SPARSE": 64, "FLASHINFER_MLA_SPARSE_SM90": 64}
    assert doc["shape"]["num_q_heads"] == 128 // tp
    assert {k for w in doc["launch"].values() for k in w.values()} == {"graph"}  # its builder is UNIFORM_BATCH too


def test_a_release_without_the_sm90_sparse_backend_says_so_in_its_rows():
    doc = deepseek_v32(8, "0.26")
    sm90 = [c for c in doc["configs"] if c["backend"] == "FLASHINFER_MLA_SPARSE_SM90"]
    assert sm90 and all(c["status"] != "planned" for c in sm90)
    assert all(c["reasons"] == ["vLLM 0.26.0 has no FLASHINFER_MLA_SPARSE_SM90 backend"] for c in sm90)


def test_the_release_facts_say_why_sm90_sparse_is_not_timed_with_fp8():
    from attnsel.attention.versions import get_profile

    assert "kpe_scale=1.0" in get_profile("0.33").adapter_facts.fp8_refusal("FLASHINFER_MLA_SPARSE_SM90")
    assert get_profile("0.33").adapter_facts.fp8_refusal("FLASHMLA_SPARSE") is None
    assert get_profile("0.26").adapter_facts.fp8_refusal("FLASHINFER_MLA_SPARSE_SM90") is None


def test_before_0_25_hopper_has_only_sparse_flashmla_and_says_so():
    doc = deepseek_v32(8, "0.24")
    assert doc["vllm_default"]["backend"] == "FLASHMLA_SPARSE"
    fa = [c for c in doc["configs"] if c["backend"] == "FLASH_ATTN_MLA_SPARSE"]
    assert fa and all(c["reasons"] == ["vLLM 0.24.0 has no FLASH_ATTN_MLA_SPARSE backend"] for c in fa)


def test_sparse_backends_can_be_named():
    doc = plan_json("--model", "deepseek-v3.2", "-tp", "8", "--gpu", "H100", "--workload", "decode", "--dry-run",
                    "--json", "--vllm-version", "0.26", "--backends", "flashmla_sparse")
    assert {c["backend"] for c in doc["configs"]} == {"FLASHMLA_SPARSE"}


torch = pytest.importorskip("torch")


def sparse_workload(context: int, topk: int = 2048, heads: int = 16, kv: str = "auto"):
    from attnsel.attention.kernels.paged import Workload

    return Workload("decode", 3, context, 1, heads, 1, 576, "bfloat16", kv, kv_lora_rank=512, index_topk=topk)


def test_the_topk_table_is_what_the_indexer_writes():
    from attnsel.attention.kernels.mla import make_mla_batch

    b = make_mla_batch(sparse_workload(3000), 64, device="cpu", seed=3)
    again = make_mla_batch(sparse_workload(3000), 64, device="cpu", seed=3)
    assert torch.equal(b.topk_indices, again.topk_indices)  # deterministic per seed
    for row, seq_len in zip(b.topk_indices.tolist(), b.seq_lens.tolist()):
        chosen = [p for p in row if p >= 0]
        assert row[len(chosen):] == [-1] * (len(row) - len(chosen))  # -1 only after the chosen ones
        assert len(chosen) == min(seq_len, 2048) == len(set(chosen))
        assert all(0 <= p < seq_len for p in chosen)
    assert b.attended_lengths() == [min(n, 2048) for n in b.seq_lens.tolist()]


def test_the_sparse_reference_reads_only_the_chosen_positions():
    import dataclasses

    from attnsel.attention.kernels.mla import make_mla_batch, reference_mla

    short = make_mla_batch(sparse_workload(500), 64, device="cpu", seed=1)  # every position chosen
    dense = dataclasses.replace(short, topk_indices=None)
    assert torch.allclose(reference_mla(short), reference_mla(dense))
    long = make_mla_batch(sparse_workload(3000), 64, device="cpu", seed=1)
    assert not torch.allclose(reference_mla(long), reference_mla(dataclasses.replace(long, topk_indices=None)))


def test_dense_and_sparse_adapters_refuse_each_others_workloads():
    from attnsel.attention.kernels.paged import Workload
    from attnsel.attention.kernels.vllm import VllmMlaAdapter, VllmSparseMlaAdapter

    dense = Workload("decode", 3, 500, 1, 16, 1, 576, "bfloat16", kv_lora_rank=512)
    assert "sparse MLA" in VllmMlaAdapter("FLASHMLA", device="cpu").sparsity_reason(sparse_workload(500))
    sparse = VllmSparseMlaAdapter("FLASHMLA_SPARSE", device="cpu")
    assert "index_topk" in sparse.sparsity_reason(dense)
    assert "fp8_ds_mla" in sparse.sparsity_reason(sparse_workload(500, kv="fp8"))
    assert sparse.sparsity_reason(sparse_workload(500)) is None
