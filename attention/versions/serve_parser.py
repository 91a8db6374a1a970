"""A pasted `vllm serve` line read by the installed vLLM's own argument parser (issue 33): where the
release a command answers for is the one installed here, its parser -- not attnsel's table of the
release's flags (`serve_flags`, attention/rules/serve_line.py) -- says whether `vllm serve` would take
the line: unknown flags, a value outside a flag's choices, a malformed number, as that release words it.

Importing vLLM takes seconds, so this runs only for a pasted line and only with the release installed;
where the parser cannot be built here (vLLM missing or broken, no platform it recognises), the answer
is None and the table decides.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnsel.attention.rules.serve_line import check_serve_line_flags, serve_arguments
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.rules.serve_line import ServeLine
    from attnsel.attention.versions.profile import RuleProfile


@dataclass(frozen=True)
class ParserAnswer:
    """What the installed vLLM's `vllm serve` parser said of a line: None, or argparse's error message."""

    vllm_version: str
    error: str | None


def check_pasted_line(tokens: list[str], line: ServeLine, release: RuleProfile) -> None:
    """Bad input where `release`'s `vllm serve` would refuse the line: its own parser's answer when that
    release is the one installed here, else the release's flag table."""
    from attnsel.attention.versions.choice import choose_profile, installed_vllm_version

    installed = installed_vllm_version()
    if installed is not None and choose_profile(installed).profile.name == release.name:
        answer = installed_parser_answer(tokens)
        if answer is not None:
            if answer.error:
                raise UserInputError(f"vLLM {answer.vllm_version}'s own `vllm serve` parser refuses the pasted line: "
                                     f"{answer.error}")
            return
    check_serve_line_flags(line, release.serve_flags, release.vllm_version)


def installed_parser_answer(tokens: list[str]) -> ParserAnswer | None:
    """The installed vLLM's parser on `tokens` (`vllm serve` itself optional); None where it cannot run."""
    args = serve_arguments(tokens)
    # vLLM's logger binds to the stdout it finds at import and logs INFO lines there, and its import raises
    # Python warnings: both stay out of the command's own output (a --json stdout above all)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            version, parser = _serve_parser()
        except Exception:  # noqa: BLE001 -- no vLLM, or one that cannot build its parser here: the table decides
            return None
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(["serve", *args])
    except SystemExit as exc:
        if exc.code not in (0, None):  # argparse's error: "usage: ...\nvllm serve: error: MESSAGE"
            return ParserAnswer(version, _argparse_message(captured.getvalue()))
    except Exception as exc:  # noqa: BLE001 -- a ValueError vLLM raises while reading (e.g. `--model` misuse)
        return ParserAnswer(version, f"{type(exc).__name__}: {exc}".splitlines()[0])
    return ParserAnswer(version, None)


def _argparse_message(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if ": error: " in line]
    return lines[-1].split(": error: ", 1)[1] if lines else stderr.strip().splitlines()[-1]


def _serve_parser() -> tuple[str, argparse.ArgumentParser]:
    """vLLM's top-level parser with the `serve` subcommand, as `vllm serve` builds it (entrypoints/cli/main.py)."""
    version, parser, _serve = serve_parsers()
    return version, parser


def serve_parsers() -> tuple[str, argparse.ArgumentParser, argparse.ArgumentParser]:
    """The installed vLLM's version, its top-level parser and the `serve` subparser within it."""
    import vllm
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)
    return str(vllm.__version__), parser, serve
