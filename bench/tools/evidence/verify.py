"""Claims about recorded `attnsel verify` runs on an H100 (vLLM 0.24.0's engine)."""

from __future__ import annotations

from attnsel.bench.tools.evidence.claims import Recordings, claim, expect
from attnsel.bench.tune import Verdict

# --- attnsel verify on an H100 (docs/verify.md "attnsel verify": Measured, More H100 runs) ------------------

VERIFY_RUNS = ("verify/h100_llama8b", "verify/h100_qwen06", "verify/h100_nemotron_h", "verify/h100_llama8b_fp8")
VERIFY = tuple(f"{run}/verify.json" for run in VERIFY_RUNS)


def _engines_ran_what_they_were_asked(candidates: list, name: str, vllm_version: str) -> None:
    """Each engine ran the backend and block size it was started for (vLLM's default: what explain
    predicted), read back from that vLLM release."""
    for row in candidates:
        asked = tuple(row["predicted"]) if row["backend"] is None else (row["backend"], row["block_size"])
        used = (row["engine"]["backend_used"], row["engine"]["block_size_used"])
        expect(used == asked, f"{name} {row['name']}: ran {used}, asked {asked}")
        expect(row["engine"]["vllm_version"] == vllm_version, f"{name} {row['name']}: vLLM {row['engine']['vllm_version']}")


def _verdict_holds_without_flags(doc: dict, name: str) -> None:
    verdict = doc["verdict"]
    expect(verdict["verdict"] == "holds" and verdict["flags"] == "", f"{name}: verdict {verdict['verdict']!r}, flags {verdict['flags']!r}")


@claim("docs/verify.md 'attnsel verify': every recorded run compared at least two engines, each running what it "
       "was asked for, read back from vLLM 0.24.0", *VERIFY)
def verify_engines_ran_what_they_were_asked(rec: Recordings) -> None:
    for name in VERIFY:
        candidates = rec.json(name)["candidates"]
        expect(len([r for r in candidates if r["status"] == "ok"]) >= 2, f"{name}: fewer than two engines measured")
        _engines_ran_what_they_were_asked(candidates, name, "0.24.0")


@claim("docs/verify.md 'attnsel verify' (H100, Llama-3.1-8B): tune's keep-the-default advice holds in vLLM's engine; "
       "the runner-up decodes slower", VERIFY[0], "verify/h100_llama8b/tune.json")
def verify_llama_keeps_the_default(rec: Recordings) -> None:
    doc, tune = rec.json(VERIFY[0]), rec.json("verify/h100_llama8b/tune.json")
    expect(tune["recommendation"]["overall"]["verdict"] in ("small", "keep default", "within noise"), "tune advised flags")
    _verdict_holds_without_flags(doc, VERIFY[0])
    expect(doc["verdict"]["tune_advised_flags"] is False, "tune_advised_flags is not False")
    runner_up = [c for c in doc["comparisons"] if "runner-up" in c["short"]]
    expect(runner_up and all(c["decode"]["result"] == "slower" for c in runner_up), "the runner-up did not decode slower")


@claim("docs/evidence.md 'More H100 runs' (Qwen3-0.6B at 32k, issue 16): the step is mostly attention; a gain "
       "below --min-gain keeps the default; FlashInfer's kernel gain is an engine loss", VERIFY[1])
def verify_qwen_attention_bound_keeps_the_default(rec: Recordings) -> None:
    doc = rec.json(VERIFY[1])
    shares = {(s["batch"], s["context"]): s["attention_share"] for s in doc["candidates"][0]["shapes"]}
    expect(shares[(16, 32768)] > 0.9 and shares[(1, 32768)] > 0.5, f"attention shares {shares}")
    _verdict_holds_without_flags(doc, VERIFY[1])
    verdict = doc["verdict"]
    expect(verdict["tune_advised_flags"] is False and verdict["best_end_to_end"]["flags"] == "", "flags advised")
    pick = [c for c in doc["comparisons"] if "pick" in c["short"]]
    expect(any(c["end_to_end"]["result"] == "faster" for c in pick), "the pick was faster nowhere")
    expect(all(c["end_to_end"]["margin_pct"] < verdict["min_gain_pct"] for c in pick), "the pick beat --min-gain")
    runner_up = {c["batch"]: c for c in doc["comparisons"] if "runner-up" in c["short"]}
    expect(runner_up[16]["predicted_kernel_margin_pct"] > 0 > runner_up[16]["decode"]["margin_pct"],
           "FlashInfer's kernel gain at 16 x 32k was not a decode loss")
    expect(all(c["end_to_end"]["result"] == "slower" for c in runner_up.values()), "the runner-up was not slower end to end")


@claim("docs/evidence.md 'More H100 runs' (Nemotron-H-8B, issue 11): a hybrid model's engines ran FLASH_ATTN; "
       "4 attention layers of 52 keep every step margin under 1%", VERIFY[2])
def verify_hybrid_margins_barely_reach_the_step(rec: Recordings) -> None:
    doc = rec.json(VERIFY[2])
    expect(all(row["engine"]["is_hybrid"] is True for row in doc["candidates"]), "an engine did not run as hybrid")
    default = doc["candidates"][0]
    expect(default["engine"]["backend_used"] == "FLASH_ATTN", f"default ran {default['engine']['backend_used']}")
    expect(all(s["attention_share"] < 0.2 for s in default["shapes"]), "attention share above 0.2")
    expect(all(abs(c["expected_step_margin_pct"]) < 1.0 for c in doc["comparisons"]), "a step margin of 1% or more")
    _verdict_holds_without_flags(doc, VERIFY[2])


@claim("docs/evidence.md 'More H100 runs' (Llama-3.1-8B, fp8 KV cache): tune's +5.7% kernel gain is within noise end "
       "to end; the fp8 cache holds twice the tokens", VERIFY[3], "verify/h100_llama8b_fp8/tune.json", VERIFY[0])
def verify_fp8_kernel_gain_is_within_noise(rec: Recordings) -> None:
    doc, tune = rec.json(VERIFY[3]), rec.json("verify/h100_llama8b_fp8/tune.json")
    expect(tune["recommendation"]["overall"]["verdict"] == "faster", "tune did not advise the fp8 pick")
    expect(doc["model"]["kv_cache_dtype"] == "fp8" and doc["verdict"]["tune_advised_flags"] is True, "not the advised fp8 run")
    for c in doc["comparisons"]:
        expect(c["predicted_kernel_margin_pct"] > 5.0, f"{c['short']}: kernel margin {c['predicted_kernel_margin_pct']}")
        expect(c["expected_step_margin_pct"] < c["predicted_kernel_margin_pct"], f"{c['short']}: step margin above kernel margin")
        expect(abs(c["decode"]["margin_pct"] - c["expected_step_margin_pct"]) <= c["decode"]["noise_pct"],
               f"{c['short']}: decode margin off the attention share's prediction")
        expect(c["end_to_end"]["result"] == "within noise", f"{c['short']}: end to end {c['end_to_end']['result']}")
    expect(doc["verdict"]["verdict"] == "within noise" and doc["verdict"]["flags"] == "", f"verdict {doc['verdict']['verdict']}")
    bf16 = rec.json(VERIFY[0])["candidates"][0]["engine"]["kv_cache_tokens"]
    fp8 = doc["candidates"][0]["engine"]["kv_cache_tokens"]
    expect(abs(fp8 - 2 * bf16) <= 0.01 * 2 * bf16, f"fp8 cache {fp8} tokens vs bf16 {bf16}")


# --- vLLM 0.26.0 on the H100 (docs/evidence.md "vLLM 0.26.0 on the H100 (issue 21)") ----------------------

MLA_026 = "verify/h100_vllm026_mla/verify.json"
AA_026 = "verify/h100_vllm026_aa/verify.json"


@claim("docs/evidence.md 'vLLM 0.26.0 on the H100': tune's keep-the-default advice for DeepSeek-V2-Lite (MLA) holds in "
       "vLLM 0.26.0's engine; every engine ran the MLA backend it was asked for", MLA_026,
       "verify/h100_vllm026_mla/tune.json")
def verify_mla_026_keeps_the_default(rec: Recordings) -> None:
    doc, tune = rec.json(MLA_026), rec.json("verify/h100_vllm026_mla/tune.json")
    expect(not Verdict(tune["recommendation"]["overall"]["verdict"]).advises_flags, "tune advised flags")
    _verdict_holds_without_flags(doc, MLA_026)
    _engines_ran_what_they_were_asked(doc["candidates"], MLA_026, "0.26.0")
    runner_up = [c for c in doc["comparisons"] if "runner-up" in c["short"] and c["batch"] == 1]
    expect(runner_up and runner_up[0]["end_to_end"]["result"] == "slower", "FLASHMLA was not slower at batch 1")


@claim("docs/evidence.md 'vLLM 0.26.0 on the H100': two starts of vLLM's default engine (an A/A run) differ by less "
       "than verify's 2% gate at every shape", AA_026)
def verify_engine_starts_stay_under_the_gate(rec: Recordings) -> None:
    doc = rec.json(AA_026)
    expect(len(doc["candidates"]) == 1 and doc["candidates"][0]["backend"] is None, "not an A/A run of the default")
    starts = doc["engine_starts"]
    expect(len(starts) == 3 and all(s["measured"] == 2 for s in starts), "three shapes with two measured starts each")
    for s in starts:
        for figure in ("decode", "end_to_end"):
            spread, gate = s[figure]["start_spread_pct"], s[figure]["gate_pct"]
            expect(spread < gate, f"{s['shape']} {figure}: starts {spread:.2f}% apart, gate {gate}%")
