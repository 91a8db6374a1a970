"""The `attnsel` command: builds the Typer app and registers each command module. The entry point
is cli/entry.py, which runs a plain local `attnsel probe` without this module."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from attnsel import __version__
from attnsel.cli import (
    explain_cmd,
    preflight_cmd,
    probe_cmd,
    report_cmd,
    tune_cmd,
    verify_cmd,
)
from attnsel.cli.common import exit_for
from attnsel.cli.fast_params import install
from attnsel.cli.help_labels import plain_help_labels
from attnsel.cli.streams import (
    drop_unusable_terminal_size,
    guarded_stdout,
    start_command,
)
from attnsel.errors import EnvironmentProblem

if TYPE_CHECKING:
    from typer._click import (  # Typer >= 0.29 vendors click (cli/fast_params.py)
        Command,
        Context,
    )

GLOBAL_FLAGS = frozenset({"-q", "--quiet", "-v", "--verbose"})


class AttnselGroup(TyperGroup):
    """The root command. It runs every command in click's non-standalone mode and ends the process
    itself, so that parse errors, interrupts, unwritable stdout and unforeseen exceptions all go
    through one funnel (cli/common.py `exit_for`): one line on stderr, a documented exit code."""

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            install(command)  # start-up: no pydantic for plain option values (cli/fast_params.py)
            plain_help_labels(command)
        return command

    def make_context(self, info_name: str | None, args: list[str], parent: Context | None = None,
                     **extra: Any) -> Context:
        install(self)
        plain_help_labels(self)
        return super().make_context(info_name, self._hoist_global_options(list(args)), parent=parent, **extra)

    def _hoist_global_options(self, args: list[str]) -> list[str]:
        """`attnsel probe -q` means `attnsel -q probe`: the root's -q/-v given after a command that
        has no option of that name move in front of it (up to a `--`)."""
        position = next((i for i, arg in enumerate(args) if not arg.startswith("-")), None)
        command = self.commands.get(args[position]) if position is not None else None
        if command is None or position is None:
            return args
        own = {name for param in command.params for name in getattr(param, "opts", ())}
        end = args.index("--") if "--" in args[position:] else len(args)
        moved = [arg for arg in args[position + 1:end] if arg in GLOBAL_FLAGS and arg not in own]
        kept = [arg for arg in args[position + 1:end] if arg not in moved]
        return args[:position] + moved + [args[position]] + kept + args[end:]

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        """click's Command.main (its parameters, Typer's return: Any), ending the process itself."""
        passed = dict(args=args, prog_name=prog_name, complete_var=complete_var,
                      windows_expand_args=windows_expand_args, **extra)
        if not standalone_mode:
            return super().main(standalone_mode=False, **passed)

        drop_unusable_terminal_size()
        with guarded_stdout():
            try:
                _check_completion_shell(args)
                returned = super().main(standalone_mode=False, **passed)
                code = returned if isinstance(returned, int) and not isinstance(returned, bool) else 0
            except SystemExit as exc:  # shell completion and the like exit on their own
                code = exc.code if isinstance(exc.code, int) else 0
            except BaseException as exc:  # noqa: BLE001 -- the funnel
                code = exit_for(exc).exit_code
        sys.exit(code)


COMPLETION_FLAGS = ("--install-completion", "--show-completion")
COMPLETION_SHELLS = "bash, zsh, fish or PowerShell"


def _check_completion_shell(argv: Sequence[str] | None) -> None:
    """Typer finds the shell to complete for among the parent processes (shellingham); where none
    is one (a cron job, a container's entry point) it would print `Shell  not supported.`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    flag = next((a for a in argv if a in COMPLETION_FLAGS), None)
    if flag is None or os.getenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"):  # then Typer asks for the name
        return
    try:
        import shellingham  # type: ignore[import-untyped]  # no type information
    except ImportError:  # Typer then asks for the shell by name (--install-completion SHELL)
        return
    try:
        shellingham.detect_shell()
    except shellingham.ShellDetectionFailure:
        raise EnvironmentProblem(f"{flag}: no {COMPLETION_SHELLS} among the parent processes, so the shell to "
                                 "complete for is unknown; run it from that shell") from None


app = typer.Typer(
    name="attnsel",
    cls=AttnselGroup,
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
    version: bool | None = typer.Option(
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
    for module in (probe_cmd, explain_cmd, tune_cmd, verify_cmd, report_cmd, preflight_cmd):
        module.register(app)


_register_commands()


def main() -> None:
    """The full command (cli/entry.py sends everything here but a plain local `probe`)."""
    start_command(sys.argv[1:])
    app()
