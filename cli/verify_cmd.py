"""`attnsel verify`: check a saved tune result in vLLM's own engine (no kernel is timed again);
`attnsel tune --verify` calls `verify_after_tune` once its sweep is written."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import typer

from attnsel.cli.common import handle_errors, print_json, stderr_console, stdout_console
from attnsel.cli.completion import complete_model
from attnsel.errors import EXIT_FAILED

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

    from attnsel.bench.verify import VerifyProgress, VerifyRequest
    from attnsel.bench.verify.protocol import Progress


class _Display:
    """Progress on stderr: one line per candidate with elapsed time against its estimate."""

    def __init__(self, console: Console) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                            TextColumn("{task.fields[estimate]}"), console=console, transient=False)
        self.task: TaskID | None = None
        self.started = False
        self.label = ""
        self.shape = ""
        self.calls = 0
        self.total_calls = 0

    def progress(self) -> VerifyProgress:
        from attnsel.bench.verify import VerifyProgress

        return VerifyProgress(on_plan=self.on_plan, on_candidate=self.on_candidate, on_message=self.on_message,
                              on_tick=self.on_tick, on_candidate_done=self.on_done)

    def on_plan(self, doc: dict) -> None:
        shapes = ", ".join(f"{b}x{c}" for b, c in doc["options"]["shapes"])
        self.console.print(f"attnsel verify: {len(doc['options']['shapes'])} shape(s) ({shapes}), "
                           f"{doc['options']['repeats']} timed pairs each; compile cache {doc['options']['compile_cache_root']}")
        for warning in doc.get("warnings") or []:
            self.console.print(f"[yellow]warning:[/yellow] {warning}")
        self.bar.start()
        self.started = True

    def on_candidate(self, index: int, total: int, candidate: dict, estimate_s: float) -> None:
        self.label = f"[{index + 1}/{total}] {candidate['name']}"
        self.calls = 0
        self.task = self.bar.add_task(f"{self.label}: starting vLLM", total=max(1.0, estimate_s),
                                      estimate=f"est. ~{estimate_s:.0f} s")

    def on_message(self, message: Progress) -> None:
        from attnsel.bench.verify import Message

        if message["type"] == Message.STARTED:
            facts = message["facts"] or {}
            backends = ", ".join(facts.get("attention_backends") or []) or (
                f"{facts['logged_backend']} (from vLLM's log)" if facts.get("logged_backend") else "?")
            self.console.print(f"  {self.label}: engine started in {message['start_s']:.1f} s "
                               f"({backends}, block size "
                               f"{facts.get('block_size')}, KV cache {facts.get('kv_cache_tokens') or '?'} tokens)"
                               + (f"; vLLM imported while the previous engine started ({facts['import_hidden_s']:.0f} s)"
                                  if facts.get("import_hidden_s") is not None else ""))
        elif message["type"] == Message.HELD:
            self.console.print(f"  {self.label}: {_held_text(message['hold'] or {})}")
        elif message["type"] == Message.SHAPE_START:
            self.shape, self.calls, self.total_calls = message["label"], 0, message["calls"]
            self._describe(f"{self.shape}: warm-up call")
        elif message["type"] == Message.CALL:
            self.calls += 1
            self._describe(f"{self.shape}: call {self.calls}/{self.total_calls} done ({message['phase']}, "
                           f"{message['max_tokens']} tokens, {message['seconds']:.2f} s)")

    def _describe(self, text: str) -> None:
        if self.task is not None:
            self.bar.update(self.task, description=f"{self.label}: {text}")

    def on_tick(self) -> None:
        if self.task is not None:
            self.bar.advance(self.task, 1.0)

    def on_done(self, row: dict) -> None:
        from attnsel.bench.verify import RunStatus

        if self.task is not None:
            self.bar.update(self.task, completed=self.bar.tasks[-1].total, description=f"{self.label}: {row.get('status')}")
        if row.get("status") != RunStatus.OK:
            self.console.print(f"  {row['name']}: {row.get('status')}: {row.get('error') or ''}")
        self.task = None

    def stop(self) -> None:
        if self.started:  # a run refused before its plan leaves stderr to its one error line
            self.bar.stop()


def _held_text(hold: dict) -> str:
    """What an engine waited for before its first measured call (bench/verify/beside.py)."""
    parts = []
    if "prebuild_s" in hold:
        parts.append(f"FlashInfer's pre-build ({hold['prebuild_s']:.0f} s)")
    if hold.get("next_worker"):
        parts.append("the next engine's import" + ("" if hold["next_worker"] == "imported"
                                                   else f" ({hold['next_worker']}: it starts afresh)"))
    text = f"measuring waited {hold.get('waited_s', 0):.1f} s for " + (" and ".join(parts) or "nothing")
    return text + ("; FlashInfer's pre-build paused while it measures" if hold.get("prebuild") == "paused" else "")


def run_and_render(req: VerifyRequest, output_dir: Path, *, as_json: bool, tune_document: dict | None = None) -> int:
    """Runs the verification, prints it (terminal or JSON), returns the exit code. With
    `tune_document` (tune --verify --json) stdout gets one object holding both documents."""
    from attnsel.bench.verify import EngineVerdict, is_aa_check, run_verify
    from attnsel.reports import verify_report

    display = _Display(stderr_console())
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `timeout`, a job scheduler: end the engines too
    try:
        document = run_verify(req, output_dir, display.progress())
    finally:
        signal.signal(signal.SIGTERM, previous)
        display.stop()
    if as_json:
        print_json({"tune": tune_document, "verify": document} if tune_document is not None else document)
    else:
        verify_report.render_terminal(document, stdout_console())
        if (document.get("prebuild") or {}).get("note"):
            stderr_console().print(document["prebuild"]["note"])
        stderr_console().print(f"verify.json and the engines' logs are in {output_dir}/")
    not_measured = (document.get("verdict") or {}).get("verdict") == EngineVerdict.NOT_MEASURED
    return EXIT_FAILED if not_measured and not is_aa_check(document) else 0  # an A/A check answers with its spread


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends a run like Ctrl-C: the running engine's process group is killed on the way out
    (it lives in its own session, so the signal never reached it) and verify.json keeps what was measured."""
    raise KeyboardInterrupt


def verify_after_tune(output_dir: Path, as_json: bool, tune_document: dict | None = None) -> int:
    from attnsel.bench.verify import VerifyRequest

    return run_and_render(VerifyRequest(tune_dir=Path(output_dir)), Path(output_dir), as_json=as_json,
                          tune_document=tune_document)


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
        gpu_memory_utilization: float = typer.Option(0.92, "--gpu-memory-utilization", help="vLLM's setting for every engine, vLLM's own default by default (lowered when other processes hold GPU memory)."),
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
