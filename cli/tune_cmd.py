"""`attnsel tune`: time every valid backend x block size on this GPU and recommend vLLM flags."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import typer

from attnsel import files
from attnsel.cli import settings
from attnsel.cli.common import handle_errors, print_json, stderr_console, stdout_console
from attnsel.cli.completion import complete_gpu, complete_model, complete_vllm_version
from attnsel.errors import EXIT_FAILED, CheckFailed, Interrupted

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from attnsel.bench.plan import Plan
    from attnsel.bench.sweep import SweepProgress
    from attnsel.bench.tune.request import TuneRequest
    from attnsel.bench.tune.run import TuneOutcome


def _progress(console: Console) -> tuple[Progress, SweepProgress]:
    """A rich progress bar on stderr, and the SweepProgress callbacks that drive it."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from attnsel.bench.sweep import STATUS_OK, SweepProgress

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=False)
    task = bar.add_task("tune", total=None)
    reported: set = set()

    def on_start(item: dict) -> None:
        bar.update(task, description=f"{item['key'].split('|')[0]} bs={item['block_size']} {item['workload']['label']}")

    def on_row(row: dict) -> None:
        problem = (row["backend"], row.get("status"), row.get("error"))
        if row.get("status") != STATUS_OK and problem not in reported:  # each distinct failure once
            reported.add(problem)
            bar.console.print(f"  {row['backend']} --block-size {row['block_size']} {row.get('workload_label')}: "
                              f"{row.get('status')}: {(row.get('error') or '')[:120]}")
        bar.advance(task)

    return bar, SweepProgress(on_total=lambda n: bar.update(task, total=n), on_start=on_start, on_row=on_row)


def register(app: typer.Typer) -> None:
    @app.command("tune")
    @handle_errors
    def tune_command(
        model: str | None = typer.Option(None, "--model", "-m", autocompletion=complete_model, help="HF config.json (file, folder or catalog name); same derivation as `explain`."),
        head_size: int | None = typer.Option(None, "--head-size", help="Attention head size (alone: a representative head layout for it, named in the output)."),
        num_heads: int | None = typer.Option(None, "--num-heads", help="The model's attention heads in total (vLLM runs total // TP per GPU), as `attnsel explain --num-heads` reads them; default: a representative layout for --head-size."),
        num_kv_heads: int | None = typer.Option(None, "--num-kv-heads", help="The model's KV heads in total (GQA; per GPU: max(1, total // TP), replicated when fewer than TP); default = --num-heads."),
        dtype: str = typer.Option("auto", "--dtype", help="bf16, fp16, fp32 or auto."),
        kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="vLLM's --kv-cache-dtype: auto, float16/bfloat16, or fp8 / fp8_e4m3 / fp8_e5m2 (an fp8 cache with per-tensor scales; backends vLLM refuses it for are skipped with vLLM's reason). Other values the release knows are not timed (exit 1)."),
        use_mla: bool = typer.Option(False, "--use-mla", help="An MLA layer without --model: with --kv-lora-rank, --qk-rope-head-dim, --num-heads (DeepSeek-V3: 512, 64, 128)."),
        kv_lora_rank: int | None = typer.Option(None, "--kv-lora-rank", help="MLA latent width (head size = this + --qk-rope-head-dim)."),
        qk_rope_head_dim: int | None = typer.Option(None, "--qk-rope-head-dim", help="MLA rope part of the cache and query."),
        qk_nope_head_dim: int | None = typer.Option(None, "--qk-nope-head-dim", help="MLA query's no-rope width (default 128: sets the scale and FLASHINFER_MLA's validity)."),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="vLLM --tensor-parallel-size: heads per GPU = total // TP, KV heads per GPU = max(1, KV heads // TP), for --model and --num-heads/--num-kv-heads alike (as in `attnsel explain`)."),
        backends: str | None = typer.Option(None, "--backends", help="Comma list; default FLASH_ATTN,FLASHINFER,TRITON_ATTN,FLEX_ATTENTION, or for an MLA model FLASH_ATTN_MLA,FLASHMLA,FLASHINFER_MLA,TRITON_MLA,CUTLASS_MLA."),
        block_sizes: str | None = typer.Option(None, "--block-sizes", help="Comma list of --block-size values; default 16,32,64,128,256."),
        workload: str = typer.Option("all", "--workload", help="decode, prefill, mixed, or all (comma list allowed)."),
        weights: str | None = typer.Option(None, "--weights", help="Overall score weights, default decode=0.7,prefill=0.2,mixed=0.1."),
        min_gain: float = typer.Option(5.0, "--min-gain", help="Smallest margin (%) over vLLM's default worth a flag change; smaller ones keep the default."),
        quick: bool = typer.Option(False, "--quick", help="Few shapes (3 decode, 1 prefill, 1 mixed)."),
        full: bool = typer.Option(False, "--full", help="Many shapes (decode batch 1-256 x context 512-32k)."),
        cuda_graph: bool = typer.Option(False, "--cuda-graph", help="Replay every row from a CUDA graph (default: as vLLM launches it: graphs for captured decode batches, eager elsewhere)."),
        eager: bool = typer.Option(False, "--eager", help="Launch every row eagerly (default: as vLLM launches it)."),
        timer: str = typer.Option("auto", "--timer", help="auto (CUPTI kernel time where cupti-python works, else CUDA events), cupti, events."),
        hot_l2: bool = typer.Option(False, "--hot-l2", help="Do not flush L2 before each call (decode KV that fits in L2 then beats HBM peak)."),
        check: str = typer.Option("first", "--check", help="Correctness vs fp32 reference: first (smallest shape per kind), all, none."),
        tolerance: float | None = typer.Option(None, "--tolerance", help="Relative-error bound (default 1e-2 bf16/fp16)."),
        timeout: float = typer.Option(180.0, "--timeout", help="Seconds one row may take (incl. JIT) before its worker is killed."),
        gpus: str | None = typer.Option(None, "--gpus", help="Spread the sweep over GPUs: all or CUDA ordinals like 0,1 (one GPU model; one worker lane per GPU, checked to time alike first)."),
        output: str | None = typer.Option(None, "--output", "-o", help="Folder for results.jsonl, tune.json, summary.txt, worker logs; default ./attnsel-tune-<time>."),
        resume: bool = typer.Option(False, "--resume", help="Continue the sweep in --output: skip rows already in results.jsonl."),
        retry_failed: bool = typer.Option(False, "--retry-failed", help="With --resume: run failed rows (crash, timeout, OOM) again."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (grid after vLLM's rules, with skip reasons); needs no GPU."),
        gpu: str | None = typer.Option(None, "--gpu", autocompletion=complete_gpu, help="For --dry-run without a GPU: a GPU name (H100, A100, ...)."),
        capability: str | None = typer.Option(None, "--capability", help="For --dry-run without a GPU: compute capability X.Y."),
        enable_prefix_caching: bool | None = typer.Option(None, "--enable-prefix-caching/--no-enable-prefix-caching", help="Hybrid models: vLLM's prefix caching, which decides the Mamba cache mode and so vLLM's block size (default: vLLM's for the version)."),
        mamba_ssm_cache_dtype: str | None = typer.Option(None, "--mamba-ssm-cache-dtype", help="Hybrid models: vLLM --mamba-ssm-cache-dtype (sizes the state page vLLM aligns the block to)."),
        mamba_cache_mode: str | None = typer.Option(None, "--mamba-cache-mode", help="Hybrid models: vLLM --mamba-cache-mode, which decides the block size vLLM aligns to (as in `attnsel explain`)."),
        vllm_version: str | None = typer.Option(None, "--vllm-version", autocompletion=complete_vllm_version, help="vLLM version whose rules filter the grid (default: installed vLLM, else the newest profile)."),
        show_rows: bool = typer.Option(False, "--show-rows", help="Also print every timed row."),
        as_json: bool = typer.Option(False, "--json", help="Print the plan / full results as JSON on stdout."),
        verify: bool = typer.Option(False, "--verify", help="Then start vLLM's own engine for vLLM's default, the pick and the runner-up, and say whether the pick holds end to end (`attnsel verify --help`)."),
    ) -> None:
        """Time each vLLM attention backend's real kernels over a paged KV cache and recommend
        --attention-backend / --block-size (exit 0: done; 1: nothing could be timed; 2: bad input;
        3: no GPU / torch / kernel library)."""
        from attnsel.bench.tune import TuneFlags, resolve_request

        flags = TuneFlags(
            model=model, head_size=head_size, num_heads=num_heads, num_kv_heads=num_kv_heads, dtype=dtype,
            kv_cache_dtype=kv_cache_dtype, use_mla=use_mla, kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=qk_rope_head_dim, qk_nope_head_dim=qk_nope_head_dim,
            tensor_parallel_size=tensor_parallel_size, backends=backends, block_sizes=block_sizes,
            workload=workload, weights=weights, min_gain=min_gain, quick=quick, full=full, cuda_graph=cuda_graph,
            eager=eager, timer=timer, hot_l2=hot_l2, check=check, tolerance=tolerance, timeout=timeout, gpus=gpus,
            output=output, resume=resume, retry_failed=retry_failed, gpu=gpu, capability=capability, dry_run=dry_run,
            vllm_version=vllm_version, prefix_caching=enable_prefix_caching, mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
            mamba_cache_mode=mamba_cache_mode,
        )
        req = resolve_request(flags)  # every flag checked once, the rule profile chosen once
        if dry_run:
            _dry_run(req, as_json)
            return
        if verify:
            from attnsel.bench.verify import check_verify_possible

            check_verify_possible()  # no vLLM: exit 3 now, not after the sweep
        outcome = _sweep(req)
        _show_outcome(outcome, as_json=as_json, verify=verify, show_rows=show_rows)


def _dry_run(req: TuneRequest, as_json: bool) -> None:
    """--dry-run: the plan after vLLM's rules, with skip reasons; needs no GPU."""
    from attnsel.bench.tune import request as tune_request
    from attnsel.reports.tune import text as tune_report

    assert req.capability is not None  # a dry run's request names the GPU it plans for
    plan = tune_request.make_plan(req, req.capability, req.gpu_name)
    doc = tune_request.plan_document(plan, req.options)
    if as_json:
        print_json(doc)
    else:
        tune_report.render_plan(doc, stdout_console(), notes=not settings.is_quiet())
    if not plan.runnable_configs:  # README: a grid vLLM refuses entirely exits 1, as a real run does
        raise CheckFailed(tune_request.refused_grid_message(plan))


def _sweep(req: TuneRequest) -> TuneOutcome:
    """The sweep with a progress bar on stderr; Ctrl-C leaves whole rows and says how to resume."""
    from attnsel.bench.tune import run as TUNE

    err = stderr_console()
    out_dir = Path(req.output) if req.output is not None else TUNE.default_output_dir()
    files.check_output_folder(str(out_dir))  # before any progress line: a bad target is one line
    err.print("attnsel tune: asking the GPU (NVML; a torch worker only if NVML cannot tell)...")
    adapter_note = TUNE.vllm_adapter_note()
    if adapter_note:  # before anything is timed
        err.print(adapter_note, markup=False)
    bar, progress = _progress(err)
    try:
        return TUNE.run_tune(req, out_dir, progress=progress, on_plan=_announce_plan(err, bar, out_dir))
    except KeyboardInterrupt:  # the sweep has stopped its workers; every row written so far is whole
        raise Interrupted(_interrupted(out_dir)) from None
    finally:
        bar.stop()


def _interrupted(out_dir: Path) -> str:
    """Ctrl-C's line: resume is offered only where the folder (and a row in it) exists; before the first
    row nothing was kept, so the same command starts over."""
    results = out_dir / "results.jsonl"
    if results.is_file() and results.stat().st_size > 0:
        return (f"interrupted: the rows measured so far are in {results}; continue with "
                f"`attnsel tune --resume --output {out_dir}` and the same flags")
    return "interrupted before the first row was measured: nothing was kept; run the same command again"


def _announce_plan(err: Console, bar: Progress, out_dir: Path) -> Callable[[Plan], None]:
    """What the sweep will do, printed once the plan is known; then the progress bar starts."""

    def on_plan(plan: Plan) -> None:
        err.print(f"results go to {out_dir}/ (results.jsonl is written row by row)")
        skipped = len(plan.skipped_configs)
        err.print(f"{plan.shape.describe()}; {len(plan.runnable_configs)} configs x {len(plan.workloads)} shapes"
                  f" ({skipped} configs skipped by vLLM's rules)")
        bar.start()

    return on_plan


def _show_outcome(outcome: TuneOutcome, *, as_json: bool, verify: bool, show_rows: bool) -> None:
    """summary.txt, the results on stdout, exit 1 when nothing was timed, then --verify."""
    from attnsel.bench.tune import DOCUMENT_FILE
    from attnsel.reports.tune import text as tune_report

    _write_summary(outcome, tune_report)
    if as_json and (not verify or outcome.timed_rows == 0):
        print_json(outcome.document.to_dict())
    elif not as_json:
        tune_report.render_results(outcome.document, stdout_console(), show_rows=show_rows)
    if outcome.timed_rows == 0:
        stderr_console().print(f"error: no backend could be timed; see {outcome.output_dir}/{DOCUMENT_FILE} "
                               f"and the worker logs")
        raise typer.Exit(EXIT_FAILED)
    if verify:
        from attnsel.bench.verify.session import after_tune
        from attnsel.cli.verify_display import run_and_render

        code = run_and_render(after_tune(outcome.output_dir), outcome.output_dir, as_json=as_json,
                              tune_document=outcome.document.to_dict() if as_json else None)
        if code:
            raise typer.Exit(code)


def _write_summary(outcome: TuneOutcome, tune_report: ModuleType) -> None:
    from rich.console import Console

    from attnsel.bench.tune import SUMMARY_FILE

    with open(outcome.output_dir / SUMMARY_FILE, "w", encoding="utf-8") as fh:
        console = Console(file=fh, width=160, no_color=True, highlight=False)
        tune_report.render_results(outcome.document, console, show_rows=True)
