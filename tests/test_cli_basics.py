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
