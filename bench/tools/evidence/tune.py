"""Claims about recorded kernel checks and tune sweeps (H200, H100 with vLLM 0.24.0, MLA / fp8, 2 x H200)."""

from __future__ import annotations

import math
from collections import defaultdict

from attnsel.attention.kernels import kv_quant
from attnsel.bench.plan.mla import MLA_BACKENDS
from attnsel.bench.sweep import results as R
from attnsel.bench.tools.evidence.claims import (
    TUNE_PERF,
    Broken,
    Recordings,
    claim,
    expect,
    ok_rows,
)

# --- H200 kernel check (docs/evidence.md "Measured (H200, 2026-11-21)") ----------------------------------

KERNELS = "kernels/h200_kernel_check.jsonl"


@claim("docs/evidence.md 'Measured (H200)': every timed kernel passed the fp32 reference check", KERNELS)
def h200_kernels_pass_the_fp32_reference(rec: Recordings) -> None:
    timed = [r for r in rec.jsonl(KERNELS) if r.get("status") in ("ok", "wrong")]
    expect(len(timed) >= 20, f"{len(timed)} timed kernels, expected at least 20")
    bad = [r.get("adapter") for r in timed if not (r["correct"] and r["rel_err"] < 1e-2)]
    expect(not bad, f"kernels failing the reference: {bad}")


@claim("docs/evidence.md 'Measured (H200)': our Triton decode vs FlashInfer >= 0.8x; best backend >= 75% of HBM peak", KERNELS)
def h200_triton_decode_meets_the_bar(rec: Recordings) -> None:
    from attnsel.bench.tools.kernel_check import bar_summary

    bar = bar_summary(rec.jsonl(KERNELS))
    if bar is None:
        raise Broken("no attnsel-triton and flashinfer rows to compare")
    expect(bar["ratio"] >= 0.8, f"Triton / FlashInfer ratio {bar['ratio']:.3f} < 0.8")
    expect(bar["best_pct_peak"] >= 75.0, f"best row {bar['best_pct_peak']:.1f}% of peak < 75%")


@claim("docs/evidence.md 'Measured (H200)': bandwidth is bytes over time, below the device peak", KERNELS)
def h200_kernel_bandwidth_below_peak(rec: Recordings) -> None:
    rows = rec.jsonl(KERNELS)
    peak = rows[0]["peak_tb_s"]
    for r in ok_rows(rows):
        expect(0 < r["tb_per_s"] < peak, f"{r.get('adapter')}: {r['tb_per_s']} TB/s vs peak {peak}")
        expect(abs(r["pct_peak"] - 100 * r["tb_per_s"] / peak) < 0.2, f"{r.get('adapter')}: pct_peak is not TB/s / peak")


# --- tune on an H200 without vLLM (docs/tune.md "An earlier H200 run") ---------------------------------

H200_TUNE = "tune/h200_llama8b_default/tune.json"
H200_GRAPH = "tune/h200_triton_quick_cuda_graph.jsonl"


@claim("docs/tune.md 'An earlier H200 run': the default sweep timed 256 rows, each cold, none above HBM peak", H200_TUNE)
def h200_sweep_rows_cold_under_peak(rec: Recordings) -> None:
    rows = ok_rows(rec.json(H200_TUNE)["rows"])
    expect(len(rows) == 256, f"{len(rows)} timed rows, the run timed 256")
    for r in rows:
        expect(r["timing"]["l2"] == "cold" and r["timing"]["n"] >= 10, f"{r['key']}: not cold or fewer than 10 calls")
        expect(r["pct_of_peak_bandwidth"] < 100.0, f"{r['key']}: {r['pct_of_peak_bandwidth']}% of HBM peak")


@claim("docs/tune.md 'Kernel-exact timing': CUDA-graph mode rotates input copies where 2 x L2 is not covered", H200_GRAPH)
def h200_cuda_graph_rotates_small_inputs(rec: Recordings) -> None:
    rows = rec.jsonl(H200_GRAPH)
    expect(rows and all(r["status"] == "ok" and r["timing"]["mode"] == "cuda_graph" for r in rows),
           "not every row ran in CUDA-graph mode")
    for r in rows:  # 2 x L2 (60 MiB on the H200) of input per call keeps a call cold
        copies = r["timing"]["rotation_copies"]
        expect((copies > 1) == (r["bytes_moved"] < 2 * 62914560), f"{r['key']}: {copies} copies for {r['bytes_moved']} bytes")


# --- tune on an H100 with vLLM 0.24.0 (docs/tune.md "A real run: H100 80GB HBM3 with vLLM 0.24.0") ------

H100 = "tune/h100_vllm024"
H100_RUNS = tuple(f"{H100}{rerun}/{which}/tune.json" for rerun in ("", "_rerun") for which in ("cold", "warm"))
H100_WARM = f"{H100}/warm/tune.json"


@claim("docs/tune.md 'A real run' (H100): all 256 rows ran vLLM's own classes, FA3 on Hopper", H100_WARM)
def h100_rows_ran_vllms_own_classes(rec: Recordings) -> None:
    rows = ok_rows(rec.json(H100_WARM)["rows"])
    expect(len(rows) == 256, f"{len(rows)} timed rows, README says 256")
    driven = [r for r in rows if r["backend"] in R.VLLM_DRIVEN_BACKENDS]
    expect(driven, "no row of FLASH_ATTN, FLASHINFER or TRITON_ATTN")
    for r in driven:
        expect(r["adapter"] == "vllm" and r["provider"].startswith("vllm 0.24.0 "), f"{r['key']}: ran {r['provider']}")
    fa = [r for r in driven if r["backend"] == "FLASH_ATTN"]
    expect(all(r["provider_details"]["fa_version"] == 3 for r in fa), "a FLASH_ATTN row did not run FA3")
    expect({r["provider_details"]["cudagraph_support"] for r in fa} == {"ALWAYS"}, "FA3's CUDA-graph support is not ALWAYS")


@claim("docs/tune.md 'A real run' (H100): decode rows replayed from CUDA graphs, the rest eager; CUPTI, cold L2", H100_WARM)
def h100_decode_graphs_cupti_cold(rec: Recordings) -> None:
    for r in ok_rows(rec.json(H100_WARM)["rows"]):
        timing = r["timing"]
        expect(timing["timer"] == "cupti" and timing["l2"] == "cold" and timing["n"] >= 10, f"{r['key']}: {timing}")
        expect((r.get("pct_of_peak_bandwidth") or 0) < 100.0, f"{r['key']}: above HBM peak")
        if r["backend"] in R.VLLM_DRIVEN_BACKENDS:
            expected = "graph" if r["kind"] == "decode" else "eager"
            expect(r["launch"] == expected == timing["mode"] and r["launch_source"] == "installed vLLM",
                   f"{r['key']}: launched {r['launch']} / timed {timing['mode']}, vLLM launches {expected}")


def _phases_add_up(phases: dict, which: str) -> None:
    parts = phases["probe_s"] + phases["other_s"] + sum(b["wall_s"] for b in phases["backends"].values())
    expect(abs(parts - phases["total_s"]) <= 0.02 * phases["total_s"], f"{which}: phases {parts:.1f} s vs total {phases['total_s']:.1f} s")
    for name, b in phases["backends"].items():
        inner = b["startup_s"] + b["batch_s"] + b["setup_s"] + b["check_s"] + b["timing_s"] + b["other_s"]
        expect(abs(inner - b["wall_s"]) <= 0.05 * b["wall_s"] + 0.1, f"{which} {name}: parts {inner:.1f} s vs {b['wall_s']:.1f} s")


@claim("docs/tune-performance.md: the H100 sweeps' wall times, phases adding up to the total, repeat_ms never lowered", *H100_RUNS)
def h100_sweep_wall_times_are_accounted_and_quoted(rec: Recordings) -> None:
    doc_text = TUNE_PERF.read_text()
    for name in H100_RUNS:
        doc = rec.json(name)
        expect(doc["options"]["repeat_ms"] == 50.0, f"{name}: repeat_ms {doc['options']['repeat_ms']}, not 50")
        _phases_add_up(doc["phases"], name)
        expect(f"{doc['phases']['total_s']:.1f} s" in doc_text, f"{name}: docs/tune-performance.md does not quote {doc['phases']['total_s']:.1f} s")


@claim("docs/evidence.md 'What that H100 showed': tune's timer within +-5% of FlashInfer's CUPTI figure on >= 95% of rows",
       f"{H100}/fidelity.jsonl")
def h100_timer_matches_flashinfers_cupti(rec: Recordings) -> None:
    from attnsel.bench.tools import fidelity

    rows = [r for r in rec.jsonl(f"{H100}/fidelity.jsonl") if "ratio_sweep" in r]
    summary = fidelity.summarize([r["ratio_sweep"] for r in rows])
    expect(summary["rows"] >= 40 and summary["met"], f"{summary['within']}/{summary['rows']} rows within +-5%")
    expect(any(r["workload"].startswith("decode b=1 ") for r in rows), "no small decode shape compared")


@claim("docs/evidence.md 'What that H100 showed': the old stand-ins were measured against vLLM's own kernels",
       f"{H100}/standin_vs_vllm.json")
def h100_standins_measured_against_vllm(rec: Recordings) -> None:
    data = rec.json(f"{H100}/standin_vs_vllm.json")
    by_backend = data["by_backend"]
    expect(set(by_backend) >= {"FLASH_ATTN", "TRITON_ATTN", "FLASHINFER"}, f"compared only {sorted(by_backend)}")
    expect(any("fa4" in p.lower() for p in by_backend["FLASH_ATTN"]["other_providers"]), "FA4 not compared with FA3")
    for row in data["rows"]:
        if row["backend"] in R.VLLM_DRIVEN_BACKENDS:
            expect(row["reference_provider"].startswith("vllm 0.24.0"), f"{row['backend']}: reference {row['reference_provider']}")


# --- H100 MLA and fp8 KV cache (issue "tune covers fp8 KV cache and MLA models") ------------------

MLA_FP8 = ("tune/h100_mla_tp1/tune.json", "tune/h100_mla_tp8/tune.json", "tune/h100_fp8/tune.json")


@claim("issue 'tune covers fp8 KV cache and MLA models': vLLM's own classes ran every timed row (MLA: forward_mqa)", *MLA_FP8)
def mla_fp8_rows_ran_vllms_own_classes(rec: Recordings) -> None:
    for name in MLA_FP8:
        rows = ok_rows(rec.json(name)["rows"])
        expect(rows, f"{name}: no timed row")
        for r in rows:
            expect(r["adapter"] == "vllm" and r["provider"].startswith("vllm 0.24.0 "), f"{name} {r['key']}: ran {r['provider']}")
            if r["backend"] in MLA_BACKENDS:
                expect("forward_mqa" in r["provider"] and r["kind"] == "decode", f"{name} {r['key']}: not forward_mqa decode")


@claim("issue 'tune covers fp8 KV cache and MLA models': checked rows pass the fp32 reference "
       "(fp8: from the dequantized cache, tolerance 0.15)", *MLA_FP8)
def mla_fp8_checked_rows_pass_the_reference(rec: Recordings) -> None:
    for name in MLA_FP8:
        doc = rec.json(name)
        tolerance = kv_quant.FP8_TOLERANCE if kv_quant.is_fp8(doc["plan"]["shape"]["kv_cache_dtype"]) else 1e-2
        checked = [r for r in doc["rows"] if r.get("checked")]
        expect(checked, f"{name}: no checked row")
        for r in checked:
            expect(r["tolerance"] == tolerance, f"{name} {r['key']}: tolerance {r['tolerance']}, expected {tolerance}")
            expect(r["status"] != R.STATUS_WRONG and r["rel_error"] < r["tolerance"], f"{name} {r['key']}: error {r['rel_error']}")
        expect(not doc["recommendation"]["disqualified"], f"{name}: disqualified {doc['recommendation']['disqualified']}")


@claim("issue 'tune covers fp8 KV cache and MLA models': decode rows launched as vLLM does; "
       "none above HBM peak, the best decode row above 30%", *MLA_FP8)
def mla_fp8_decode_graphs_under_peak(rec: Recordings) -> None:
    for name in MLA_FP8:
        rows = ok_rows(rec.json(name)["rows"])
        for r in rows:
            if r["kind"] == "decode" and r["workload"]["batch"] <= 512:
                expect((r["launch"], r["launch_source"], r["timing"]["mode"]) == ("graph", "installed vLLM", "graph"),
                       f"{name} {r['key']}: launched {r['launch']} ({r.get('launch_reason')})")
        shares = [r["pct_of_peak_bandwidth"] for r in rows if r.get("pct_of_peak_bandwidth") is not None]
        expect(shares and all(0 < s < 100 for s in shares), f"{name}: a row outside 0-100% of HBM peak")
        expect(max(shares) > 30, f"{name}: best row {max(shares):.1f}% of HBM peak")


@claim("issue 'tune covers fp8 KV cache and MLA models': refused configs carry vLLM's reasons", *MLA_FP8)
def mla_fp8_skipped_configs_carry_vllms_reasons(rec: Recordings) -> None:
    for name in MLA_FP8:
        doc = rec.json(name)
        skipped = [r for r in doc["rows"] if r["status"] == R.STATUS_SKIPPED_BY_VLLM]
        shape = doc["plan"]["shape"]
        reasons = {(r["backend"], r["block_size"]): r["error"] for r in skipped}
        if shape["use_mla"]:
            expect("compute capability not supported" in reasons.get(("FLASHINFER_MLA", 64), ""), f"{name}: FLASHINFER_MLA/64")
            expect("block_size not supported" in reasons.get(("FLASHMLA", 16), ""), f"{name}: FLASHMLA/16")
        elif kv_quant.is_fp8(shape["kv_cache_dtype"]):
            expect(any(b == "FLEX_ATTENTION" and "kv_cache_dtype not supported" in e for (b, _), e in reasons.items()),
                   f"{name}: FLEX_ATTENTION not refused for the fp8 cache")


# --- tune --gpus all on 2 x H200 (docs/tune.md "lane per GPU", docs/tune-performance.md) -----------------------

GPUS = ("tune/h200x2_gpus/runs.json", "tune/h200x2_gpus/runs_prespawn.json")


def _gpu_rows(run: dict) -> dict:
    return {(b, bs, w): {"gpu": g, "median": m} for b, bs, w, g, status, m, _, _ in run["rows"] if status == "ok"}


@claim("docs/tune.md 'lane per GPU': both H200s timed the reference row alike, every backend ran in a lane, "
       "every row records the GPU of its lane", GPUS[0])
def gpus_lanes_cover_the_backends(rec: Recordings) -> None:
    runs = rec.json(GPUS[0])["runs"]
    for name in ("warm_2gpu", "cold_2gpu"):
        gpus = runs[name]["gpus"]
        expect(gpus["calibration"]["agree"], f"{name}: the GPUs did not agree on the reference row")
        lanes = gpus["lanes"]
        expect(sorted(lanes) == ["0", "1"] and all(lanes.values()), f"{name}: lanes {lanes}")
        in_lanes = sorted({b for lane in lanes.values() for b in lane})  # a split backend: in several lanes
        expect(in_lanes == sorted(runs[name]["phases"]["backends"]), f"{name}: lanes {in_lanes} are not the backends run")
    lane_of = _lane_of(runs["warm_2gpu"]["gpus"])
    rows = _gpu_rows(runs["warm_2gpu"])
    expect(rows and all(r["gpu"] == lane_of.get(key[:2], lane_of.get(key[0])) for key, r in rows.items()),
           "a row timed off its lane's GPU")
    expect({r["gpu"] for r in rows.values()} == {"0", "1"}, "not both GPUs timed rows")


@claim("docs/tune.md 'lane per GPU': rows timed on the second GPU match the one-GPU run (geomean within noise, "
       "+-5% on >= 95% of each backend's rows)", *GPUS)
def gpus_second_gpu_matches_one_gpu(rec: Recordings) -> None:
    from attnsel.bench.timing import stats as T
    from attnsel.bench.tools import fidelity

    for name in GPUS:
        runs = rec.json(name)["runs"]
        one, two = _gpu_rows(runs["warm_1gpu"]), _gpu_rows(runs["warm_2gpu"])
        ratios = defaultdict(list)
        for key, row in two.items():
            if key in one:
                ratios[(key[0], row["gpu"])].append(row["median"] / one[key]["median"])
        expect(any(gpu == "1" for _, gpu in ratios), f"{name}: no backend ran on the second GPU")
        for (backend, gpu), values in ratios.items():
            geomean = math.exp(sum(math.log(r) for r in values) / len(values))
            expect(abs(geomean - 1) < T.RELATIVE_NOISE_THRESHOLD, f"{name} {backend} on GPU {gpu}: geomean ratio {geomean:.3f}")
            expect(fidelity.summarize(values)["met"], f"{name} {backend} on GPU {gpu}: fewer than 95% within +-5%")


@claim("docs/tune.md 'lane per GPU': one GPU or two, the advice is the same (keep vLLM's default)", GPUS[0])
def gpus_advice_is_the_same(rec: Recordings) -> None:
    runs = rec.json(GPUS[0])["runs"]
    overall = {name: run["overall"] for name, run in runs.items()}
    expect({o["advised_flags"] for o in overall.values()} == {None}, "a run advised flags")
    one, two = overall["warm_1gpu"], overall["warm_2gpu"]
    expect(one["verdict"] == two["verdict"], f"verdicts {one['verdict']} / {two['verdict']}")
    expect(one["best"] == two["best"] or one["best"] in two["equally_good"], "the one-GPU best is not among the two-GPU best")


@claim("docs/tune-performance.md: the 2 x H200 wall times, phases accounting for them, repeat_ms never lowered", *GPUS)
def gpus_wall_times_are_accounted_and_quoted(rec: Recordings) -> None:
    doc_text = TUNE_PERF.read_text()
    for name in GPUS:
        for run_name, run in rec.json(name)["runs"].items():
            which, phases = f"{name} {run_name}", run["phases"]
            expect(run["options"]["repeat_ms"] == 50.0, f"{which}: repeat_ms {run['options']['repeat_ms']}")
            walls = [b["wall_s"] for b in phases["backends"].values()]
            if run["options"]["gpus"] is None:  # one lane: the backends run one after another
                parts = phases["probe_s"] + phases["other_s"] + sum(walls)
                expect(abs(parts - phases["total_s"]) <= 0.02 * phases["total_s"], f"{which}: phases {parts:.1f} s")
            else:  # lanes overlap: the total is at least the longest lane and below the sum
                longest = max(_lane_wall(phases, gpu, lane) for gpu, lane in run["gpus"]["lanes"].items())
                expect(longest <= phases["total_s"] < sum(walls), f"{which}: total {phases['total_s']:.1f} s vs lanes")
            expect(f"{phases['total_s']:.1f} s" in doc_text, f"{which}: docs/tune-performance.md does not quote {phases['total_s']:.1f} s")


@claim("docs/tune-performance.md: each lane's first worker started during the calibration hides its start", *GPUS)
def gpus_prespawn_hides_the_first_start(rec: Recordings) -> None:
    before, after = rec.json(GPUS[0])["runs"], rec.json(GPUS[1])["runs"]
    phases, old = after["warm_2gpu"]["phases"]["backends"], before["warm_2gpu"]["phases"]["backends"]
    for backends in after["warm_2gpu"]["gpus"]["lanes"].values():
        first = backends[0]
        expect(phases[first]["startup_detail"]["overlapped_s"] > 0 == old[first]["startup_detail"]["overlapped_s"],
               f"{first}: start not overlapped with the calibration")
        expect(phases[first]["startup_s"] < old[first]["startup_s"], f"{first}: start not shorter")
    faster, first = _two_gpu_speedup(after), _two_gpu_speedup(before)
    expect(faster > first, f"2-GPU speedup {faster:.2f} not above the first host's {first:.2f}")


def _lane_of(gpus: dict) -> dict:
    """backend -> GPU, and (backend, block size) -> GPU where the run says (`lane_block_sizes`)."""
    out: dict = {b: gpu for gpu, backends in gpus["lanes"].items() for b in backends}
    out.update({(b, bs): gpu for gpu, parts in (gpus.get("lane_block_sizes") or {}).items()
                for b, sizes in parts.items() for bs in sizes})
    return out


def _lane_wall(phases: dict, gpu: str, backends: list[str]) -> float:
    """A lane's elapsed time: its backends' walls, or its part's of a backend split over lanes."""
    total = 0.0
    for b in backends:
        entry = phases["backends"][b]
        total += next((p["wall_s"] for p in entry.get("parts") or () if p["gpu"] == gpu), entry["wall_s"])
    return total


def _two_gpu_speedup(runs: dict) -> float:
    return runs["warm_1gpu"]["phases"]["total_s"] / runs["warm_2gpu"]["phases"]["total_s"]


SPARSE_026 = tuple(f"tune/h100_vllm026_sparse_tp{tp}/tune.json" for tp in (8, 4, 2, 1))


@claim("docs/evidence.md 'vLLM 0.26.0 on the H100': DeepSeek-V3.2's sparse MLA at the per-GPU heads of TP 8, 4, 2 "
       "and 1: vLLM's default FLASH_ATTN_MLA_SPARSE is faster than FLASHMLA_SPARSE overall at every head count",
       *SPARSE_026)
def tune_sparse_mla_default_wins_at_every_tp(rec: Recordings) -> None:
    for name, heads in zip(SPARSE_026, (16, 32, 64, 128)):
        doc = rec.json(name)
        expect(doc["plan"]["shape"]["num_q_heads"] == heads and doc["plan"]["shape"]["use_sparse"], f"{name}: not {heads} sparse heads")
        rec_ = doc["recommendation"]
        expect(rec_["vllm_default"]["backend"] == "FLASH_ATTN_MLA_SPARSE", f"{name}: default {rec_['vllm_default']}")
        expect(rec_["overall"]["verdict"] == "default is fastest", f"{name}: verdict {rec_['overall']['verdict']!r}")
        timed = {r["backend"] for r in doc["rows"] if r["status"] == "ok"}
        expect(timed == {"FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"}, f"{name}: timed {sorted(timed)}")
