"""`attnsel tune` from the command line: --dry-run without a GPU (text and --json), bad input as
one line with exit 2, and a full sweep with fake adapters (ATTNSEL_TUNE_TOOLKIT) producing the
results folder, the recommendation and --json (issue "attnsel tune")."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.attention.versions import get_profile, release_profiles
from attnsel.cli.app import app

FIXTURES = Path(__file__).parent / "fixtures" / "tune"
FAKE = f"{FIXTURES / 'fake_toolkit.py'}:FakeToolkit"
SHAPE = ["--head-size", "128", "--num-heads", "32", "--num-kv-heads", "8", "--dtype", "bf16"]


# tune answers for the newest release here (no vLLM installed): vLLM's own block size is its default
# (16 up to 0.33, 64 from 0.34: config/cache.py DEFAULT_BLOCK_SIZE)
DEFAULT_BLOCK = get_profile(release_profiles()[-1]).params["default_block_size"]


def invoke(args, env=None):
    return CliRunner().invoke(app, ["tune", *args], env=env)


def test_dry_run_json_lists_the_filtered_grid_without_a_gpu():
    result = invoke([*SHAPE, "--block-sizes", "8,16,128", "--gpu", "H100", "--dry-run", "--json", "--vllm-version", "0.17"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "attnsel-tune-plan/1"
    assert doc["rule_profile"] == "vllm_0_17"
    configs = {(c["backend"], c["block_size"]): c for c in doc["configs"]}
    # docs/vllm-rules.md §2/§3a: 8 is not a multiple of FLASH_ATTN's 16; FLEX_ATTENTION (MultipleOf(1)) accepts it in the seed
    # (0.33 raised FLEX_ATTENTION to MultipleOf(16), §9)
    assert configs[("FLASH_ATTN", 8)]["status"] == "skipped"
    assert configs[("FLASH_ATTN", 8)]["reasons"] == ["block_size not supported"]
    assert configs[("FLEX_ATTENTION", 8)]["status"] == "planned"
    assert configs[("FLASHINFER", 128)]["kernel_block_size"] == 64
    assert doc["vllm_default"] == {"backend": "FLASH_ATTN", "block_size": 16, "error": None}
    assert doc["timed_rows"] == sum(c["status"] == "planned" for c in doc["configs"]) * len(doc["workloads"])


def test_dry_run_text_shows_skip_reasons():
    result = invoke(["--head-size", "72", "--num-heads", "16", "--capability", "9.0", "--dry-run", "--quick"])
    assert result.exit_code == 0, result.output
    assert "head_size not supported" in result.stdout  # FlashInfer: 64/128/256 only (docs/vllm-rules.md §3a)
    assert f"vLLM's default here: FLASH_ATTN with block size {DEFAULT_BLOCK}" in result.stdout


@pytest.mark.parametrize("head_size, heads", [(128, (32, 8)), (256, (16, 8)), (96, (32, 32)), (72, (32, 8))])
def test_head_size_alone_tunes_a_named_representative_layout(head_size, heads):
    # `attnsel tune --head-size 128 --dtype bf16`, exactly as the product description types it
    result = invoke(["--head-size", str(head_size), "--dtype", "bf16", "--dry-run", "--gpu", "H100", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["shape"]["num_q_heads"], doc["shape"]["num_kv_heads"]) == heads
    assert any(f"assumed {heads[0]} query / {heads[1]} KV heads" in n for n in doc["notes"])
    text = invoke(["--head-size", str(head_size), "--dtype", "bf16", "--dry-run", "--gpu", "H100"]).stdout
    assert f"assumed {heads[0]} query / {heads[1]} KV heads" in text and "--num-heads" in text


def test_default_layout_scales_with_tensor_parallelism():
    result = invoke(["--head-size", "128", "--dtype", "bf16", "-tp", "2", "--dry-run", "--gpu", "H100", "--json"])
    doc = json.loads(result.stdout)
    assert (doc["shape"]["num_q_heads"], doc["shape"]["num_kv_heads"]) == (32, 8)  # per GPU, as assumed


@pytest.mark.parametrize("args, fragment", [
    (["--dtype", "bf16", "--dry-run", "--gpu", "H100"], "--head-size"),
    ([*SHAPE, "--block-sizes", "16,abc", "--dry-run", "--gpu", "H100"], "--block-sizes"),
    ([*SHAPE, "--workload", "train", "--dry-run", "--gpu", "H100"], "--workload"),
    ([*SHAPE, "--weights", "decode=x", "--dry-run", "--gpu", "H100"], "--weights"),
    ([*SHAPE, "--quick", "--full", "--dry-run", "--gpu", "H100"], "--quick"),
    ([*SHAPE, "--resume"], "--output"),
    ([*SHAPE, "--dry-run", "--gpu", "NoSuchGPU"], "unknown GPU"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    result = invoke(args)
    assert result.exit_code == 2
    assert fragment in result.output
    assert "Traceback" not in result.output


def _sweep_env(tmp_path, scenario):
    return {"ATTNSEL_TUNE_TOOLKIT": FAKE, "ATTNSEL_FAKE_TUNE_SCENARIO": json.dumps(scenario),
            "ATTNSEL_NVML_SCENARIO": str(FIXTURES / "nvml_h200.json")}


def test_full_sweep_with_fake_kernels_recommends_and_keeps_every_row(tmp_path, monkeypatch):
    scenario = {"FLASH_ATTN": {"*": "ok:0.30"}, "FLASHINFER": {"*": "ok:0.20", "32": "wrong"},
                "TRITON_ATTN": {"*": "raise"}, "FLEX_ATTENTION": {"*": "unavailable"}}
    for k, v in _sweep_env(tmp_path, scenario).items():
        monkeypatch.setenv(k, v)  # the worker processes inherit these
    out = tmp_path / "tune"
    result = invoke([*SHAPE, "--quick", "--workload", "decode", "--block-sizes", f"{DEFAULT_BLOCK},32", "--output", str(out),
                     "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "attnsel-tune/1"
    assert len(doc["rows"]) == 4 * 2 * 3  # backends x block sizes x quick decode shapes
    rec = doc["recommendation"]
    decode = rec["workloads"]["decode"]
    assert (decode["best"]["backend"], decode["best"]["block_size"]) == ("FLASHINFER", DEFAULT_BLOCK)
    assert decode["flags"] == f"--attention-backend FLASHINFER --block-size {DEFAULT_BLOCK}"
    assert decode["above_noise"] and decode["margin_pct"] == pytest.approx(50.0, abs=1)
    assert [(d["backend"], d["block_size"]) for d in rec["disqualified"]] == [("FLASHINFER", 32)]
    # % of peak uses the NVML peak of the scenario (4.81 TB/s)
    ok = next(r for r in doc["rows"] if r["status"] == "ok")
    assert ok["pct_of_peak_bandwidth"] == pytest.approx(100 * ok["bandwidth_bytes_per_s"] / (6016 / 8 * 3201e6 * 2))
    assert doc["environment"]["clocks"]["before"]["sm_clock_mhz"] == 1980
    for name in ("results.jsonl", "tune.json", "summary.txt", "results.csv"):
        assert (out / name).exists()
    import csv

    flat = list(csv.DictReader((out / "results.csv").open()))
    assert len(flat) == len(doc["rows"]) and flat[0]["gpu"] == "NVIDIA H200"
    assert "FLASHINFER" in (out / "summary.txt").read_text()


def test_text_output_names_the_flags_and_an_existing_results_folder_needs_resume(tmp_path, monkeypatch):
    for k, v in _sweep_env(tmp_path, {"FLASH_ATTN": {"*": "ok:0.2"}, "FLASHINFER": {"*": "ok:0.4"}}).items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "tune"
    args = [*SHAPE, "--quick", "--workload", "decode", "--backends", "FLASH_ATTN,FLASHINFER", "--block-sizes",
            str(DEFAULT_BLOCK), "--output", str(out)]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert f"vLLM's default (FLASH_ATTN with --block-size {DEFAULT_BLOCK}) is the fastest measured" in result.stdout
    again = invoke(args)
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = invoke([*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output


def test_nothing_timed_exits_1_but_keeps_the_results(tmp_path, monkeypatch):
    for k, v in _sweep_env(tmp_path, {"FLASH_ATTN": {"*": "raise"}}).items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "tune"
    result = invoke([*SHAPE, "--quick", "--workload", "prefill", "--backends", "FLASH_ATTN", "--block-sizes", "16",
                     "--output", str(out)])
    assert result.exit_code == 1
    assert "no backend could be timed" in result.output
    rows = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert rows and rows[0]["status"] == "error"


def test_the_parent_process_never_imports_torch(tmp_path):
    """Kernels run in workers; the parent must survive them and stay light (brief: torch lazily)."""
    import subprocess
    import sys

    code = (
        "import sys, os\n"
        "from typer.testing import CliRunner\n"
        "from attnsel.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['tune', *{SHAPE!r}, '--quick', '--backends', 'FLASH_ATTN', '--block-sizes', '16',"
        f" '--workload', 'decode', '--output', {str(tmp_path / 'o')!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'torch' not in sys.modules, 'parent imported torch'\n"
    )
    env = {**__import__("os").environ, "ATTNSEL_TUNE_TOOLKIT": FAKE,
           "ATTNSEL_FAKE_TUNE_SCENARIO": json.dumps({"FLASH_ATTN": {"*": "ok:0.1"}}),
           "ATTNSEL_NVML_SCENARIO": str(FIXTURES / "nvml_h200.json")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_tune_json_and_summary_say_where_the_time_went(tmp_path, monkeypatch):
    """docs/tune-performance.md: phases per backend, one line in summary.txt; NVML answered, so no probe worker."""
    for k, v in _sweep_env(tmp_path, {"FLASH_ATTN": {"*": "ok:0.2", "sleep": 0.1}, "FLASHINFER": {"*": "ok:0.4"}}).items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "tune"
    result = invoke([*SHAPE, "--quick", "--workload", "decode", "--backends", "FLASH_ATTN,FLASHINFER",
                     "--block-sizes", "16", "--output", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "tune.json").read_text())
    phases = doc["phases"]
    assert phases["probe_source"] == "nvml"
    assert set(phases["backends"]) == {"FLASH_ATTN", "FLASHINFER"}
    assert phases["backends"]["FLASH_ATTN"]["timing_s"] >= 0.1 * 3  # 3 quick decode shapes
    assert sum(b["wall_s"] for b in phases["backends"].values()) <= phases["total_s"]
    assert doc["environment"]["device"]["l2_cache_bytes"] == 50 * 2**20  # from the first worker's "ready"
    assert all(isinstance(r.get("row_wall_s"), float) for r in doc["rows"] if r["status"] == "ok")
    summary = (out / "summary.txt").read_text()
    line = next(l for l in summary.splitlines() if l.startswith("time: "))
    assert "FLASH_ATTN" in line and "setup/JIT" in line and "probe 0.0 (nvml)" in line
