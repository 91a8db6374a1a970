"""Slow `--ray` cases on real local Ray clusters (run with --run-slow): a node whose NVML hangs
(the deadline, the cancel, the reason), a node that died, and 16 simulated nodes at once.
Timings are measured by bench/tools/fleet_scale.py, not asserted here."""

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "probe"
SMALL = {"num_cpus": 1, "object_store_memory": 78 * 2**20}


def scenario(name):
    return {"ATTNSEL_NVML_SCENARIO": str(FIXTURES / name)}


def invoke(*args):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def cluster():
    cluster = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **SMALL))
    try:
        yield cluster
    finally:
        cluster.shutdown()


def test_a_hung_node_is_cut_off_at_the_deadline_and_a_dead_node_is_listed(cluster):
    healthy = cluster.add_node(num_gpus=8, env_vars=scenario("h100_sxm_x8_nvlink.json"), **SMALL).node_id
    hung = cluster.add_node(num_gpus=8, env_vars=scenario("hangs/h100_x8_nvml_hangs.json"), **SMALL).node_id
    gone = cluster.add_node(num_gpus=8, env_vars=scenario("h100_sxm_x8_nvlink.json"), **SMALL)
    cluster.wait_for_nodes()
    cluster.remove_node(gone)

    start = time.perf_counter()
    result = invoke("probe", "--ray", cluster.address, "--timeout", "8", "--json")
    took = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    assert took < 8 + 10  # the deadline holds: the hung NVML call (600 s) is not waited for
    doc = json.loads(result.stdout)
    nodes = {n["node_id"]: n for n in doc["nodes"]}
    assert nodes[healthy]["status"] == "ok"
    assert nodes[hung]["status"] == "no answer"
    assert nodes[hung]["problem"].startswith("no answer within 8 s: the task did not finish (an NVML call that hangs")
    assert doc["summary"]["unanswered"] == [{"node": nodes[hung]["label"], "reason": nodes[hung]["problem"]}]
    assert [d["node_id"] for d in doc["dead_nodes"]] == [gone.node_id]

    pre = invoke("preflight", "--ray", cluster.address, "--timeout", "8", "--model", "llama-3.1-8b", "-tp", "8",
                 "--format", "github")
    assert pre.exit_code == 1
    assert f"::error::attnsel preflight nodes [{nodes[hung]['label']}]: did not answer: no answer within 8 s" in pre.stdout


def test_sixteen_nodes_answer_at_once(cluster):
    ids = {cluster.add_node(num_gpus=8, env_vars=scenario("h100_sxm_x8_nvlink.json"), **SMALL).node_id
           for _ in range(16)}
    cluster.wait_for_nodes()
    result = invoke("probe", "--ray", cluster.address, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    gpu_nodes = [n for n in doc["nodes"] if n["summary"]["gpu_node"]]
    assert {n["node_id"] for n in gpu_nodes} == ids
    assert all(n["status"] == "ok" and len(n["probe"]["gpus"]) == 8 for n in gpu_nodes)
    assert doc["summary"]["homogeneous"] is True and doc["summary"]["gpus"] == 128

    pre = invoke("preflight", "--ray", cluster.address, "--model", "llama-3.1-8b", "-tp", "8", "-pp", "16")
    assert pre.exit_code == 0, pre.output
    assert "PASS  placement          [fleet] TP=8 x PP=16 = 128 GPU(s): each of the 16 TP group(s) fits" in pre.stdout
