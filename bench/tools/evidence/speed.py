"""Claims about issue 25's before/after sitting on 2 x H200 (docs/tune-performance.md "Before and after in
one sitting", docs/verify.md and docs/probe.md "Speed"): the figures the docs quote are the recorded ones."""

from __future__ import annotations

from attnsel.bench.tools.evidence.claims import Recordings, claim, expect

SITTING = "speed/h200x2_vllm026.json"


def _close(value: float, quoted: float, digits: int = 1) -> bool:
    return round(value, digits) == quoted


@claim("docs/tune-performance.md 'Before and after in one sitting': cold 126.3 s before and 117.9 s after, side by "
       "side; warm 61.1 s and 63.1 s; FlashInfer's JIT build hidden after the jobs fix", SITTING)
def speed_tune_cold_and_warm_as_quoted(rec: Recordings) -> None:
    doc = rec.json(SITTING)
    expect("H200" in doc["machine"] and "vllm 0.26.0" in doc["machine"], doc["machine"].splitlines()[-2:])
    runs = doc["runs"]
    before, after = runs["fix_before_cold"]["phases"], runs["fix_after_cold"]["phases"]
    expect(_close(before["total_s"], 126.3) and _close(after["total_s"], 117.9),
           f"cold {before['total_s']} / {after['total_s']}")
    expect(after["backends"]["FLASHINFER"]["startup_s"] < 1.0, f"FLASHINFER exposed {after['backends']['FLASHINFER']}")
    warm = {side: doc[side]["steps"]["tune_warm"] for side in ("before", "after")}
    expect(warm == {"before": [0, 61.1], "after": [0, 63.1]}, f"warm steps {warm}")


@claim("docs/tune-performance.md 'Before and after in one sitting': `--gpus all` on 2 GPUs x1.34 cold and x1.31 warm "
       "against one lane; the same advice and rows", SITTING)
def speed_two_gpus_as_quoted(rec: Recordings) -> None:
    gpus = rec.json(SITTING)["gpus"]
    one, two = gpus["1"], gpus["2"]
    for run, quoted in (("cold", 1.34), ("warm", 1.31)):
        ratio = one[run]["phases"]["total_s"] / two[run]["phases"]["total_s"]
        expect(round(ratio, 2) == quoted, f"{run}: x{ratio:.3f}")
    expect(two["warm"]["overall"]["verdict"] == one["warm"]["overall"]["verdict"], "advice differs")


@claim("docs/verify.md 'Speed' and docs/tune-performance.md: verify's first engine started in 111.3 s instead of "
       "185.9 s, the FLASHINFER engine in 64.7 s instead of 170.1 s; probe --json 0.401 s -> 0.236 s", SITTING)
def speed_verify_and_probe_as_quoted(rec: Recordings) -> None:
    doc = rec.json(SITTING)
    starts = {side: [round(c["start_s"], 1) for c in doc[side]["verify"]["candidates"][:2]] for side in ("before", "after")}
    expect(starts == {"before": [185.9, 170.1], "after": [111.3, 64.7]}, f"starts {starts}")
    probes = {side: doc[side]["probe"]["subprocess"]["median_s"] for side in ("before", "after")}
    expect(probes == {"before": 0.4008, "after": 0.2362}, f"probe {probes}")


SITTING_X4 = "speed/h200x4_vllm026.json"


@claim("docs/tune-performance.md 'The second sitting' and change 12: on 4 x H200, CUPTI once per process against "
       "CUPTI per row: warm 61.9 / 62.5 s against 69.9 / 75.3 s, timing 31.3 / 31.9 s against 37.1 / 40.3 s; "
       "cupti_ab 8.0 / 11.0 ms a row against 24.5 / 30.5 ms", SITTING_X4)
def speed_cupti_once_as_quoted(rec: Recordings) -> None:
    doc = rec.json(SITTING_X4)
    expect("H200" in doc["machine"] and "vllm 0.26.0" in doc["machine"], doc["machine"].splitlines()[-2:])
    pairs = [(doc["gpus"]["1"]["warm"], doc["gpus"]["1_cupti_finalize"]["warm"]),
             (doc["runs"]["after_warm2"], doc["runs"]["finalize_warm2"])]
    totals = [[round(run["phases"]["total_s"], 1) for run in pair] for pair in pairs]
    timing = [[round(sum(b["timing_s"] for b in run["phases"]["backends"].values()), 1) for run in pair]
              for pair in pairs]
    expect(totals == [[61.9, 69.9], [62.5, 75.3]], f"warm totals {totals}")
    expect(timing == [[31.3, 37.1], [31.9, 40.3]], f"timing {timing}")
    per_row = {where: [round(ab[mode]["cupti_host_s_per_row_median"] * 1e3, 1) for mode in ("process", "finalize")]
               for where, ab in doc["cupti_ab"].items()}
    expect(per_row == {"phase2/cupti_finalize": [8.0, 24.5], "phase4/ab": [11.0, 30.5]}, f"cupti_ab {per_row}")


@claim("docs/tune-performance.md 'The second sitting' and docs/verify.md: verify 470.4 s with all three engines "
       "(starts 146.5, 42.0, 45.5 s); `--gpus` on 4 GPUs x1.35 cold (103.6 s) and x1.58 warm (39.1 s), on 2 GPUs "
       "x1.00 and x1.20", SITTING_X4)
def speed_x4_verify_and_gpus_as_quoted(rec: Recordings) -> None:
    doc = rec.json(SITTING_X4)
    verify = doc["after"]["verify"]
    starts = [round(c["start_s"], 1) for c in verify["candidates"]]
    expect(round(verify["elapsed_s"], 1) == 469.9 and doc["after"]["steps"]["verify"] == [0, 470.4],
           f"verify {verify['elapsed_s']} {doc['after']['steps']['verify']}")
    expect(starts == [146.5, 42.0, 45.5], f"starts {starts}")
    gpus = doc["gpus"]
    ratios = {n: [round(gpus["1"][run]["phases"]["total_s"] / gpus[n][run]["phases"]["total_s"], 2)
                  for run in ("cold", "warm")] for n in ("2", "4")}
    expect(ratios == {"2": [1.0, 1.2], "4": [1.35, 1.58]}, f"scaling {ratios}")
    expect([round(gpus["4"][run]["phases"]["total_s"], 1) for run in ("cold", "warm")] == [103.6, 39.1],
           "4-GPU totals")
