"""`attnsel verify`: check a saved tune result in vLLM's own engine (no kernel is timed again);
what a run shows is cli/verify_display.py (`attnsel tune --verify` shows its run the same way)."""

from __future__ import annotations

from pathlib import Path

import typer

from attnsel.cli.common import handle_errors
from attnsel.cli.completion import complete_model
from attnsel.cli.verify_display import run_and_render


def register(app: typer.Typer) -> None:
    @app.command("verify")
    @handle_errors
    def verify_command(
        run_dir: Path | None = typer.Argument(None, metavar="RUN_DIR", help="A `tune --output` folder: checks its recommendation (verify.json is written there)."),
        model: str | None = typer.Option(None, "--model", "-m", autocompletion=complete_model, help="config.json, folder or catalog name (default: the tuned model)."),
        candidates: str | None = typer.Option(None, "--candidates", help="Pairs to start besides vLLM's default, e.g. FLASH_ATTN:16,TRITON_ATTN:64 (default: tune's pick and runner-up); `default`: vLLM's default alone (an A/A check with --repeat-engine 2)."),
        shapes: str | None = typer.Option(None, "--shapes", help="Decode shapes BATCHxCONTEXT, e.g. 1x16384,64x4096 (default: those of tune's decode shapes)."),
        repeats: int = typer.Option(2, "--repeats", help="Timed N1/N2 pairs per shape (>= 2; their spread is the noise)."),
        repeat_engine: int = typer.Option(1, "--repeat-engine", help="Engine starts per pair (1-10). From 2: the spread between starts of the same pair is reported beside the within-engine noise, and a gap must exceed it too."),
        decode_steps: int = typer.Option(128, "--decode-steps", help="N2 - N1: decode steps timed per pair."),
        gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization", help="vLLM's setting for every engine. Default: the release's own (0.92; 0.34's extensible KV cache: 1.0), lowered when other processes hold GPU memory."),
        start_timeout: float = typer.Option(900.0, "--start-timeout", help="Seconds an engine may take to start before it is killed."),
        timeout: float = typer.Option(600.0, "--timeout", help="Seconds one generate call may take before the engine is killed."),
        output: Path | None = typer.Option(None, "--output", "-o", help="Folder for verify.json and the engine logs (default: RUN_DIR)."),
        resume: bool = typer.Option(False, "--resume", help="Continue the verify.json in the folder: engines it measured are kept, the others run."),
        as_json: bool = typer.Option(False, "--json", help="Print verify.json on stdout (progress stays on stderr)."),
    ) -> None:
        """Start vLLM's own engine once per candidate pair (vLLM's default, tune's pick, the runner-up) with dummy
        weights and say whether tune's recommendation holds end to end (exit 0: verdict given; 1: nothing to compare;
        2: bad input; 3: no vLLM or no GPU)."""
        from attnsel.bench.verify import VerifyRequest, check_verify_flags
        from attnsel.bench.verify import plan as VP

        check_verify_flags(run_dir, output, model=model, candidates=candidates, shapes=shapes,
                           decode_steps=decode_steps, gpu_memory_utilization=gpu_memory_utilization,
                           start_timeout=start_timeout, timeout=timeout)
        req = VerifyRequest(tune_dir=run_dir, model=model, candidates=VP.parse_candidates(candidates),
                            shapes=VP.parse_shapes(shapes), repeats=repeats, repeat_engine=repeat_engine,
                            decode_steps=decode_steps,
                            gpu_memory_utilization=gpu_memory_utilization, start_timeout_s=start_timeout,
                            call_timeout_s=timeout, resume=resume)
        folder = output or run_dir
        assert folder is not None  # check_verify_flags: RUN_DIR or --output
        code = run_and_render(req, folder, as_json=as_json)
        if code:
            raise typer.Exit(code)
