"""The `attnsel` command: builds the Typer app and registers each command module."""

from __future__ import annotations

from typing import Optional

import typer

from attnsel import __version__

app = typer.Typer(
    name="attnsel",
    help="Which vLLM attention backend will run, why, and which is really fastest on your GPU.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"attnsel {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only results and errors: no progress or info lines."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="More detail on stderr."),
) -> None:
    """attnsel: probe GPUs, explain vLLM's attention-backend choice, tune backends and block sizes."""
    from attnsel.cli.settings import set_verbosity

    set_verbosity(quiet=quiet, verbose=verbose)


def _register_commands() -> None:
    # Each module adds its command(s) to `app`; none of them imports torch at import time.
    from attnsel.cli import explain_cmd, preflight_cmd, probe_cmd, report_cmd, tune_cmd, verify_cmd

    for module in (probe_cmd, explain_cmd, tune_cmd, verify_cmd, report_cmd, preflight_cmd):
        module.register(app)


_register_commands()


def main() -> None:
    import signal
    import sys

    # `attnsel explain | head`: when the reader leaves, end like a Unix tool killed by SIGPIPE
    # (shell status 141) instead of click's exit 1, which here means "vLLM would raise" / "a check
    # failed". Not for `tune` and `verify`, whose workers must be shut down by the parent itself.
    if hasattr(signal, "SIGPIPE") and not {"tune", "verify"} & set(sys.argv[1:]):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    app()
