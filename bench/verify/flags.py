"""`attnsel verify`'s flags checked before an engine starts (bad input: one line, exit 2), and
`tune --verify`'s check that vLLM's engine could run after the sweep (exit 3 before it)."""

from __future__ import annotations

import os
from pathlib import Path

from attnsel import files
from attnsel.attention import versions
from attnsel.attention.model import check_names, check_positive_number, check_size
from attnsel.bench.verify import engine_worker as EW
from attnsel.errors import EnvironmentProblem, UserInputError

MAX_DECODE_STEPS = 1 << 20  # decode steps timed per pair: far beyond any context, bounded before an engine starts
MAX_REPEATS = 100
MAX_ENGINE_STARTS = 10  # --repeat-engine: starts of each pair's engine (each takes minutes on a GPU)
ENGINE_ENV = "ATTNSEL_VERIFY_ENGINE"  # swaps in another engine for the worker (CI: a fake)


def check_verify_flags(run_dir: Path | None, output: Path | None, *, model: str | None,
                       candidates: str | None, shapes: str | None, repeats: int, decode_steps: int,
                       gpu_memory_utilization: float, start_timeout: float, timeout: float,
                       repeat_engine: int = 1) -> None:
    """Every verify flag, in the order a user reads them; the output folder must be writable."""
    if run_dir is None and output is None:
        raise UserInputError("pass a tune result folder (attnsel verify RUN_DIR), or --output DIR with --model and --candidates")
    if not 0 < gpu_memory_utilization <= 1:  # also refuses NaN
        raise UserInputError("--gpu-memory-utilization must be in (0, 1]")
    check_size("--decode-steps", decode_steps, minimum=8, maximum=MAX_DECODE_STEPS)
    if repeats > MAX_REPEATS:  # too few: bench/verify/run.py says why two are needed
        raise UserInputError(f"--repeats {repeats} is too many: at most {MAX_REPEATS} timed pairs per shape")
    check_size("--repeat-engine", repeat_engine, minimum=1, maximum=MAX_ENGINE_STARTS)
    check_positive_number("--start-timeout", start_timeout)
    check_positive_number("--timeout", timeout)
    check_names((("--model", model), ("--candidates", candidates), ("--shapes", shapes)))
    kind = files.path_info(str(run_dir), "RUN_DIR").kind if run_dir is not None else "dir"
    if kind != "dir":
        raise UserInputError(f"RUN_DIR {files.shown_path(str(run_dir))} "
                             f"{'does not exist' if kind == 'missing' else 'is not a folder'}: pass the folder "
                             "`attnsel tune --output` wrote (it holds tune.json)")
    files.check_output_folder(str(output or run_dir))


def check_verify_possible() -> None:
    """`tune --verify` fails before its sweep when the engine could not run afterwards (exit 3)."""
    vllm_version_or_fail(os.environ.get(ENGINE_ENV) or EW.DEFAULT_ENGINE)  # VerifyRequest's engine


def vllm_version_or_fail(engine: str) -> str | None:
    """The installed vLLM's version; no vLLM with the real engine -> exit 3 (one line)."""
    version = versions.installed_vllm_version()
    if version is None and engine == EW.DEFAULT_ENGINE:
        raise EnvironmentProblem("attnsel verify starts vLLM's own engine, and vLLM is not installed in this "
                                 "Python environment (pip install vllm)")
    return version

