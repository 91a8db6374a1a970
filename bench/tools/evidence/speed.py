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
