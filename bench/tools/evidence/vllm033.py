"""Claims about vLLM 0.33.0 on an H200 (docs/evidence.md "vLLM 0.33.0 on the H200", issue 21): its own
torch 2.14 carried to the GPU machine, tune through 0.33's classes, verify in 0.33's engine."""

from __future__ import annotations

from attnsel.bench.tools.evidence.claims import Recordings, claim, expect, ok_rows
from attnsel.bench.tools.evidence.verify import (
    _engines_ran_what_they_were_asked,
    _verdict_holds_without_flags,
)
from attnsel.bench.tune import Verdict
from attnsel.bench.verify.verdict import decode_geomeans

RELEASE = "0.33.0"
TUNES = {name: f"tune/h200_vllm033_{name}/tune.json"
         for name in ("dense", "mla", "fp8", "sparse_tp8", "sparse_tp4", "sparse_tp2", "sparse_tp1", "glm5_tp8")}
SPARSE = ("sparse_tp8", "sparse_tp4", "sparse_tp2", "sparse_tp1")  # 16 / 32 / 64 / 128 heads per GPU
VERIFY = {name: f"verify/h200_vllm033_{name}/verify.json" for name in ("dense", "mla")}
KEEP_DEFAULT = (Verdict.DEFAULT_IS_FASTEST, Verdict.NOISY, Verdict.SMALL)  # advice: keep vLLM's default


def _geomean_us(doc: dict) -> dict:
    """Each ranked backend's decode geomean as the run's recommendation recorded it, in µs (the
    sparse runs time one block size per backend)."""
    return {backend: ms * 1000 for (backend, _size), ms in decode_geomeans(doc).items()}


@claim("docs/evidence.md 'vLLM 0.33.0 on the H200': every timed row of every 0.33 run was measured by vLLM 0.33.0's "
       "own class through 0.33's adapter facts, on an H200 with torch 2.14", *TUNES.values())
def vllm033_rows_ran_its_own_classes(rec: Recordings) -> None:
    for name, path in TUNES.items():
        release_rows_ran_its_own_classes(name, rec.json(path), RELEASE, "H200")


def release_rows_ran_its_own_classes(name: str, doc: dict, release: str, gpu: str) -> None:
    """Every timed row but torch's FlexAttention was measured by `release`'s own class through its adapter
    facts, on a `gpu` with its torch 2.14."""
    versions = doc["environment"]["versions"]
    expect(versions["vllm"] == release and versions["torch"].startswith("2.14"), f"{name}: {versions}")
    expect(gpu in doc["environment"]["gpu"]["name"], f"{name}: {doc['environment']['gpu']['name']}")
    timed = [r for r in ok_rows(doc["rows"]) if r["backend"] != "FLEX_ATTENTION"]
    expect(timed, f"{name}: nothing timed")
    facts = "vllm_" + "_".join(release.split(".")[:2]) + " "
    for row in timed:
        expect(row["provider"].startswith(f"vllm {release} "), f"{name}: {row['provider']}")
        expect(row["provider_details"]["adapter_facts"].startswith(facts), f"{name}: {row['provider_details']['adapter_facts']}")


@claim("docs/evidence.md 'vLLM 0.33.0 on the H200': `tune --head-size 128 --dtype bf16` and the DeepSeek-V2-Lite MLA "
       "sweep keep vLLM's default, and verify in 0.33's engine holds it; every engine ran what it was asked for",
       TUNES["dense"], TUNES["mla"], *VERIFY.values())
def vllm033_dense_and_mla_keep_the_default_end_to_end(rec: Recordings) -> None:
    for name in ("dense", "mla"):
        verdict = rec.json(TUNES[name])["recommendation"]["overall"]["verdict"]
        expect(verdict in KEEP_DEFAULT, f"tune {name}: {verdict!r}")
        doc = rec.json(VERIFY[name])
        _verdict_holds_without_flags(doc, VERIFY[name])
        _engines_ran_what_they_were_asked(doc["candidates"], VERIFY[name], RELEASE)


@claim("docs/evidence.md 'vLLM 0.33.0 on the H200': DeepSeek-V3.2 at TP 8/4/2/1: vLLM's default FLASH_ATTN_MLA_SPARSE "
       "is fastest or tied, FLASHINFER_MLA_SPARSE_SM90 within 6% of it, FLASHMLA_SPARSE at most 0.7x its speed",
       *(TUNES[n] for n in SPARSE))
def vllm033_sparse_default_holds_at_every_tp(rec: Recordings) -> None:
    for name, heads in zip(SPARSE, (16, 32, 64, 128)):
        doc = rec.json(TUNES[name])
        expect(doc["plan"]["shape"]["num_q_heads"] == heads, f"{name}: {doc['plan']['shape']['num_q_heads']} heads")
        rec_ = doc["recommendation"]
        expect(rec_["vllm_default"]["backend"] == "FLASH_ATTN_MLA_SPARSE", f"{name}: default {rec_['vllm_default']}")
        expect(rec_["overall"]["verdict"] in KEEP_DEFAULT, f"{name}: verdict {rec_['overall']['verdict']!r}")
        us = _geomean_us(doc)
        fa3 = us["FLASH_ATTN_MLA_SPARSE"]
        expect(fa3 / us["FLASHINFER_MLA_SPARSE_SM90"] >= 0.94, f"{name}: SM90 at {fa3 / us['FLASHINFER_MLA_SPARSE_SM90']:.2f}x")
        expect(fa3 / us["FLASHMLA_SPARSE"] <= 0.7, f"{name}: FLASHMLA_SPARSE at {fa3 / us['FLASHMLA_SPARSE']:.2f}x")


@claim("docs/evidence.md 'vLLM 0.33.0 on the H200': GLM-5-Next at TP 8 (NoPE, head 512; vllm#56564's shape), where "
       "vLLM picks FLASHINFER_MLA_SPARSE_SM90: its kernel ties FLASH_ATTN_MLA_SPARSE (within noise), keep the default",
       TUNES["glm5_tp8"])
def vllm033_glm5_sm90_ties_at_kernel_level(rec: Recordings) -> None:
    doc = rec.json(TUNES["glm5_tp8"])
    rec_ = doc["recommendation"]
    expect(rec_["vllm_default"]["backend"] == "FLASHINFER_MLA_SPARSE_SM90", f"default {rec_['vllm_default']}")
    expect(rec_["overall"]["verdict"] in KEEP_DEFAULT, f"verdict {rec_['overall']['verdict']!r}")
    us = _geomean_us(doc)
    expect(abs(us["FLASHINFER_MLA_SPARSE_SM90"] / us["FLASH_ATTN_MLA_SPARSE"] - 1) < 0.03, f"geomeans {us}")
