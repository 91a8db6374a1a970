"""Errors a user can cause, each mapped to a documented exit code.

Exit codes (README, "Exit codes"):
  0  success / the checked configuration would work
  1  a requirement or check failed (vLLM would raise, a preflight check failed)
  2  bad input (unknown name, malformed file, impossible shape, bad flag)
  3  an environment problem we cannot work around (e.g. a kernel library missing for `tune`)
 70  an unexpected error inside attnsel (a bug, never a verdict; sysexits.h EX_SOFTWARE)
130  interrupted (Ctrl-C), as shells report SIGINT
"""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

# Every code a command may end with (141 is the shell's SIGPIPE status: `attnsel ... | head`).
DOCUMENTED_EXIT_CODES = frozenset({EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERNAL,
                                   EXIT_INTERRUPTED})
# Where an internal error should be reported (the funnel's one line names it).
REPORT_TO = "the attnsel issue tracker"
DEBUG_ENV = "ATTNSEL_DEBUG"


class AttnselError(Exception):
    """Base class: carries a one-line message and the exit code the CLI uses."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UserInputError(AttnselError):
    """Bad input: missing/malformed file, unknown name, impossible shape."""

    exit_code = EXIT_BAD_INPUT


class CheckFailed(AttnselError):
    """A requirement was not met or vLLM would refuse the configuration."""

    exit_code = EXIT_FAILED


class EnvironmentProblem(AttnselError):
    """Something missing on this machine (a kernel library, a GPU for a GPU-only command)."""

    exit_code = EXIT_ENVIRONMENT


class OutputUnwritable(UserInputError):
    """stdout (or an output file) cannot take our output: /dev/full, a closed descriptor."""


class Interrupted(AttnselError):
    """Ctrl-C, with what was kept (e.g. tune's rows so far) and how to go on."""

    exit_code = EXIT_INTERRUPTED
