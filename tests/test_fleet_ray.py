"""`probe --ray` and `preflight --ray` against a real Ray cluster on this machine (no mock).

`ray.cluster_utils.Cluster` starts one raylet per simulated node. Each raylet gets its own
environment, as each machine of a real cluster has its own: ATTNSEL_NVML_SCENARIO gives the node
its NVML (recorded and hand-built scenarios of tests/fixtures/probe/), CUDA_VISIBLE_DEVICES what
the node hides, `num_gpus` what Ray schedules there. Our task reaches each node through Ray's own
node-affinity scheduling and finds that environment in the worker Ray starts there.

Kept small for CI (2 cores): one module-scoped cluster of 5 raylets, 1 CPU and 78 MiB of object
store each, no dashboard; slower cases live in test_fleet_ray_slow.py.
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "probe"
SMALL = {"num_cpus": 1, "object_store_memory": 78 * 2**20}
SCENARIO = "ATTNSEL_NVML_SCENARIO"


def scenario_env(name, **extra):
    return {SCENARIO: str(FIXTURES / name), **extra}


def uuids(name):
    calls = json.loads((FIXTURES / name).read_text())["calls"]
    return set(calls["nvmlDeviceGetUUID"].values())


# What each simulated node is; the head is CPU-only and has no NVIDIA driver, as head nodes often are.
NODES = {
    "h100": dict(num_gpus=8, env_vars=scenario_env("h100_sxm_x8_nvlink.json")),
    "h100-half": dict(num_gpus=4, env_vars=scenario_env("h100_sxm_x8_nvlink.json", CUDA_VISIBLE_DEVICES="4,5,6,7")),
    # Ray >= 2.56 blanks CUDA_VISIBLE_DEVICES in a task holding no GPU only on this opt-in:
    "l40s": dict(num_gpus=2, env_vars=scenario_env("l40s_x2_pcie.json", RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="1")),
    "no-driver": dict(num_gpus=8, env_vars=scenario_env("driver_not_loaded_torch_no_gpu.json")),
}


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        include_dashboard=False, env_vars=scenario_env("nvml_missing.json"), **SMALL))
    ids = {"head": cluster.head_node.node_id}
    try:
        for name, args in NODES.items():
            ids[name] = cluster.add_node(**args, **SMALL).node_id
        cluster.wait_for_nodes()
        yield cluster.address, ids
    finally:
        cluster.shutdown()


def invoke(*args):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def probe_doc(cluster):
    result = invoke("probe", "--ray", cluster[0], "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def by_node_id(document):
    return {n["node_id"]: n for n in document["nodes"]}


def test_probe_over_ray_answers_per_node_through_node_affinity(cluster, probe_doc):
    _address, ids = cluster
    doc = probe_doc
    nodes = by_node_id(doc)
    assert set(nodes) == set(ids.values())
    assert doc["summary"]["answered"] == 5 and doc["summary"]["unanswered"] == []
    # Each node answered with its own NVML: the UUIDs prove which machine the task ran on.
    h100 = nodes[ids["h100"]]["probe"]
    assert {g["uuid"] for g in h100["gpus"]} == uuids("h100_sxm_x8_nvlink.json")
    assert h100["nvlink"]["fully_connected"] is True
    half = nodes[ids["h100-half"]]["probe"]
    assert half["cuda_visible_devices"] == "4,5,6,7"
    assert [g["physical_index"] for g in half["gpus"]] == [4, 5, 6, 7]
    l40s = nodes[ids["l40s"]]["probe"]
    assert {g["name"] for g in l40s["gpus"]} == {"NVIDIA L40S"}
    assert l40s["nvlink"]["fully_connected"] is False
    assert nodes[ids["l40s"]]["summary"]["notes"] == [
        "Ray set CUDA_VISIBLE_DEVICES='' in this task because it holds no GPU (RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1); "
        "the probe shows every GPU NVML sees here. vLLM's workers see the GPUs Ray gives them (compare Ray's GPU count)"]
    assert l40s["cuda_visible_devices"] is None  # probed as the node's own environment has it
    broken = nodes[ids["no-driver"]]
    assert broken["status"] == "problem"
    assert broken["probe"]["source"] == "none"
    assert any("Driver Not Loaded" in p for p in broken["summary"]["problems"])
    assert any("Ray schedules 8 GPU(s) here but 0 usable" in p for p in broken["summary"]["problems"])
    head = nodes[ids["head"]]
    assert head["is_head"] is True and head["summary"]["gpu_node"] is False and head["status"] == "ok"


def test_probe_over_ray_says_what_differs_and_where(cluster, probe_doc):
    address, ids = cluster
    doc = probe_doc
    labels = {n["node_id"]: n["label"] for n in doc["nodes"]}
    assert doc["summary"]["homogeneous"] is False
    differ = {d["attribute"]: d for d in doc["summary"]["differences"]}
    assert differ["GPU model"]["common"] == "NVIDIA H100 80GB HBM3"
    assert differ["GPU model"]["others"] == [{"node": labels[ids["l40s"]], "value": "NVIDIA L40S"}]
    assert differ["compute capability"]["others"] == [{"node": labels[ids["l40s"]], "value": "8.9"}]
    assert {o["node"] for o in differ["NVLink (vLLM is_fully_connected)"]["others"]} == {labels[ids["l40s"]]}
    assert {o["node"] for o in differ["CUDA_VISIBLE_DEVICES"]["others"]} == {labels[ids["h100-half"]]}
    assert {o["node"] for o in differ["GPU source"]["others"]} == {labels[ids["no-driver"]]}

    text = invoke("probe", "--ray", address, "--require-nvlink")
    assert text.exit_code == 1
    assert "Homogeneous: no" in text.stdout
    assert f"  GPU model: NVIDIA H100 80GB HBM3 on 2 node(s); {labels[ids['l40s']]}: NVIDIA L40S" in text.stdout
    assert text.stderr.startswith("error: requirement failed: --require-nvlink: ")
    assert f"{labels[ids['l40s']]}: vLLM's is_fully_connected would be False" in text.stderr


def test_preflight_over_ray_fails_mixed_fleet_with_github_annotations(cluster):
    address, _ids = cluster
    result = invoke("preflight", "--ray", address, "--model", "llama-3.1-8b", "-tp", "4", "-pp", "2",
                    "--format", "github")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    errors = [line for line in lines if line.startswith("::error::")]
    assert any(line.startswith("::error::attnsel preflight same-model [fleet]: different compute capabilities")
               for line in errors)
    assert any("gpu-count [" in line and "the probe sees none" in line for line in errors)
    assert any(line.startswith("::warning::attnsel preflight gpu-count [") and "fewer than --tensor-parallel-size 4"
               in line for line in lines)
    # The two H100 nodes host three TP groups of 4 between them; each group has NVLink.
    assert any(line.startswith("ok: placement [fleet]: TP=4 x PP=2 = 8 GPU(s)") for line in lines)
    assert lines[-1] == "Result: 14 pass, 2 warn, 2 fail -> exit 1"
