"""Bad-input corpus, part 5 (issue 33, "a contract a CI can trust"): the exit code follows the verdict in
every command, vLLM's own spellings of its flags are taken as vLLM takes them (and refused where vLLM
refuses them), --vllm-version is a version or a name, and `report` refuses damaged results. Each case
is classified as a user would see it (tests/hostile.py `classify`): OK, traceback, hang, wrong code,
silent acceptance or unclear; only OK passes. `python tests/test_hostile_contract.py` prints the totals
by class (run it with another checkout's attnsel on PYTHONPATH to compare)."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile import CATALOG, FIXTURES, Case, classify, invoke  # noqa: E402

LLAMA = ["--model", "llama-3.1-8b", "--gpu", "H100"]
EXPLAIN = ["explain", *LLAMA]
PREFLIGHT = ["preflight", *LLAMA]
VERIFY_RUN = FIXTURES / "verify" / "h100_llama8b"
TUNE_RUN = FIXTURES / "report" / "h200_llama8b_synthetic"
TMP = "{tmp}"  # the folder materialize() fills, put into a case's args when it runs


def _json_agrees(case_id: str) -> bool:
    return "--json" in case_id


# --- 1. the exit code follows the verdict (explain's memory plan, preflight --strict) -------------
VERDICT_CASES = [
    Case("explain:memory-util-0.05", [*EXPLAIN, "--gpu-memory-utilization", "0.05"], 1, "No available memory for the cache blocks"),
    Case("explain:memory-util-0.05 --json", [*EXPLAIN, "--gpu-memory-utilization", "0.05", "--json"], 1, "No available memory"),
    # vLLM refuses it while building its config (config/model.py _get_and_verify_max_len), before any KV check
    Case("explain:max-model-len-999999999", [*EXPLAIN, "--max-model-len", "999999999"], 1,
         "User-specified max_model_len (999999999) is greater than the derived max_model_len"),
    Case("explain:max-model-len-999999999 --json", [*EXPLAIN, "--max-model-len", "999999999", "--json"], 1,
         "is greater than the derived max_model_len"),
    Case("explain:deepseek-v3-one-H100", ["explain", "--model", "deepseek-v3", "--gpu", "H100"], 1, "CUDA out of memory"),
    Case("explain:deepseek-v3-one-H100 --json", ["explain", "--model", "deepseek-v3", "--gpu", "H100", "--json"], 1,
         "torch.OutOfMemoryError"),
    Case("explain:deepseek-v3-one-L4", ["explain", "--model", "deepseek-v3", "--gpu", "L4"], 1, "CUDA out of memory"),
    Case("explain:mixtral-like-one-H100 --json", ["explain", "--model", f"{TMP}/mixtral.json", "--gpu", "H100", "--json"],
         1, "CUDA out of memory"),
    Case("explain:deepseek-v3-tp8-B200 --json", ["explain", "--model", "deepseek-v3", "--gpu", "B200", "-tp", "8", "--json"], 0),
    Case("preflight:deepseek-v3-one-H100", ["preflight", "--model", "deepseek-v3", "--gpu", "H100"], 1, "memory"),
    Case("preflight:strict-warning", [*PREFLIGHT, "--num-gpus", "2", "-tp", "2", "--strict"], 1, "--strict"),
    Case("preflight:strict-warning --json", [*PREFLIGHT, "--num-gpus", "2", "-tp", "2", "--strict", "--json"], 1, "--strict"),
    Case("preflight:warning-without-strict", [*PREFLIGHT, "--num-gpus", "2", "-tp", "2"], 0),
]

# --- 3. vLLM's own spellings ------------------------------------------------------------------------
SPELLING_CASES = [
    *[Case(f"{cmd}:max-model-len-{value}", [*base, "--max-model-len", value], 0)
      for cmd, base in (("explain", EXPLAIN), ("preflight", PREFLIGHT))
      for value in ("32k", "128K", "25.6k", "auto", "AUTO", "-1", " 4096 ", "1_000")],
    *[Case(f"{cmd}:max-model-len-{(value if len(value) < 20 else f'{len(value)}-chars') or 'empty'}",
           [*base, "--max-model-len", value], 2, fragment)
      for cmd, base in (("explain", EXPLAIN), ("preflight", PREFLIGHT))
      for value, fragment in (("1.5K", "decimals are not allowed with binary suffixes"), ("32kk", "bad --max-model-len"),
                              ("1e3", "bad --max-model-len"), ("", "bad --max-model-len"),
                              ("0", "must be a positive number"), ("-2", "must be a positive number"),
                              ("1" * 400 + "k", "bad --max-model-len"), ("k", "bad --max-model-len"))],
    Case("explain:max-model-len-auto-fits-L4 --json", ["explain", "--model", "llama-3.1-8b", "--gpu", "L4",
                                                        "--max-model-len", "auto", "--json"], 0),
    Case("preflight:max-num-batched-tokens-8k", [*PREFLIGHT, "--max-num-batched-tokens", "8k"], 0),
    Case("preflight:max-num-batched-tokens-8K", [*PREFLIGHT, "--max-num-batched-tokens", "8K"], 0),
    Case("preflight:max-num-batched-tokens-auto", [*PREFLIGHT, "--max-num-batched-tokens", "auto"], 2,
         "bad --max-num-batched-tokens"),
    Case("explain:-dcp", [*EXPLAIN, "-dcp", "2"], 0),
    Case("explain:-pcp-long", [*EXPLAIN, "--prefill-context-parallel-size", "1"], 0),
    Case("preflight:-dcp", [*PREFLIGHT, "-tp", "2", "--num-gpus", "2", "-dcp", "2"], 0),
    Case("preflight:-pcp-0", [*PREFLIGHT, "-pcp", "0"], 2, "--prefill-context-parallel-size must be >= 1"),
    Case("explain:attention-backend-auto", [*EXPLAIN, "--attention-backend", "auto"], 0),
    Case("preflight:attention-backend-auto", [*PREFLIGHT, "--attention-backend", "Auto"], 0),
    Case("explain:-ac-json", [*EXPLAIN, "-ac", '{"backend": "FLASHINFER"}'], 0),
    Case("explain:attention-config-dotted", [*EXPLAIN, "--attention-config.backend", "FLASHINFER"], 0),
    Case("explain:-ac-dotted-equals", [*EXPLAIN, "-ac.backend=TRITON_ATTN"], 0),
    Case("preflight:attention-config-dotted", [*PREFLIGHT, "--attention-config.backend", "FLASHINFER"], 0),
    Case("preflight:-ac-unmodelled-key", [*PREFLIGHT, "-ac", '{"backend": "FLASHINFER", "use_cudnn_prefill": true}'], 0),
    Case("explain:-ac-not-json", [*EXPLAIN, "-ac", "{backend: x}"], 2, "bad --attention-config"),
    Case("explain:-ac-list", [*EXPLAIN, "-ac", "[1]"], 2, "a JSON object"),
    Case("explain:-ac-unknown-backend", [*EXPLAIN, "-ac", '{"backend": "NOPE"}'], 2, "Unknown attention backend"),
    Case("explain:both-backends", [*EXPLAIN, "--attention-backend", "FLASH_ATTN", "-ac.backend", "FLASHINFER"], 1,
         "mutually exclusive"),
    Case("explain:dotted-without-value", [*EXPLAIN, "--attention-config.backend"], 2, "needs a value"),
    Case("explain:-ac-5000-digit-number", [*EXPLAIN, "-ac", '{"x": ' + "1" * 5000 + "}"], 2, "bad --attention-config"),
    Case("explain:-ac-nested-100000", [*EXPLAIN, "-ac", "[" * 100_000], 2, "nested too deeply"),
    Case("explain:-ac-backend-number", [*EXPLAIN, "-ac", '{"backend": 3}'], 2, "a backend name"),
    Case("explain:ac-fa-version-contradiction", [*EXPLAIN, "-ac", '{"flash_attn_version": 2}', "--flash-attn-version", "3"],
         2, "contradict"),
]

# --- 4. --vllm-version: a version or a name, never a prefix ------------------------------------------
VERSION_CASES = [
    *[Case(f"explain:vllm-version-{value}", ["explain", "--gpu", "H100", "--vllm-version", value], 2, "is not a vLLM version")
      for value in ("0.33abc", "0.33;rm", "0x21", "1e3", "0.33.0.0.1", "0.33-1", "0.33.")],
    *[Case(f"preflight:vllm-version-{value}", [*PREFLIGHT, "--vllm-version", value], 2, "is not a vLLM version")
      for value in ("0.33abc", "1e3")],
    *[Case(f"explain:vllm-version-{value}", ["explain", "--gpu", "H100", "--vllm-version", value], 0)
      for value in ("0.33", "0.33.0", "v0.33.0", "0.34.0rc1", "0.19.1rc1.dev5+g1234", "0.33.0.post1", "vllm_0_33", "seed")],
]

# --- 5. report: damaged results, output targets ------------------------------------------------------
REPORT_CASES = [
    Case("report:verify-NaN", ["report", f"{TMP}/v_nan.json"], 2, "median must be a finite number above 0"),
    Case("report:verify-Infinity", ["report", f"{TMP}/v_inf.json"], 2, "margin_pct must be a finite number"),
    Case("report:verify-NaN-untyped-field", ["report", f"{TMP}/v_nan_untyped.json"], 2, "no JSON number (RFC 8259)"),
    Case("report:verify-negative-median", ["report", f"{TMP}/v_neg.json"], 2, "must be a finite number above 0"),
    Case("report:verify-status-banana", ["report", f"{TMP}/v_banana.json"], 2, "status must be one of"),
    Case("report:verify-shape-status-banana", ["report", f"{TMP}/v_shape_banana.json"], 2, "status must be one of"),
    Case("report:tune-401-digit-median", ["report", f"{TMP}/t_401.json"], 2, "must be a finite number above 0"),
    Case("report:tune-NaN-median", ["report", f"{TMP}/t_nan.json"], 2, "median_ms must be a finite number above 0"),
    Case("report:tune-advice-without-timed-row", ["report", f"{TMP}/t_notimed.json"], 2, "no row was timed"),
    Case("report:-o-missing-folder", ["report", str(VERIFY_RUN), "-o", f"{TMP}/missing/dir/x.md"], 2, "does not exist"),
]

# --- 6. a pasted `vllm serve` line after `--` ----------------------------------------------------------
SERVE = ["--", "vllm", "serve"]
SERVE_LINE_CASES = [
    Case("preflight:serve-line", ["preflight", "--gpu", "H100", "--num-gpus", "2", *SERVE, "llama-3.1-8b", "-tp", "2"], 0),
    # attnsel's own --num-gpus inside the line: vLLM's `vllm serve` has no such flag (argparse refuses it)
    Case("preflight:serve-line-attnsel-flag-inside", ["preflight", "--gpu", "H100", *SERVE, "llama-3.1-8b", "-tp", "2",
                                                      "--num-gpus", "2"], 2, "unrecognized arguments: --num-gpus"),
    Case("explain:serve-line-flag-of-a-later-release", ["explain", "--gpu", "H100", "--vllm-version", "0.33", *SERVE,
                                                        "llama-3.1-8b", "--enable-extensible-kv-cache"], 2,
         "vLLM 0.33.0's `vllm serve` would refuse the pasted line"),
    Case("explain:serve-line-abbreviation", ["explain", "--gpu", "H100", *SERVE, "llama-3.1-8b", "--max-model", "8192"], 0),
    Case("preflight:serve-line-unknown-flags --strict", ["preflight", "--gpu", "H100", "--strict", "--json", *SERVE,
                                                         "llama-3.1-8b", "--port", "8000", "--enable-chunked-prefill"], 0),
    Case("preflight:serve-line-q-is-quantization", ["preflight", "--gpu", "H100", *SERVE, "llama-3.1-8b", "-q", "fp8"], 0),
    Case("explain:serve-line-refused --json", ["explain", "--gpu", "H100", "--json", *SERVE, "deepseek-v3"], 1, "CUDA out of memory"),
    Case("explain:serve-line-tp-pp-fits --json", ["explain", "--gpu", "H100", "--json", *SERVE, "deepseek-v3", "-tp", "8",
                                                   "-pp", "2"], 0),
    Case("preflight:serve-line-two-models", ["preflight", "--gpu", "H100", *SERVE, "llama-3.1-8b", "qwen3-8b"], 2,
         "names two models"),
    Case("preflight:serve-line-contradiction", ["preflight", "--gpu", "H100", "-tp", "1", *SERVE, "llama-3.1-8b",
                                                "--tensor-parallel-size", "2"], 2, "contradict each other"),
    Case("preflight:serve-line-value-missing", ["preflight", "--gpu", "H100", *SERVE, "llama-3.1-8b", "--block-size"], 2,
         "needs a value"),
    Case("explain:serve-line-bad-len", ["explain", "--gpu", "H100", *SERVE, "llama-3.1-8b", "--max-model-len", "32kk"], 2,
         "bad --max-model-len"),
    Case("preflight:serve-line-no-model", ["preflight", "--gpu", "H100", *SERVE, "--port", "1"], 2, "names no model"),
    Case("preflight:serve-line-model-after-flags", ["preflight", "--gpu", "H100", "--json", *SERVE, "--port", "8000",
                                                    "llama-3.1-8b"], 0),
]

CASES = [*VERDICT_CASES, *SPELLING_CASES, *VERSION_CASES, *REPORT_CASES, *SERVE_LINE_CASES]


def materialize(folder: Path) -> None:
    """The damaged files and the Mixtral-like config the cases name."""
    verify = json.loads((VERIFY_RUN / "verify.json").read_text())
    tune = json.loads((TUNE_RUN / "tune.json").read_text())
    timed = next(i for i, row in enumerate(tune["rows"]) if row.get("timing"))

    def damaged(name: str, doc: dict, change) -> None:
        doc = copy.deepcopy(doc)
        change(doc)
        (folder / name).write_text(json.dumps(doc))  # Python writes NaN / Infinity where asked

    figure = lambda d: d["candidates"][0]["shapes"][0]["figures"]["decode_step_ms"]  # noqa: E731
    damaged("v_nan.json", verify, lambda d: figure(d).update(median=math.nan))
    damaged("v_inf.json", verify, lambda d: d["comparisons"][0]["decode"].update(margin_pct=math.inf))
    damaged("v_neg.json", verify, lambda d: figure(d).update(median=-3.0))
    damaged("v_nan_untyped.json", verify, lambda d: d.update(elapsed_s=math.nan, my_note={"x": [math.inf]}))
    damaged("v_banana.json", verify, lambda d: d["candidates"][0].update(status="banana"))
    damaged("v_shape_banana.json", verify, lambda d: d["candidates"][0]["shapes"][0].update(status="banana"))
    damaged("t_nan.json", tune, lambda d: d["rows"][timed]["timing"].update(median_ms=math.nan))
    damaged("t_401.json", tune, lambda d: d["rows"][timed]["timing"].update(median_ms=10**400))
    damaged("t_notimed.json", tune, lambda d: d.update(rows=[r for r in d["rows"] if r.get("status") != "ok"]))
    mistral = json.loads((CATALOG / "mistral-7b-v0.3.json").read_text())
    mistral.pop("_attnsel_source", None)
    mistral.update(model_type="mixtral", architectures=["MixtralForCausalLM"], num_local_experts=8,
                   num_experts_per_tok=2, intermediate_size=14336)
    (folder / "mixtral.json").write_text(json.dumps(mistral))


def run_case(case: Case, folder: Path) -> str:
    """The case's class; where the command printed JSON, its exit_code must be the process's."""
    args = [arg.replace(TMP, str(folder)) for arg in case.args]
    result, elapsed = invoke(args, case.env, case.stdin)
    verdict = classify(result, elapsed, case.exit_code, case.fragment)
    if verdict == "OK" and _json_agrees(case.id) and result.stdout.strip():
        doc = json.loads(result.stdout)
        if doc.get("exit_code", result.exit_code) != result.exit_code:
            return "wrong code"
        if "error" in doc and (doc["error"] is None) != (result.exit_code == 0):
            return "wrong code"
    if verdict == "OK" and "missing" in str(args) and (folder / "missing").exists():
        return "silent acceptance"  # the folder was made
    return verdict


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    made = tmp_path_factory.mktemp("contract")
    materialize(made)
    return made


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_contract(case: Case, folder: Path):
    assert run_case(case, folder) == "OK"


# --- the process itself: stderr that cannot be written, Python's warnings, RFC 8259 JSON -------------
def _attnsel(*args: str, stderr=subprocess.PIPE, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "NO_COLOR": "1", **(env or {})}
    environment.pop("ATTNSEL_NVML_SCENARIO", None)
    return subprocess.run([sys.executable, "-m", "attnsel", *args], stdout=subprocess.PIPE, stderr=stderr,
                          env=environment, timeout=60, text=True)


PROCESS_CASES = [  # (id, args, the exit code with stderr on /dev/full)
    ("report-written", ["report", str(VERIFY_RUN), "-o", "{out}"], 0),
    ("explain-bad-version", ["explain", "--gpu", "H100", "--vllm-version", "0.33abc"], 2),
    ("explain-refused", ["explain", "--model", "deepseek-v3", "--gpu", "H100"], 1),
    ("preflight-verbose", ["-v", "preflight", "--model", "llama-3.1-8b", "--gpu", "H100"], 0),
]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("case_id,args,code", PROCESS_CASES, ids=[c[0] for c in PROCESS_CASES])
def test_a_stderr_that_cannot_be_written_changes_no_exit_code(case_id, args, code, tmp_path):
    with open("/dev/full", "w") as full:
        done = _attnsel(*[a.replace("{out}", str(tmp_path / "r.md")) for a in args], stderr=full)
    assert done.returncode == code


WARNS_DURING_A_COMMAND = """
import sys, warnings
import attnsel.attention.versions.choice as choice
from attnsel.cli.app import main
real = choice.select_profile
def select_profile(*args, **kwargs):  # a library warning while the command runs
    warnings.warn("a library says something", FutureWarning)
    return real(*args, **kwargs)
choice.select_profile = select_profile
import attnsel.attention.versions as door
door.select_profile = select_profile
sys.argv = ["attnsel", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("args,code", [(("explain", "--gpu", "H100"), 0),
                                       (("explain", "--gpu", "H100", "--vllm-version", "0.33abc"), 2)])
def test_python_warnings_never_reach_stderr(args, code):
    environment = {**os.environ, "NO_COLOR": "1", "PYTHONWARNINGS": "always"}
    environment.pop("ATTNSEL_NVML_SCENARIO", None)
    done = subprocess.run([sys.executable, "-c", WARNS_DURING_A_COMMAND, *args], capture_output=True, text=True,
                          env=environment, timeout=60)
    assert done.returncode == code, done.stderr
    assert "FutureWarning" not in done.stderr and "a library says" not in done.stderr, done.stderr
    debug = subprocess.run([sys.executable, "-c", WARNS_DURING_A_COMMAND, *args], capture_output=True, text=True,
                           env={**environment, "ATTNSEL_DEBUG": "1"}, timeout=60)
    assert "debug: FutureWarning: a library says something" in debug.stderr  # asked for: one line each


def test_json_output_is_rfc_8259(folder):
    # a document whose values are not all finite is still JSON (null), never Python's NaN
    from attnsel.cli.streams import json_document

    text = json_document({"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf}})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    result, _ = invoke(["report", str(VERIFY_RUN), "--json"])
    assert result.exit_code == 0
    json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in report --json"))


def totals(folder: Path) -> Counter:
    return Counter(run_case(case, folder) for case in CASES)


if __name__ == "__main__":  # the totals by class, for this checkout or another one's attnsel (PYTHONPATH)
    from hostile import print_totals

    print_totals(CASES, materialize, run_case, sys.argv)


def test_documents_on_disk_are_rfc_8259_too(tmp_path):
    # results.jsonl (and tune.json, verify.json: the same writer, files.py json_text): a NaN that reached a
    # row is written as null, which `report` reads as "not measured", never as Python's NaN it refuses
    from attnsel.bench.sweep.results import ResultsWriter

    writer = ResultsWriter(tmp_path / "results.jsonl")
    writer.write({"key": "k", "timing": {"median_ms": math.nan, "p20_ms": 1.0}})
    writer.close()
    line = (tmp_path / "results.jsonl").read_text().strip()
    assert json.loads(line, parse_constant=lambda c: pytest.fail(c)) == {"key": "k", "timing": {"median_ms": None,
                                                                                              "p20_ms": 1.0}}
