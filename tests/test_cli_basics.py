import subprocess
import sys

from typer.testing import CliRunner

from attnsel import __version__
from attnsel.cli.app import app


def test_version_flag_prints_the_package_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"attnsel {__version__}"


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "attnsel", "--version"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert __version__ in out.stdout


def test_a_reader_that_leaves_early_is_not_reported_as_a_vllm_failure():
    # `attnsel explain | head -1`: exit 1 would mean "vLLM would raise"; end by SIGPIPE instead.
    # The reader is gone before the child prints anything, so its first write hits a closed pipe.
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "attnsel", "explain", "--gpu", "H100"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGPIPE, proc.stderr.read()[-500:]
