"""Claims about vLLM 0.34.0 on an H100 (docs/evidence.md "vLLM 0.34.0 on the H100"): the release's own code
carried to the GPU machine (0.33's torch 2.14 set with 0.34's vLLM and FlashInfer 0.7.4 on top), tune through
0.34's classes, verify in 0.34's engine, where the default block size is 64."""

from __future__ import annotations

from attnsel.bench.tools.evidence.claims import Recordings, claim, expect
from attnsel.bench.tools.evidence.verify import (
    _engines_ran_what_they_were_asked,
    _verdict_holds_without_flags,
)
from attnsel.bench.tools.evidence.vllm033 import release_rows_ran_its_own_classes
from attnsel.bench.tune import Verdict

RELEASE = "0.34.0"
TUNES = {"dense": "tune/h100_vllm034_dense/tune.json", "llama8b": "verify/h100_vllm034_llama8b/tune.json"}
VERIFY = {"llama8b": "verify/h100_vllm034_llama8b/verify.json",
          "llama8b_prefill": "verify/h100_vllm034_llama8b_prefill/verify.json"}
KEEP_DEFAULT = (Verdict.DEFAULT_IS_FASTEST, Verdict.NOISY, Verdict.SMALL)  # advice: keep vLLM's default
MIN_GAIN_PCT = 5.0  # tune's --min-gain default: a gain worth changing flags for


@claim("docs/evidence.md 'vLLM 0.34.0 on the H100': every timed row of both 0.34 runs was measured by vLLM 0.34.0's "
       "own class through 0.34's adapter facts, on an H100 with torch 2.14, against 0.34's default FLASH_ATTN/64",
       *TUNES.values())
def vllm034_rows_ran_its_own_classes(rec: Recordings) -> None:
    for name, path in TUNES.items():
        doc = rec.json(path)
        release_rows_ran_its_own_classes(name, doc, RELEASE, "H100")
        default = doc["recommendation"]["vllm_default"]
        expect((default["backend"], default["block_size"]) == ("FLASH_ATTN", 64), f"{name}: vLLM's default {default}")


@claim("docs/evidence.md 'vLLM 0.34.0 on the H100': `tune --head-size 128 --dtype bf16` and the Llama-3.1-8B sweep "
       "keep vLLM's default, and verify in 0.34's engine holds it; every engine ran what it was asked for",
       *TUNES.values(), VERIFY["llama8b"])
def vllm034_dense_keeps_the_default_end_to_end(rec: Recordings) -> None:
    for name, path in TUNES.items():
        verdict = rec.json(path)["recommendation"]["overall"]["verdict"]
        expect(verdict in KEEP_DEFAULT, f"tune {name}: {verdict!r}")
    doc = rec.json(VERIFY["llama8b"])
    _verdict_holds_without_flags(doc, VERIFY["llama8b"])
    _engines_ran_what_they_were_asked(doc["candidates"], VERIFY["llama8b"], RELEASE)


@claim("docs/evidence.md 'vLLM 0.34.0 on the H100': the prefill pick FLASH_ATTN/128 is >= 5% faster than the default "
       "at kernel level, but gains less than 5% prefill throughput in 0.34's engine at 8 x 8192 and 2 x 32768",
       TUNES["llama8b"], VERIFY["llama8b_prefill"])
def vllm034_kernel_prefill_gain_is_not_an_engine_gain(rec: Recordings) -> None:
    prefill = rec.json(TUNES["llama8b"])["recommendation"]["workloads"]["prefill"]
    best = (prefill["best"]["backend"], prefill["best"]["block_size"])
    expect(best == ("FLASH_ATTN", 128) and prefill["margin_pct"] >= MIN_GAIN_PCT, f"kernel prefill: {best} {prefill['margin_pct']:.1f}%")
    doc = rec.json(VERIFY["llama8b_prefill"])
    _engines_ran_what_they_were_asked(doc["candidates"], VERIFY["llama8b_prefill"], RELEASE)
    shapes = {(c["batch"], c["context"]): c["prefill"]["margin_pct"] for c in doc["comparisons"]}
    expect(set(shapes) == {(8, 8192), (2, 32768)}, f"shapes {sorted(shapes)}")
    for shape, margin in shapes.items():
        expect(margin < MIN_GAIN_PCT, f"engine prefill at {shape}: {margin:+.1f}%")
