"""What a verification run shows, for both commands that start one (`attnsel verify` and
`attnsel tune --verify`): progress on stderr, then the result on stdout (terminal or JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attnsel.cli.common import print_json, stderr_console, stdout_console

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

    from attnsel.bench.verify import VerifyProgress, VerifyRequest
    from attnsel.bench.verify.protocol import Progress


class _Display:
    """Progress on stderr: one line per candidate with elapsed time against its estimate."""

    def __init__(self, console: Console):
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
    from attnsel.bench.verify.session import exit_code, verify_until_done
    from attnsel.reports import verify_report

    display = _Display(stderr_console())
    try:
        document = verify_until_done(req, output_dir, display.progress())
    finally:
        display.stop()
    if as_json:
        print_json({"tune": tune_document, "verify": document} if tune_document is not None else document)
    else:
        verify_report.render_terminal(document, stdout_console())
        if (document.get("prebuild") or {}).get("note"):
            stderr_console().print(document["prebuild"]["note"])
        stderr_console().print(f"verify.json and the engines' logs are in {output_dir}/")
    return exit_code(document)
