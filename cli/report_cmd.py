"""`attnsel report`: render a tune result (and explain answers) as Markdown, HTML, CSV or JSON.

Exit codes: 0 written; 2 bad input (missing, empty or malformed file, unknown format).
Reads files only: no NVML, no CUDA, no torch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from attnsel.cli.common import handle_errors, print_json, sigint_deferred
from attnsel.errors import UserInputError

FORMATS = ("md", "html", "csv", "json")
_SUFFIXES = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".csv": "csv", ".json": "json"}


def pick_format(requested: Optional[str], as_json: bool, output: Optional[Path]) -> str:
    """--json, then --format, then the -o file's suffix, then Markdown."""
    if as_json and requested is not None and requested.strip().lower() != "json":
        raise UserInputError(f"--json and --format {requested} ask for two different outputs: pass one of them")
    if as_json:
        return "json"
    if requested is not None:
        fmt = requested.strip().lower()
        fmt = {"markdown": "md", "htm": "html"}.get(fmt, fmt)
        if fmt not in FORMATS:
            raise UserInputError(f"unknown --format {requested!r}; use one of {', '.join(FORMATS)}")
        return fmt
    if output is not None and output.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[output.suffix.lower()]
    return "md"


def load_report(paths):
    """What `report` renders: the inputs as read (reports/tune/loaders.py), a tune result completed by
    bench with the recommendation a sweep cut short never wrote (reports never recompute one)."""
    from attnsel.bench.tune import with_recommendation
    from attnsel.reports.tune import load_inputs

    data = load_inputs(paths)
    if data.tune is not None:
        data.tune.document = with_recommendation(data.tune.document)
    return data


def render(data, fmt: str) -> str:
    if fmt == "md":
        from attnsel.reports.tune import markdown

        return markdown.render(data)
    if fmt == "html":
        from attnsel.reports.tune import html

        return html.render(data)
    if fmt == "csv":
        from attnsel.reports.tune import csv_out

        return csv_out.render(data)
    import json

    from attnsel.reports.tune.frames import report_dict

    return json.dumps(report_dict(data), indent=2, default=str) + "\n"


def _write(text: str, output: Path) -> None:
    """Whole or not at all: a temporary file next to the target, renamed over it once written
    (a Ctrl-C or a full disk never leaves half a report under the name)."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        if output.is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        if output.exists() and not output.is_file():  # /dev/stdout, /dev/full, a FIFO: written in place
            _write_special(text, output)
            return
        partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
        try:
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, output)
        finally:
            with contextlib.suppress(OSError):
                partial.unlink()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise UserInputError(f"cannot write {str(output)[:200]!r}: {getattr(exc, 'strerror', None) or exc}; "
                             "choose another -o path") from None


def _write_special(text: str, output: Path) -> None:
    # non-blocking open: a named pipe nobody reads is refused at once (ENXIO) instead of waiting
    try:
        fd = os.open(output, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserInputError(f"-o {str(output)[:200]!r} is a named pipe that nobody reads: start its reader "
                                 "first, or choose a file") from None
        raise
    os.set_blocking(fd, True)
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def register(app: typer.Typer) -> None:
    @app.command("report")
    @handle_errors
    def report(
        inputs: List[Path] = typer.Argument(
            ..., metavar="INPUT",
            help="A tune output folder (or its tune.json / results.jsonl; its verify.json comes with it), a verify.json, and/or `attnsel explain --json` files.",
        ),
        output_format: Optional[str] = typer.Option(None, "--format", "-f", help="md | html | csv | json (default: from -o, else md)."),
        output_text: Optional[str] = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout."),
        as_json: bool = typer.Option(False, "--json", help="Same as --format json: only JSON on stdout."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No 'wrote FILE' line on stderr."),
    ) -> None:
        """Render tune results and explain answers: a summary (GPU, environment, recommendation, vLLM flags)
        then tables per workload. HTML is one self-contained file with charts (exit 0: written; 2: bad input)."""
        from attnsel.cli import settings

        if output_text is not None and not output_text.strip():
            raise UserInputError("--output is empty: give a file name or leave the flag out (stdout)")
        output = Path(output_text) if output_text is not None else None
        fmt = pick_format(output_format, as_json, output)
        data = load_report(inputs)
        settings.debug(f"report: {len(data.sources)} input(s), format {fmt}")
        text = render(data, fmt)
        if output is None:
            with sigint_deferred():  # a report on stdout is whole or absent, as --json is
                sys.stdout.write(text)
                sys.stdout.flush()
            return
        _write(text, output)
        settings.log(f"wrote {output} ({fmt}, {len(text.encode('utf-8')) // 1024} KiB)", quiet=quiet)
        if as_json:
            print_json({"output": str(output), "format": fmt})
