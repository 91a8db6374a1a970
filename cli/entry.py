"""The `attnsel` command's entry point (pyproject [project.scripts], `python -m attnsel`).

`attnsel probe` on this machine -- with --json, --require-*, -q/-v and nothing else -- runs without
importing Typer, click or the other commands, whose start-up was most of the command's time (issue
25, docs/probe.md "Speed"). It prints what the Typer command prints, byte for byte, and ends with the
same exit code: both run cli/probe_local.py and the same error funnel (tests/test_probe_quick.py
runs both ways). Everything else goes to the Typer app (cli/app.py): another command, --help, --ray,
--measure-p2p, a flag or a value spelled in a way this reader does not take, shell completion.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict


class QuickProbeOptions(TypedDict):
    """A plain local `attnsel probe`'s options, by the Typer command's parameter names."""

    quiet: bool
    verbose: bool
    json_output: bool
    require_gpus: int | None
    require_capability: str | None
    require_nvlink: bool
    require_same_model: bool


# The root's options that may stand on either side of `probe` (AttnselGroup hoists them).
GLOBAL_FLAGS: dict[str, Literal["quiet", "verbose"]] = {
    "-q": "quiet", "--quiet": "quiet", "-v": "verbose", "--verbose": "verbose"}
PROBE_FLAGS: dict[str, Literal["json_output", "require_nvlink", "require_same_model"]] = {
    "--json": "json_output", "--require-nvlink": "require_nvlink", "--require-same-model": "require_same_model"}
PROBE_VALUES: dict[str, Literal["require_gpus", "require_capability"]] = {
    "--require-gpus": "require_gpus", "--require-capability": "require_capability"}
# Values taken as Typer would take them; any other spelling is Typer's to accept or refuse.
_GPU_COUNT = re.compile(r"[1-9][0-9]{0,8}")


def quick_probe_options(argv: Sequence[str], env: Mapping[str, str]) -> QuickProbeOptions | None:
    """The options of a plain local `attnsel probe` given as `argv`, or None: that is the Typer app's."""
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in env):
        return None  # click's shell completion (_ATTNSEL_COMPLETE=...)
    options: QuickProbeOptions = {"quiet": False, "verbose": False, "json_output": False, "require_gpus": None,
                                  "require_capability": None, "require_nvlink": False, "require_same_model": False}
    args = list(argv)
    while args and args[0] in GLOBAL_FLAGS:
        options[GLOBAL_FLAGS[args.pop(0)]] = True
    if not args or args.pop(0) != "probe":
        return None
    while args:
        arg = args.pop(0)
        name, equals, value = arg.partition("=")
        if arg in GLOBAL_FLAGS or arg in PROBE_FLAGS:
            options[GLOBAL_FLAGS.get(arg) or PROBE_FLAGS[arg]] = True
            continue
        if name not in PROBE_VALUES or options[PROBE_VALUES[name]] is not None:
            return None  # unknown, or a value given twice
        if not equals:
            if not args:
                return None
            value = args.pop(0)
        if name == "--require-gpus":
            if not _GPU_COUNT.fullmatch(value):
                return None
            options["require_gpus"] = int(value)
        elif value and not value.startswith("-") and value.isascii() and value.isprintable():
            options["require_capability"] = value
        else:
            return None
    return options


def run_quick_probe(options: QuickProbeOptions) -> int:
    """The probe as the Typer command runs it (cli/probe_cmd.py); the exit code, its line on stderr."""
    from attnsel.cli.probe_local import check_capability_flag, probe_here
    from attnsel.cli.settings import set_verbosity
    from attnsel.cli.streams import write_error_line
    from attnsel.errors import AttnselError

    try:
        set_verbosity(quiet=options["quiet"], verbose=options["verbose"])
        check_capability_flag(options["require_capability"])
        probe_here(json_output=options["json_output"], measure_p2p=False, require_gpus=options["require_gpus"],
                   require_capability=options["require_capability"], require_nvlink=options["require_nvlink"],
                   require_same_model=options["require_same_model"])
    except AttnselError as exc:  # what cli/common.py's exit_for does with one
        write_error_line(exc.message)
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except BaseException as exc:  # noqa: BLE001 -- the funnel: Ctrl-C, a bug; rare, so Typer's import is paid here
        from attnsel.cli.common import exit_for

        return exit_for(exc).exit_code
    return 0


def main() -> None:
    options = quick_probe_options(sys.argv[1:], os.environ)
    if options is None:
        from attnsel.cli.app import main as typer_main

        typer_main()
        return
    from attnsel.cli.streams import (
        drop_unusable_terminal_size,
        guarded_stdout,
        start_command,
    )

    start_command(sys.argv[1:])
    drop_unusable_terminal_size()
    with guarded_stdout():
        code = run_quick_probe(options)
    sys.exit(code)
