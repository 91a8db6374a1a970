"""Bad-input corpus, part 2: flags of every command, report inputs, output targets and NVML faults
(a driver that answers garbage). Same promise as part 1 (tests/hostile.py): the exit code, one
stderr line naming the problem, no traceback, a time limit."""

from __future__ import annotations

import copy
import json
import os

import pytest
from hostile import FIXTURES, Case, assert_promise, invoke

EXPLAIN = ["explain", "--gpu", "H100"]
PREFLIGHT = ["preflight", "--model", "llama-3.1-8b", "--gpu", "H100"]
TUNE = ["tune", "--dry-run", "--gpu", "H100", "--model", "llama-3.1-8b"]
BIG = str(2**64)

FLAG_CASES = [
    # explain
    Case("explain:gpu-substring-H1000", ["explain", "--gpu", "H1000"], 2, "Did you mean H100"),
    Case("explain:gpu-extra-words", ["explain", "--gpu", "a100 nonsense"], 2, "unknown GPU name 'a100 nonsense'"),
    Case("explain:gpu-empty", ["explain", "--gpu", ""], 2, "--gpu is empty"),
    Case("explain:gpu-blank", ["explain", "--gpu", "  "], 2, "--gpu is empty"),
    Case("explain:gpu-10000-chars", ["explain", "--gpu", "x" * 10_000], 2, "unknown GPU name"),
    Case("explain:dtype-empty", [*EXPLAIN, "--dtype", ""], 2, "--dtype is empty"),
    Case("explain:dtype-int3", [*EXPLAIN, "--dtype", "int3"], 2, "Unknown dtype: 'int3'"),
    Case("explain:dtype-typo", [*EXPLAIN, "--dtype", "bfloat"], 2, "Did you mean 'bfloat16'"),
    Case("explain:head-size-zero", [*EXPLAIN, "--head-size", "0"], 2, "--head-size must be >= 1"),
    Case("explain:head-size-negative", [*EXPLAIN, "--head-size", "-128"], 2, "--head-size must be >= 1"),
    Case("explain:head-size-2^64", [*EXPLAIN, "--head-size", BIG], 2, "at most 2147483647"),
    Case("explain:head-size-float", [*EXPLAIN, "--head-size", "1e3"], 2, "Invalid value for '--head-size'"),
    Case("explain:head-size-word", [*EXPLAIN, "--head-size", "abc"], 2, "Invalid value for '--head-size'"),
    Case("explain:num-heads-zero", [*EXPLAIN, "--num-heads", "0"], 2, "--num-heads must be >= 1"),
    Case("explain:num-heads-2^64", [*EXPLAIN, "--num-heads", BIG], 2, "at most 2147483647"),
    Case("explain:heads-32-kv-7", [*EXPLAIN, "--head-size", "128", "--num-heads", "32", "--num-kv-heads", "7"], 2,
         "num_heads (32) is not divisible by num_kv_heads (7)"),
    Case("explain:kv-heads-above-model", [*EXPLAIN, "--num-kv-heads", "64"], 2, "is not divisible by num_kv_heads (64)"),
    Case("explain:block-size-zero", [*EXPLAIN, "--block-size", "0"], 2, "--block-size must be >= 1"),
    Case("explain:block-size-2^64", [*EXPLAIN, "--block-size", BIG], 2, "at most 2147483647"),
    Case("explain:capability-nan", ["explain", "--capability", "nan"], 2, "bad --capability 'nan'"),
    Case("explain:capability-99.99", ["explain", "--capability", "99.99"], 2, "no NVIDIA GPU has compute capability"),
    Case("explain:capability-negative", ["explain", "--capability", "-1.0"], 2, "bad --capability"),
    Case("explain:capability-5000-digits", ["explain", "--capability", "9." + "9" * 5000], 2, "bad --capability"),
    Case("explain:kv-cache-dtype-empty", [*EXPLAIN, "--kv-cache-dtype", ""], 2, "--kv-cache-dtype is empty"),
    Case("explain:kv-cache-dtype-fp9", [*EXPLAIN, "--kv-cache-dtype", "fp9"], 2, "Invalid kv_cache_dtype: fp9"),
    Case("explain:backend-empty", [*EXPLAIN, "--attention-backend", ""], 2, "--attention-backend is empty"),
    Case("explain:backend-prefix", [*EXPLAIN, "--attention-backend", "flash"], 2, "Unknown attention backend"),
    Case("explain:attn-type-empty", [*EXPLAIN, "--attn-type", ""], 2, "unknown --attn-type"),
    Case("explain:tp-2^40", [*EXPLAIN, "-tp", str(2**40)], 2, "at most 1024"),
    Case("explain:tp-zero", [*EXPLAIN, "-tp", "0"], 2, "--tensor-parallel-size must be >= 1"),
    Case("explain:tp-not-dividing", [*EXPLAIN, "--model", "llama-3.1-8b", "-tp", "3"], 1,
         "must be divisible by tensor parallel size (3)"),
    Case("explain:tp-splits-kv-badly", [*EXPLAIN, "--model", "qwen2.5-7b", "-tp", "14"], 1, "KV heads"),
    Case("explain:dcp-2^40", [*EXPLAIN, "--dcp", str(2**40)], 2, "at most 1024"),
    Case("explain:fa-version-99", [*EXPLAIN, "--flash-attn-version", "99"], 2, "flash_attn_version"),
    Case("explain:mm-backend-unknown", [*EXPLAIN, "--mm-encoder-attn-backend", "x"], 2, "Unknown attention backend"),
    Case("explain:vllm-version-empty", [*EXPLAIN, "--vllm-version", ""], 2, "--vllm-version is empty"),
    Case("explain:vllm-version-word", [*EXPLAIN, "--vllm-version", "x"], 2, "no rule profile"),
    Case("explain:vllm-version-5000-digits", [*EXPLAIN, "--vllm-version", "9" * 5000], 2, "(5000 characters)"),
    Case("explain:vllm-version-huge-minor", [*EXPLAIN, "--vllm-version", "0." + "3" * 400], 2, "no rule profile"),
    Case("explain:nope-negative", [*EXPLAIN, "--qk-nope-head-dim", "-5"], 2, "--qk-nope-head-dim must be >= 0"),
    Case("explain:index-topk-negative", [*EXPLAIN, "--index-topk", "-1"], 2, "--index-topk must be >= 1"),
    Case("explain:gpu-all-live", ["explain", "--gpu", "all", "--live"], 2, None),
    Case("explain:unknown-option", ["explain", "--foo"], 2, "No such option: --foo"),
    Case("explain:extra-argument", ["explain", "extra"], 2, "unexpected extra argument"),
    # preflight
    Case("preflight:format-xml-json", [*PREFLIGHT, "--format", "xml", "--json"], 2, "unknown --format 'xml'"),
    Case("preflight:format-github-json", [*PREFLIGHT, "--format", "github", "--json"], 2, "two different outputs"),
    Case("preflight:format-empty", [*PREFLIGHT, "--format", ""], 2, "unknown --format"),
    Case("preflight:tp-2^40", [*PREFLIGHT, "-tp", str(2**40)], 2, "at most 1024"),
    Case("preflight:tp-2000", [*PREFLIGHT, "-tp", "2000"], 2, "at most 1024"),
    Case("preflight:num-gpus-2^40", [*PREFLIGHT, "-tp", "8", "--num-gpus", str(2**40)], 2, "at most 1024"),
    Case("preflight:num-gpus-without-gpu", ["preflight", "--model", "llama-3.1-8b", "--num-gpus", "8"], 2, "--gpu NAME"),
    Case("preflight:dtype-empty", [*PREFLIGHT, "--dtype", ""], 2, "--dtype is empty"),
    Case("preflight:dtype-int3", [*PREFLIGHT, "--dtype", "int3"], 2, "Unknown dtype"),
    Case("preflight:kv-empty", [*PREFLIGHT, "--kv-cache-dtype", ""], 2, "--kv-cache-dtype is empty"),
    Case("preflight:block-size-zero", [*PREFLIGHT, "--block-size", "0"], 2, "--block-size must be >= 1"),
    Case("preflight:gpu-H1000", ["preflight", "--model", "llama-3.1-8b", "--gpu", "H1000"], 2, "Did you mean H100"),
    Case("preflight:tp-too-many-for-machine", ["preflight", "--model", "llama-3.1-8b", "-tp", "8"], 1,
         "gpu-count"),
    Case("preflight:model-missing", ["preflight", "--gpu", "H100"], 2, "Missing option '--model'"),
    # tune
    Case("tune:block-sizes-7", [*TUNE, "--block-sizes", "7"], 1, "vLLM would refuse every backend"),
    Case("tune:block-sizes-empty", [*TUNE, "--block-sizes", ""], 2, "--block-sizes is empty"),
    Case("tune:block-sizes-commas", [*TUNE, "--block-sizes", ",,,"], 2, "--block-sizes must be positive"),
    Case("tune:block-sizes-100000", [*TUNE, "--block-sizes", ",".join(["16"] * 100_000)], 2, "too many values"),
    Case("tune:block-sizes-2^70", [*TUNE, "--block-sizes", str(2**70)], 2, "at most 65536 tokens"),
    Case("tune:block-sizes-5000-digits", [*TUNE, "--block-sizes", "9" * 5000], 2, "--block-sizes"),
    Case("tune:tolerance-nan", [*TUNE, "--tolerance", "nan"], 2, "--tolerance must be a finite number"),
    Case("tune:tolerance-negative", [*TUNE, "--tolerance", "-1"], 2, "--tolerance must be a finite number"),
    Case("tune:tolerance-zero", [*TUNE, "--tolerance", "0"], 2, "--tolerance must be a finite number"),
    Case("tune:timeout-nan", [*TUNE, "--timeout", "nan"], 2, "--timeout must be a finite number"),
    Case("tune:timeout-inf", [*TUNE, "--timeout", "inf"], 2, "--timeout must be a finite number"),
    Case("tune:weights-nan", [*TUNE, "--weights", "decode=nan"], 2, "--weights must be finite"),
    Case("tune:weights-inf", [*TUNE, "--weights", "decode=1e400"], 2, "--weights must be finite"),
    Case("tune:weights-twice", [*TUNE, "--weights", "decode=1,decode=2"], 2, "gives decode twice"),
    Case("tune:workload-empty", [*TUNE, "--workload", ""], 2, "--workload is empty"),
    Case("tune:backends-unknown", [*TUNE, "--backends", "XFORMERS"], 2, "unknown backend"),
    Case("tune:heads-2^70", ["tune", "--dry-run", "--gpu", "H100", "--head-size", "128", "--num-heads", str(2**70)], 2,
         "at most 2147483647"),
    Case("tune:heads-32-kv-7", ["tune", "--dry-run", "--gpu", "H100", "--head-size", "128", "--num-heads", "32",
                                "--num-kv-heads", "7"], 2, "not divisible by num_kv_heads (7)"),
    Case("tune:gpu-H1000", ["tune", "--dry-run", "--gpu", "H1000", "--model", "llama-3.1-8b"], 2, "Did you mean H100"),
    Case("tune:capability-99.9", ["tune", "--dry-run", "--capability", "99.9", "--model", "llama-3.1-8b"], 2,
         "no NVIDIA GPU has"),
    Case("tune:mamba", ["tune", "--dry-run", "--gpu", "H100", "--model", "mamba-130m"], 2, "no attention layers"),
    Case("tune:tp-2^40", [*TUNE, "-tp", str(2**40)], 2, "at most 1024"),
    Case("tune:resume-without-output", ["tune", "--model", "llama-3.1-8b", "--resume"], 2, "--resume needs --output"),
    Case("tune:quick-and-full", [*TUNE, "--quick", "--full"], 2, "exclude each other"),
    Case("tune:gpus-word", [*TUNE, "--gpus", "zz"], 2, "--gpus takes 'all' or CUDA ordinals"),
    Case("tune:gpus-5000-digits", [*TUNE, "--gpus", "9" * 5000], 2, "(5000 characters)"),
    Case("tune:gpus-twice", [*TUNE, "--gpus", "0,0"], 2, "lists a GPU twice"),
    Case("tune:min-gain-nan", [*TUNE, "--min-gain", "nan"], 2, "--min-gain must be a percentage"),
    Case("tune:kv-lora-rank-2^64", ["tune", "--dry-run", "--gpu", "H100", "--model", "deepseek-v3", "--kv-lora-rank",
                                    BIG], 2, "at most 2147483647"),
    Case("tune:qk-nope-negative", [*TUNE, "--qk-nope-head-dim", "-1"], 2, "--qk-nope-head-dim must be >= 0"),
    Case("tune:output-empty", ["tune", "--head-size", "128", "--output", ""], 2, "--output is empty"),
    # verify (no vLLM here: every bad input must be named before the "vLLM is not installed" exit 3)
    Case("verify:nothing", ["verify"], 2, "pass a tune result folder"),
    Case("verify:run-dir-missing", ["verify", "/nowhere/run"], 2, "does not exist"),
    Case("verify:run-dir-device", ["verify", "/dev/null"], 2, "character device"),
    Case("verify:run-dir-a-file", ["verify", "tests/fixtures/report/h200_llama8b_synthetic/tune.json"], 2,
         "is not a folder"),
    Case("verify:timeout-nan", ["verify", "tests/fixtures/report/h200_llama8b_synthetic", "--timeout", "nan"], 2,
         "--timeout must be a finite number"),
    Case("verify:start-timeout-inf", ["verify", "tests/fixtures/report/h200_llama8b_synthetic", "--start-timeout",
                                      "inf"], 2, "--start-timeout must be a finite number"),
    Case("verify:gpu-memory-nan", ["verify", "tests/fixtures/report/h200_llama8b_synthetic",
                                   "--gpu-memory-utilization", "nan"], 2, "--gpu-memory-utilization"),
    Case("verify:repeats-huge", ["verify", "tests/fixtures/report/h200_llama8b_synthetic", "--repeats", BIG], 2,
         "at most 100"),
    Case("verify:decode-steps-one", ["verify", "tests/fixtures/report/h200_llama8b_synthetic", "--decode-steps", "1"],
         2, "--decode-steps must be >= 8"),
    Case("verify:candidates-5000-digits", ["verify", "-o", "/tmp/attnsel-verify-x", "--model", "llama-3.1-8b",
                                           "--candidates", "FLASH_ATTN:" + "9" * 5000], 2, "characters long"),
    Case("verify:candidates-huge-block", ["verify", "-o", "/tmp/attnsel-verify-x", "--model", "llama-3.1-8b",
                                          "--candidates", "FLASH_ATTN:" + "9" * 9], 2, "BACKEND:BLOCK_SIZE"),
    Case("verify:shapes-many", ["verify", "-o", "/tmp/attnsel-verify-x", "--model", "llama-3.1-8b", "--candidates",
                                "FLASH_ATTN:16", "--shapes", ",".join(f"1x{n}" for n in range(1, 100))], 2,
         "too many values"),
    Case("verify:shapes-zero", ["verify", "-o", "/tmp/attnsel-verify-x", "--model", "llama-3.1-8b", "--candidates",
                                "FLASH_ATTN:16", "--shapes", "0x4096"], 2, "BATCHxCONTEXT"),
    Case("verify:output-a-file", ["verify", "-o", "tests/fixtures/report/h200_llama8b_synthetic/tune.json",
                                  "--model", "llama-3.1-8b", "--candidates", "FLASH_ATTN:16"], 2, "is a file"),
    # Ray flags without a cluster
    Case("preflight:pp-2^64", [*PREFLIGHT, "-pp", BIG], 2, "at most 1024"),
    Case("preflight:pp-0", [*PREFLIGHT, "-pp", "0"], 2, "--pipeline-parallel-size must be"),
    Case("preflight:timeout-without-ray", [*PREFLIGHT, "--timeout", "5"], 2, "--timeout is for --ray"),
    Case("probe:ray-timeout-nan", ["probe", "--ray", "127.0.0.1:1", "--timeout", "nan"], 2,
         "--timeout must be more than 0 seconds"),
    Case("probe:ray-timeout-negative", ["probe", "--ray", "127.0.0.1:1", "--timeout", "-1"], 2,
         "--timeout must be more than 0 seconds"),
    # probe and the root command
    Case("probe:require-gpus-zero", ["probe", "--require-gpus", "0"], 2, "--require-gpus"),
    Case("probe:require-capability-nan", ["probe", "--require-capability", "nan"], 2, "bad --require-capability"),
    Case("probe:require-capability-99", ["probe", "--require-capability", "99.0"], 2, "no NVIDIA GPU has"),
    Case("probe:require-gpus-2^70", ["probe", "--require-gpus", str(2**70)], 1, "requirement failed"),
    Case("root:unknown-command", ["nonexistent"], 2, "No such command 'nonexistent'"),
    Case("root:unknown-global-option", ["--frobnicate", "probe"], 2, "No such option"),
]

REPORT = str(FIXTURES / "report" / "h200_llama8b_synthetic")
OUTPUT_CASES = [
    Case("output:report-dev-full", ["report", REPORT, "-o", "/dev/full"], 2, "No space left on device"),
    Case("output:report-folder", ["report", REPORT, "-o", "/tmp"], 2, "Is a directory"),
    Case("output:report-under-a-file", ["report", REPORT, "-o", f"{REPORT}/tune.json/x.md"], 2, "cannot write"),
    Case("output:report-nul", ["report", REPORT, "-o", "out\0.md"], 2, "cannot write"),
    Case("output:report-name-too-long", ["report", REPORT, "-o", "x" * 5000 + ".md"], 2, "cannot write"),
    Case("output:report-empty", ["report", REPORT, "-o", ""], 2, "--output is empty"),
    Case("output:report-format-xml", ["report", REPORT, "--format", "xml"], 2, "unknown --format 'xml'"),
    Case("output:report-json-and-html", ["report", REPORT, "--json", "--format", "html"], 2, "two different outputs"),
    Case("output:tune-output-is-a-file", ["tune", "--head-size", "128", "--num-heads", "8", "--output",
                                          f"{REPORT}/tune.json"], 2, None),
]


@pytest.mark.parametrize("case", FLAG_CASES + OUTPUT_CASES, ids=lambda c: c.id)
def test_bad_flags_and_output_targets(case):
    result, elapsed = invoke(case.args, case.env, case.stdin)
    assert_promise(result, elapsed, case.exit_code, case.fragment)


# ---------------------------------------------------------------------------------------------
# report inputs: a real tune result and explain answer with one field made wrong

TUNE_DOC = json.loads((FIXTURES / "report" / "h200_llama8b_synthetic" / "tune.json").read_text())
EXPLAIN_DOC = json.loads((FIXTURES / "report" / "explain_llama8b_h200.json").read_text())


TIMED = next(i for i, row in enumerate(TUNE_DOC["rows"]) if row.get("timing"))


def _row(**changes):
    return lambda doc: doc["rows"][0].update(changes)


def _timing(**changes):
    return lambda doc: doc["rows"][TIMED]["timing"].update(changes)


REPORT_MUTATIONS = [  # (id, which document, how to damage it, fragment)
    ("row-block_size-string", "tune", _row(block_size="x"), "rows[0].block_size must be a positive whole number"),
    ("row-block_size-zero", "tune", _row(block_size=0), "rows[0].block_size"),
    ("row-backend-number", "tune", _row(backend=5), "rows[0].backend must be a string"),
    ("row-backend-list", "tune", _row(backend=["FLASH_ATTN"]), "rows[0].backend"),
    ("row-status-missing", "tune", lambda d: d["rows"][0].pop("status"), "rows[0].status is missing"),
    ("row-timing-string", "tune", _row(timing="fast"), "rows[0].timing must be an object"),
    ("row-median-string", "tune", _timing(median_ms="fast"), f"rows[{TIMED}].timing.median_ms"),
    ("row-median-infinite", "tune", _timing(median_ms=float("inf")), "must be a finite number"),
    ("row-workload-string", "tune", _row(workload="w"), "rows[0].workload must be an object"),
    ("row-batch-string", "tune", lambda d: d["rows"][0]["workload"].update(batch="4"), "workload.batch"),
    ("row-pct-string", "tune", _row(pct_of_peak_bandwidth="88%"), "pct_of_peak_bandwidth"),
    ("row-not-an-object", "tune", lambda d: d["rows"].__setitem__(0, 5), "rows[0] must be an object"),
    ("rows-ints", "tune", lambda d: d.update(rows=[1, 2]), "rows"),
    ("environment-string", "tune", lambda d: d.update(environment="h200"), "environment must be an object"),
    ("gpu-memory-string", "tune", lambda d: d["environment"]["gpu"].update(memory_total_bytes="141GB"),
     "memory_total_bytes"),
    ("plan-configs-string", "tune", lambda d: d["plan"].update(configs="all"), "plan.configs must be a list"),
    ("recommendation-best-block-string", "tune",
     lambda d: d["recommendation"]["overall"]["best"].update(block_size="x"), "recommendation.overall.best.block_size"),
    ("recommendation-margin-string", "tune", lambda d: d["recommendation"]["overall"].update(margin_pct="27%"),
     "margin_pct"),
    ("warnings-number", "tune", lambda d: d.update(warnings=5), "warnings must be a list"),
    ("explain-backends-number", "explain", lambda d: d.update(backends=5), "backends must be a list"),
    ("explain-backend-name-missing", "explain", lambda d: d["backends"][0].pop("name"), "backends[0].name is missing"),
    ("explain-reasons-string", "explain", lambda d: d["backends"][0].update(reasons="no"), "reasons must be a list"),
    ("explain-valid-string", "explain", lambda d: d["backends"][0].update(valid="yes"), "valid must be true or false"),
    ("explain-inputs-list", "explain", lambda d: d.update(inputs=[1]), "inputs must be an object"),
    ("explain-gpu-string", "explain", lambda d: d.update(gpu="H200"), "gpu must be an object"),
    ("explain-selected-number", "explain", lambda d: d.update(selected=1), "selected must be a string"),
    ("explain-warnings-number", "explain", lambda d: d.update(warnings=3), "warnings must be a list"),
]


@pytest.mark.parametrize("case_id, kind, damage, fragment", REPORT_MUTATIONS, ids=[m[0] for m in REPORT_MUTATIONS])
@pytest.mark.parametrize("fmt", ["md", "html"])
def test_damaged_report_inputs(tmp_path, case_id, kind, damage, fragment, fmt):
    doc = copy.deepcopy(TUNE_DOC if kind == "tune" else EXPLAIN_DOC)
    damage(doc)
    path = tmp_path / f"{case_id}.json"
    path.write_text(json.dumps(doc))
    result, elapsed = invoke(["report", str(path), "--format", fmt])
    assert_promise(result, elapsed, 2, fragment)


def test_garbage_results_rows_are_refused_not_rendered(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    good = json.loads(next(iter((FIXTURES / "report" / "h200_llama8b_synthetic" / "results.jsonl").open())))
    rows = [good, {**good, "key": "k2", "block_size": "x"}, {"backend": [1], "key": "k3"}]
    (folder / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for fmt in ("md", "html", "csv", "json"):
        result, elapsed = invoke(["report", str(folder), "--format", fmt])
        assert_promise(result, elapsed, 2, "row 2: block_size must be a positive whole number")


def test_report_inputs_that_are_not_files_do_not_hang(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    digits = tmp_path / "digits.json"
    digits.write_text('{"backends": [], "selected": null, "inputs": {}, "block_size": ' + "9" * 5000 + "}")
    plan = tmp_path / "plan.json"
    plan.write_text('{"schema": "attnsel-tune-plan/1", "configs": []}')
    for path, fragment in ((fifo, "is empty"), ("/dev/zero", "character device"), ("/dev/null", "character device"),
                           (deep, "deeper than it can be read"), (digits, "JSON cannot read here"),
                           (plan, "--dry-run"), ("x" * 5000, "longer than the file system allows"),
                           (tmp_path / "missing.json", "does not exist")):
        result, elapsed = invoke(["report", str(path)])
        assert_promise(result, elapsed, 2, fragment)


# ---------------------------------------------------------------------------------------------
# NVML faults: a driver answering errors, exceptions and values of the wrong type

BASE_SCENARIO = json.loads((FIXTURES / "probe" / "l40s_x2_pcie.json").read_text())
NVML_FAULTS = [(function, label, answer) for function in (
    "nvmlDeviceGetCount", "nvmlDeviceGetName", "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPciInfo", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetMemoryBusWidth", "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetUUID", "nvmlDeviceGetTopologyCommonAncestor",
) for label, answer in (("gpu-lost", {"nvml_error": "NVML_ERROR_GPU_IS_LOST"}),
                        ("raises", {"exception": "TypeError", "message": "boom"}), ("string", "garbage"),
                        ("list", [1, 2, 3]), ("2^70", 2**70), ("negative", -1))]


@pytest.mark.parametrize("function, label, answer", NVML_FAULTS, ids=[f"{f}:{label}" for f, label, _ in NVML_FAULTS])
def test_nvml_faults_are_reported_not_raised(tmp_path, function, label, answer):
    scenario = copy.deepcopy(BASE_SCENARIO)
    for key in scenario["calls"][function]:
        scenario["calls"][function][key] = answer
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    env = {"ATTNSEL_NVML_SCENARIO": str(path)}
    result, elapsed = invoke(["probe", "--json"], env)
    assert_promise(result, elapsed, 0)
    doc = json.loads(result.stdout)
    # a string is a well-typed answer for a name or a UUID: shown as given, not a fault
    string_is_an_answer = label == "string" and function in ("nvmlDeviceGetName", "nvmlDeviceGetUUID")
    if string_is_an_answer:
        assert "garbage" in json.dumps(doc["gpus"])
    else:
        assert doc["errors"] or doc["warnings"] or doc["source"] != "nvml" or function.endswith(
            ("P2PStatus", "TopologyCommonAncestor")), "the fault must be reported somewhere"
    for args in (["explain", "--head-size", "128"], ["preflight", "--model", "llama-3.1-8b", "-tp", "2"]):
        result, elapsed = invoke(args, env)
        assert_promise(result, elapsed)
        assert result.exit_code in (0, 1)


# a verify.json (written here by `attnsel verify` through the fake engine at our boundary), damaged
VERIFY_DAMAGE = [  # (path to the field, wrong value, fragment)
    (("candidates",), [1], "candidates[0] must be an object"),
    (("candidates", 0, "start_s"), "x", "candidates[0].start_s must be a finite number"),
    (("candidates", 0, "engine"), 5, "candidates[0].engine must be an object"),
    (("candidates", 0, "engine", "num_gpu_blocks"), "x", "num_gpu_blocks"),
    (("candidates", 0, "roles"), "tune-pick", "candidates[0].roles must be a list"),
    (("candidates", 0, "shapes", 0, "figures", "decode_step_ms", "median"), "fast", "decode_step_ms.median"),
    (("comparisons", 0), {"a": 1}, "comparisons[0].batch is missing"),
    (("comparisons", 0, "end_to_end", "margin_pct"), float("inf"), "end_to_end.margin_pct"),
    (("gpu", "memory_total_bytes"), "80GB", "gpu.memory_total_bytes"),
    (("tune", "margin_pct"), "27%", "tune.margin_pct"),
    (("model",), 5, "model must be an object"),
    (("verdict", "verdict"), ["holds"], "verdict.verdict must be a string"),
    (("warnings",), "none", "warnings must be a list"),
    (("options",), None, "options is missing"),
]


def test_damaged_verify_results_are_refused_not_rendered(tune_run_dir, fake_engine, tmp_path):
    from test_verify_cli import QUICK, SCENARIO

    done, _ = invoke(["verify", str(tune_run_dir), *QUICK], fake_engine(SCENARIO))
    assert done.exit_code == 0, done.output
    written = json.loads((tune_run_dir / "verify.json").read_text())
    for where, value, fragment in VERIFY_DAMAGE:
        doc = copy.deepcopy(written)
        target = doc
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = value
        path = tmp_path / "verify.json"
        path.write_text(json.dumps(doc))
        for fmt in ("md", "html", "csv"):
            result, elapsed = invoke(["report", str(path), "--format", fmt])
            try:
                assert_promise(result, elapsed, 2, fragment)
            except AssertionError as exc:
                raise AssertionError(f"{where} = {value!r} ({fmt}): {exc}") from None
