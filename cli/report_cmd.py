"""`attnsel report`: render a tune result (and explain answers) as Markdown, HTML, CSV or JSON.

Exit codes: 0 written; 2 bad input (missing, empty or malformed file, unknown format).
Reads files only: no NVML, no CUDA, no torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from attnsel import files
from attnsel.cli.common import handle_errors, print_json, sigint_deferred
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.reports.tune.loaders import ReportData

FORMATS = ("md", "html", "csv", "json")
_SUFFIXES = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".csv": "csv", ".json": "json"}


def pick_format(requested: str | None, as_json: bool, output: Path | None) -> str:
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
    if output is not None and output.suffix:  # x.pdf would get Markdown under a name that promises a PDF
        raise UserInputError(f"-o {output.name}: report writes {', '.join(FORMATS)}, not {output.suffix}; name the "
                             f"file .md, .html, .csv or .json, or pass --format")
    return "md"


def load_report(paths: Sequence[Path]) -> ReportData:
    """What `report` renders: the inputs as read (reports/tune/loaders.py), a tune result completed by
    bench with the recommendation a sweep cut short never wrote (reports never recompute one)."""
    from attnsel.bench.tune import with_recommendation
    from attnsel.reports.tune import load_inputs

    data = load_inputs(paths)
    if data.tune is not None:
        data.tune.document = with_recommendation(data.tune.document)
    return data


def render(data: ReportData, fmt: str) -> str:
    if fmt == "md":
        from attnsel.reports.tune import markdown

        return markdown.render(data)
    if fmt == "html":
        from attnsel.reports.tune import html

        return html.render(data)
    if fmt == "csv":
        from attnsel.reports.tune import csv_out

        return csv_out.render(data)
    from attnsel.cli.streams import json_document
    from attnsel.reports.tune.frames import report_dict

    return json_document(report_dict(data), default=str)


def register(app: typer.Typer) -> None:
    @app.command("report")
    @handle_errors
    def report(
        inputs: list[Path] = typer.Argument(
            ..., metavar="INPUT",
            help="A tune output folder (or its tune.json / results.jsonl; its verify.json comes with it), a verify.json, and/or `attnsel explain --json` files.",
        ),
        output_format: str | None = typer.Option(None, "--format", "-f", help="md | html | csv | json (default: from -o, else md)."),
        output_text: str | None = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout."),
        as_json: bool = typer.Option(False, "--json", help="Same as --format json: only JSON on stdout."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No 'wrote FILE' line on stderr."),
    ) -> None:
        """Render tune results and explain answers: a summary (GPU, environment, recommendation, vLLM flags)
        then tables per workload. HTML is one self-contained file with charts (exit 0: written; 2: bad input)."""
        from attnsel.cli import settings

        if output_text is not None and not output_text.strip():
            raise UserInputError("--output is empty: give a file name or leave the flag out (stdout)")
        output = Path(output_text) if output_text is not None else None
        if output is not None:  # first: writing over an input is the one mistake that destroys data
            from attnsel.reports.tune import refuse_to_overwrite

            refuse_to_overwrite(output, inputs)
        fmt = pick_format(output_format, as_json, output)
        data = load_report(inputs)
        settings.debug(f"report: {len(data.sources)} input(s), format {fmt}")
        text = render(data, fmt)
        if output is None:
            with sigint_deferred():  # a report on stdout is whole or absent, as --json is
                sys.stdout.write(text)
                sys.stdout.flush()
            return
        files.write_whole(text, output, flag="-o")
        settings.log(f"wrote {output} ({fmt}, {len(text.encode('utf-8')) // 1024} KiB)", quiet=quiet)
        if as_json:
            print_json({"output": str(output), "format": fmt})
