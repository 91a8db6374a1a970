"""explain, preflight and tune --dry-run give the same verdicts for the same request.

All three ask vLLM's selector through attention/selector/request.py `build_selection`, so for one
deployment (model or shape flags, -tp, GPU, vLLM release, hybrid flags) they must name the same
default backend and block size, and accept or refuse each (--attention-backend, --block-size) pair
alike, with the same kernel block size. The grid covers the cases where tune used to build its own
selector inputs and drop facts: sliding-window models, GQA at -tp 1/2/4/8 (KV heads per GPU; fewer
KV heads than GPUs are replicated), a hybrid model with --mamba-cache-mode, MLA and sparse MLA.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

RUNNER = CliRunner()


@dataclass(frozen=True)
class Request:
    """One deployment as all three commands spell it. `shape` flags (no model) skip preflight,
    which takes a model only; so do `hybrid_flags` (preflight has no --mamba-* flags)."""

    label: str
    gpu: str
    vllm_version: str
    backends: tuple[str, ...]
    block_sizes: tuple[int, ...] = (16, 64, 128)
    model: str | None = None
    shape: tuple[str, ...] = ()
    tp: int = 1
    hybrid_flags: tuple[str, ...] = ()

    @property
    def what(self) -> list[str]:
        model = ["--model", self.model] if self.model else []
        return [*model, *self.shape, "-tp", str(self.tp), "--gpu", self.gpu, "--vllm-version", self.vllm_version,
                *self.hybrid_flags]

    @property
    def preflight_too(self) -> bool:
        return self.model is not None and not self.hybrid_flags


DENSE = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
MLA = ("FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA")
GQA_FLAGS = ("--head-size", "128", "--num-heads", "32", "--num-kv-heads", "8")  # Llama-3.1-8B's layout

GRID = [
    # sliding-window layers (gemma-2: head size 256 + window, FA4's local-attention fallback on Blackwell)
    Request("gemma-2-9b B200 0.33", "B200", "0.33", DENSE, model="gemma-2-9b"),
    Request("gemma-2-9b H100 0.24 tp2", "H100", "0.24", DENSE, model="gemma-2-9b", tp=2),
    Request("phi-3-mini-4k B200 0.33", "B200", "0.33", DENSE, model="phi-3-mini-4k"),
    Request("mistral-7b-v0.3 B200 0.33", "B200", "0.33", DENSE, model="mistral-7b-v0.3"),
    Request("gpt-oss-20b B200 0.33 tp2 (sinks + window)", "B200", "0.33", DENSE, model="gpt-oss-20b", tp=2),
    # GQA: KV heads per GPU reach the rules (later FlashInfer: TRT-LLM and big kernel blocks only for GQA)
    *[Request(f"llama-3.1-8b B200 0.33 tp{tp}", "B200", "0.33", DENSE, model="llama-3.1-8b", tp=tp)
      for tp in (1, 2, 4, 8)],
    *[Request(f"GQA flags 32/8 B200 0.33 tp{tp}", "B200", "0.33", DENSE, shape=GQA_FLAGS, tp=tp)
      for tp in (1, 2, 4, 8)],
    Request("qwen3-8b H100 0.24 tp4", "H100", "0.24", DENSE, model="qwen3-8b", tp=4),
    # hybrid attention + Mamba: vLLM aligns the block size to the Mamba state page
    # (--mamba-cache-mode all: Jamba pages of 2048 tokens, align: 80; granite on 0.24: align 400, all 512)
    Request("jamba-v0.1 H100 0.29 --mamba-cache-mode all", "H100", "0.29", ("FLASH_ATTN", "TRITON_ATTN"),
            model="jamba-v0.1", hybrid_flags=("--mamba-cache-mode", "all")),
    Request("granite-4.0-h H100 0.24 --mamba-cache-mode align", "H100", "0.24", DENSE, model="granite-4.0-h-350m",
            hybrid_flags=("--mamba-cache-mode", "align", "--enable-prefix-caching")),
    Request("qwen3-next H100 0.24 --mamba-cache-mode align", "H100", "0.24", DENSE, model="qwen3-next-80b-a3b",
            hybrid_flags=("--mamba-cache-mode", "align")),
    Request("granite-4.0-h H100 0.33", "H100", "0.33", ("FLASH_ATTN", "FLASHINFER"), model="granite-4.0-h-350m"),
    # MLA and sparse MLA
    Request("deepseek-v2-lite H100 0.33", "H100", "0.33", MLA, block_sizes=(16, 64), model="deepseek-v2-lite"),
    Request("deepseek-v2-lite B200 0.24 tp2", "B200", "0.24", MLA, block_sizes=(32, 64, 128),
            model="deepseek-v2-lite", tp=2),
    Request("deepseek-v3.2 H100 0.33 (sparse)", "H100", "0.33", ("FLASHMLA", "TRITON_MLA"), block_sizes=(64,),
            model="deepseek-v3.2"),
]


def _json(args: list[str]) -> dict:
    result = RUNNER.invoke(app, args)
    assert result.exit_code in (0, 1), f"{args}: exit {result.exit_code}: {result.output[-400:]}"
    return json.loads(result.stdout)


def explain_answer(req: Request, *pair: str) -> dict:
    return _json(["explain", *req.what, *pair, "--json"])


def preflight_answer(req: Request, *pair: str) -> dict:
    return _json(["preflight", "--model", req.model, "-tp", str(req.tp), "--gpu", req.gpu, "--vllm-version",
                  req.vllm_version, *pair, "--json"])["explain"]


def tune_plan(req: Request) -> dict:
    sizes = ",".join(map(str, req.block_sizes))
    return _json(["tune", "--dry-run", *req.what, "--backends", ",".join(req.backends), "--block-sizes", sizes,
                  "--workload", "decode", "--json"])


def verdict(explanation: dict, backend: str, block_size: int) -> tuple[bool, int | None]:
    """(vLLM runs BACKEND at exactly --block-size N, the kernel block size it splits it into). The
    selection only: explain's memory verdict (error_phase "memory": a block of 2048 tokens leaves no
    room for one request on one H100) is a later step of vLLM's start-up, which tune does not plan."""
    selection_error = explanation["error"] if explanation.get("error_phase") != "memory" else None
    runs = (selection_error is None and explanation["selected"] == backend
            and explanation["block_size"] == block_size)
    return runs, explanation["kernel_block_size"] if runs else None


@pytest.mark.parametrize("req", GRID, ids=[r.label for r in GRID])
def test_explain_preflight_and_tune_agree(req: Request):
    plan = tune_plan(req)
    default = (plan["vllm_default"]["backend"], plan["vllm_default"]["block_size"])
    explained = explain_answer(req)
    assert (explained["selected"], explained["block_size"]) == default
    if req.preflight_too:
        checked = preflight_answer(req)
        assert (checked["selected"], checked["block_size"]) == default
    assert plan["configs"], "the grid planned nothing to compare"
    for config in plan["configs"]:
        backend, size = config["backend"], config["block_size"]
        tune_says = (config["status"] == "planned", config["kernel_block_size"])
        pair = ("--attention-backend", backend, "--block-size", str(size))
        assert verdict(explain_answer(req, *pair), backend, size) == tune_says, f"explain {backend} {size}"
        if req.preflight_too:
            assert verdict(preflight_answer(req, *pair), backend, size) == tune_says, f"preflight {backend} {size}"


def test_the_grid_has_both_answers():
    """A table where every pair is accepted (or every one refused) could not catch a disagreement."""
    statuses = {c["status"] for req in GRID[:6] for c in tune_plan(req)["configs"]}
    assert statuses == {"planned", "skipped"}


@pytest.mark.parametrize("tp, per_gpu", [(1, (32, 8)), (2, (16, 4)), (4, (8, 2)), (8, (4, 1))])
def test_num_heads_are_the_models_totals_in_explain_and_tune(tp: int, per_gpu: tuple[int, int]):
    """`--num-heads 32 --num-kv-heads 8 -tp N` is Llama-3.1-8B at TP N in both commands, as in vLLM:
    total // TP query heads and max(1, KV // TP) KV heads per GPU."""
    flags = ["--head-size", "128", "--num-heads", "32", "--num-kv-heads", "8", "-tp", str(tp), "--gpu", "B200",
             "--vllm-version", "0.33"]
    explained = _json(["explain", *flags, "--json"])["context"]
    from_model = _json(["explain", "--model", "llama-3.1-8b", "-tp", str(tp), "--gpu", "B200", "--vllm-version",
                        "0.33", "--json"])["context"]
    shape = _json(["tune", "--dry-run", *flags, "--json"])["shape"]
    assert (explained["num_heads"], explained["num_kv_heads"]) == per_gpu
    assert (from_model["num_heads"], from_model["num_kv_heads"]) == per_gpu
    assert (shape["num_q_heads"], shape["num_kv_heads"]) == per_gpu


@pytest.mark.parametrize("flags, message", [
    (["--num-heads", "32", "-tp", "3"], "--num-heads 32 is not divisible by --tensor-parallel-size 3"),
    (["--num-heads", "24", "--num-kv-heads", "6", "-tp", "4"], "--num-kv-heads 6 cannot be split"),
    (["--num-heads", "24", "--num-kv-heads", "3", "-tp", "4"], "is not a multiple of --num-kv-heads 3"),
])
def test_a_tp_that_cannot_split_the_heads_is_bad_input_in_both(flags: list[str], message: str):
    for command in (["explain"], ["tune", "--dry-run"]):
        result = RUNNER.invoke(app, [*command, "--head-size", "128", *flags, "--gpu", "H100"])
        assert result.exit_code == 2, (command, result.output)
        assert message in result.output, (command, result.output)
