"""`--ray` without a cluster: Ray missing, nothing listening, flags that need (or refuse) --ray,
and how Ray's failures become one line per node. No Ray cluster is started here."""

import doctest
import importlib
import sys

import pytest
from test_fleet_verdict import fleet, node
from typer.testing import CliRunner

from attnsel.cli.app import app
from attnsel.probe import fleet_requirements
from attnsel.probe.fleet import fleet_verdict

# Import Ray (if installed) while collecting: before the tests run, pytest imports the repository
# root's __init__.py under the root folder's name, which shadows Ray in a checkout named `ray`.
try:
    import ray  # noqa: F401
except ImportError:
    pass


def invoke(*args, **env):
    return CliRunner().invoke(app, list(args), env=env or None)


@pytest.mark.parametrize("command", [["probe", "--ray"], ["preflight", "--model", "llama-3.1-8b", "--ray"]])
def test_without_ray_installed_one_line_and_exit_3(monkeypatch, command):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = invoke(*command)
    assert result.exit_code == 3
    assert result.stderr == "error: --ray needs Ray, which is not installed here: pip install 'attnsel[ray]'\n"
    assert result.stdout == ""


def test_a_port_that_listens_but_is_no_ray_cluster_answers_within_timeout():
    """Something listens (a web server, a port forward) but no Ray GCS answers: ray.init blocks for good, and
    `--timeout` bounds the wait for it too (it waited a fixed 20 s, whatever --timeout said)."""
    pytest.importorskip("ray")
    import socket
    import subprocess

    with socket.socket() as listener:  # accepts connections into its backlog and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "attnsel", "probe", "--ray", f"127.0.0.1:{port}", "--timeout", "2"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert f"error: no Ray cluster answered at '127.0.0.1:{port}' within 2 s" in done.stderr.splitlines()[0]
    assert done.stdout == ""


def test_no_cluster_at_the_address_one_line_and_exit_3():
    pytest.importorskip("ray")
    result = invoke("probe", "--ray", "127.0.0.1:1", "--json")
    assert result.exit_code == 3
    assert result.stderr.startswith("error: no Ray cluster reachable at '127.0.0.1:1': 127.0.0.1:1: ")
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_auto_without_a_cluster_says_how_to_name_one(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", "/nonexistent-attnsel-test")  # no local cluster to find there
    result = invoke("probe", "--ray")
    assert result.exit_code == 3
    assert result.stderr == ("error: no Ray cluster found: RAY_ADDRESS is not set and no cluster runs on this machine; "
                             "pass --ray HOST:6379 (the address `ray start --head` printed)\n")


@pytest.mark.parametrize("args, message", [
    (["probe", "--timeout", "5"], "--timeout is for --ray"),
    (["probe", "--ray", "10.0.0.1:6379", "--measure-p2p"], "--measure-p2p times copies on the GPUs"),
    (["probe", "--ray", "10.0.0.1:6379", "--timeout", "0"], "--timeout must be more than 0 seconds"),
    (["preflight", "--model", "llama-3.1-8b", "-pp", "0", "--ray"], "--pipeline-parallel-size must be >= 1"),
    (["preflight", "--model", "llama-3.1-8b", "--ray", "--gpu", "H100"], "--ray checks the cluster's own GPUs"),
])
def test_flags_that_need_or_refuse_ray_are_bad_input(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}")


def test_require_options_hold_on_every_gpu_node_and_a_silent_node_fails_them():
    the_fleet = fleet(node("a", "h100_sxm_x8_nvlink.json"), node("p", "l40s_x2_pcie.json"),
                      node("s", problem="no answer within 5 s", ray_gpus=8))
    results = {r.check: r for r in fleet_requirements(the_fleet, fleet_verdict(the_fleet), 4, "9.0", True, True)}
    assert not results["--require-gpus 4"].ok
    assert results["--require-gpus 4"].detail == ("p: 2 usable GPU(s) visible, need 4; s did not answer")
    assert results["--require-capability 9.0"].detail.startswith("p: GPU 0 NVIDIA L40S has 8.9")
    assert results["--require-nvlink"].detail.startswith("p: vLLM's is_fully_connected would be False")
    assert "GPU nodes differ: NVIDIA " in results["--require-same-model"].detail


def test_ray_failures_become_one_line_per_node():
    exceptions = pytest.importorskip("ray.exceptions")
    from attnsel.probe.fleet.collect import task_failure

    assert task_failure(exceptions.WorkerCrashedError()).startswith("the Ray worker running the probe died")
    assert task_failure(exceptions.NodeDiedError("x")).startswith("the node died or left the cluster")
    missing = ModuleNotFoundError("No module named 'attnsel'")
    assert task_failure(missing).startswith("attnsel is not installed in the Python that runs Ray workers")


@pytest.mark.parametrize("module", ["attnsel.probe.fleet.collect", "attnsel.probe.fleet.facts", "attnsel.cli.fleet_cmd"])
def test_doctests_of_the_fleet_modules_pass(module):
    if module == "attnsel.probe.fleet.collect":
        pytest.importorskip("ray")  # task_options builds Ray's scheduling strategy
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted >= 1 and result.failed == 0
