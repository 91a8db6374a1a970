"""The fleet verdict and the fleet preflight on node answers built from NVML scenarios (no Ray).

Each node's report comes from a scenario replayed through our NVML facade, as the task on a node
builds it; the Ray path itself is exercised in test_fleet_ray.py. vLLM's texts come from vLLM
0.24's v1/executor/ray_utils.py, custom_all_reduce.py and distributed/utils.py.
"""

from pathlib import Path

import pytest

from attnsel.attention.model import load_model_config
from attnsel.attention.preflight import Deployment, run_fleet_preflight
from attnsel.attention.versions import select_profile
from attnsel.probe import report_fields, report_from_fields
from attnsel.probe.collect import collect_from_scenario
from attnsel.probe.fleet import FleetProbe, NodeProbe, RayNode, fleet_verdict
from attnsel.probe.nvml.replay import load_scenario
from attnsel.reports.fleet_report import fleet_preflight_json, grouped, verdict_lines

FIXTURES = Path(__file__).parent / "fixtures" / "probe"
LLAMA = load_model_config("llama-3.1-8b")
PROFILE = select_profile(None)
# the newest release answers here (no vLLM installed): its default block size (16 up to 0.33, 64 from 0.34)
BLOCK = PROFILE.profile.params["default_block_size"]


def node(label, scenario=None, ray_gpus=None, problem=None, head=False, attnsel_version="0.1.0", **env):
    report = collect_from_scenario(load_scenario(FIXTURES / scenario), env) if scenario else None
    if ray_gpus is None:
        ray_gpus = len(report.gpus) if report else 0
    ray_node = RayNode(f"{label}-node-id", f"10.0.0.{len(label)}", label, True, head, float(ray_gpus), label=label)
    return NodeProbe(ray_node, report=report, problem=problem, attnsel_version=attnsel_version)


def fleet(*nodes):
    return FleetProbe("10.0.0.1:6379", "2.60.0", "0.1.0", 60.0, 0.5, tuple(nodes))


def preflight(the_fleet, tp, pp=1, **flags):
    return run_fleet_preflight(the_fleet, LLAMA, Deployment(tensor_parallel_size=tp, **flags), pp,
                               profile=PROFILE.profile, model="llama-3.1-8b")


def checks(result, name):
    return [(c.scope, c.check) for c in result.checks if c.check.name == name]


def only(result, name):
    """The one check of that name (a fleet-wide one)."""
    (_, check), = checks(result, name)
    return check


def head():
    return node("head", "nvml_missing.json", head=True)


# --- the verdict ---------------------------------------------------------------------------------


def test_identical_gpu_nodes_are_homogeneous_and_a_cpu_head_is_left_out():
    verdict = fleet_verdict(fleet(head(), node("a", "h100_sxm_x8_nvlink.json"), node("b", "h100_sxm_x8_nvlink.json")))
    assert verdict.homogeneous is True
    assert [n.label for n in verdict.gpu_nodes] == ["a", "b"]
    assert verdict.nodes[0].status == "ok"  # no NVIDIA driver on a CPU-only head is not a problem
    lines = verdict_lines(fleet(), verdict)
    assert lines[0] == ("Homogeneous: yes -- 2 GPU node(s), each 8 x NVIDIA H100 80GB HBM3 (CC 9.0), driver 580.95.05, "
                        "CUDA 13.0, NVLink yes")
    assert "No GPU (vLLM places no GPU worker there): head" in lines


def test_name_variants_on_two_nodes_are_one_model():
    # vllm#16740 across nodes: "NVIDIA H100" and "NVIDIA H100 80GB HBM3", same PCI device id.
    data = load_scenario(FIXTURES / "h100_sxm_x8_nvlink.json")
    data["calls"]["nvmlDeviceGetName"] = {k: "NVIDIA H100" for k in data["calls"]["nvmlDeviceGetName"]}
    renamed = node("b", "h100_sxm_x8_nvlink.json")
    renamed = NodeProbe(renamed.node, report=collect_from_scenario(data, {}), attnsel_version="0.1.0")
    verdict = fleet_verdict(fleet(node("a", "h100_sxm_x8_nvlink.json"), renamed))
    assert verdict.homogeneous is True


def test_h100_and_a100_nodes_without_pci_ids_differ_in_model():
    one = node("one", "h100_a100_pci_id_zero.json", CUDA_VISIBLE_DEVICES="0")
    two = node("two", "h100_a100_pci_id_zero.json", CUDA_VISIBLE_DEVICES="1")
    verdict = fleet_verdict(fleet(one, two))
    differ = {d.attribute: d for d in verdict.differences}
    assert {differ["GPU model"].common, differ["GPU model"].others[0][1]} == {"NVIDIA H100 80GB HBM3",
                                                                              "NVIDIA A100-SXM4-80GB"}
    assert set(differ) >= {"GPU model", "compute capability", "CUDA_VISIBLE_DEVICES"}


def test_a_node_that_did_not_answer_is_named_with_its_reason():
    silent = node("c", problem="no answer within 5 s: the task did not finish", ray_gpus=8)
    verdict = fleet_verdict(fleet(node("a", "h100_sxm_x8_nvlink.json"), silent))
    assert verdict.unanswered == (("c", "no answer within 5 s: the task did not finish"),)
    assert verdict.homogeneous is True  # of the GPU nodes that answered
    assert "  c: no answer within 5 s: the task did not finish" in verdict_lines(fleet(), verdict)


def test_more_nodes_than_listed_in_text_are_counted():
    nodes = [node("big", "h100_sxm_x8_nvlink.json")] * 2 + [node(f"pc{k}", "l40s_x2_pcie.json") for k in range(12)]
    lines = verdict_lines(fleet(), fleet_verdict(fleet(*nodes)))
    model_line = next(line for line in lines if line.startswith("  GPU model:"))
    assert model_line.startswith("  GPU model: NVIDIA L40S on 12 node(s); big: NVIDIA H100 80GB HBM3, big: ")


def test_a_report_travels_as_plain_fields_and_tolerates_another_release():
    report = collect_from_scenario(load_scenario(FIXTURES / "a100_x2_mig.json"), {})
    fields = report_fields(report)
    fields["field_from_a_newer_attnsel"] = 1
    del fields["notes"]  # a field an older attnsel did not send
    back = report_from_fields(fields)
    assert back.gpus == report.gpus and back.nvlink == report.nvlink and back.notes == ()


# --- preflight across nodes ------------------------------------------------------------------------


def test_two_nvlink_nodes_pass_tp8_pp2_with_one_verdict():
    result = preflight(fleet(head(), node("a", "h100_sxm_x8_nvlink.json"), node("b", "h100_sxm_x8_nvlink.json")), 8, 2)
    assert result.ok, [c.to_dict() for c in result.checks if c.check.status != "pass"]
    assert checks(result, "placement")[0][1].message.startswith("TP=8 x PP=2 = 16 GPU(s): each of the 2 TP group(s)")
    assert [scope for scope, _ in checks(result, "interconnect")] == ["a", "b"]
    assert checks(result, "attention-verdict")[0][1].message == (
        f"one attention verdict on the one GPU model: NVIDIA H100 80GB HBM3: FLASH_ATTN, block {BLOCK}")
    assert len(grouped(result.checks)) < len(result.checks)  # the two nodes' passes share lines


def test_too_few_gpus_fail_with_vllms_placement_group_error():
    result = preflight(fleet(node("a", "l40s_x2_pcie.json"), node("b", "l40s_x2_pcie.json")), 4, 2)
    check = only(result, "placement")
    assert check.status == "fail"
    assert check.vllm_message.startswith(
        "Cannot provide a placement group requiring 8.0 GPUs (placement_group_specs=[{'GPU': 1.0}, {'GPU': 1.0}, ")
    assert "within 1800 seconds.\nTensor parallel size may exceed available GPUs in your cluster." in check.vllm_message


def test_tp_larger_than_a_node_warns_as_vllm_does_and_loses_custom_allreduce():
    result = preflight(fleet(node("a", "l40s_x2_pcie.json"), node("b", "l40s_x2_pcie.json")), 4, 1)
    placement = only(result, "placement")
    assert placement.status == "warn"
    assert placement.vllm_message.startswith("tensor_parallel_size=4 is bigger than a reserved number of GPUs (2 GPUs) "
                                             "in a node a-node-id. Tensor parallel workers can be spread out")
    spans = [c for scope, c in checks(result, "interconnect") if scope == "fleet"]
    assert spans[0].vllm_message == "Custom allreduce is disabled because this process group spans across nodes."
    assert result.ok


def test_different_capabilities_fail_and_different_attention_suggests_a_common_backend():
    result = preflight(fleet(node("h", "h100_sxm_x8_nvlink.json"), node("v", "v100_x2_old_driver.json")), 2, 2,
                       dtype="half")
    same = only(result, "same-model")
    assert same.status == "fail" and "different compute capabilities" in same.message
    verdict = only(result, "attention-verdict")
    assert verdict.status == "fail"
    assert f"NVIDIA H100 80GB HBM3: FLASH_ATTN, block {BLOCK}" in verdict.message
    assert f"Tesla V100-SXM2-32GB: TRITON_ATTN, block {BLOCK}" in verdict.message
    assert verdict.hint.startswith("pass --attention-backend TRITON_ATTN (valid on every GPU model")


def test_dtype_auto_resolving_differently_per_gpu_fails_and_the_json_says_so_per_scope():
    result = preflight(fleet(node("h", "h100_sxm_x8_nvlink.json"), node("v", "v100_x2_old_driver.json")), 2, 2)
    doc = fleet_preflight_json(result)
    verdict = next(c for c in doc["checks"] if c["name"] == "attention-verdict")
    assert (verdict["scope"], verdict["status"]) == ("fleet", "fail")
    assert verdict["message"].startswith("--dtype auto resolves differently per GPU model (NVIDIA H100 80GB HBM3: "
                                         "bfloat16; Tesla V100-SXM2-32GB: float16)")
    assert doc["deployment"]["vllm_flags"] == ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2",
                                               "--distributed-executor-backend", "ray"]
    assert set(doc["explain"]) == {"NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB"}
    assert (doc["exit_code"], doc["cluster"]["homogeneous"]) == (1, False)


def test_a_silent_gpu_node_fails_and_a_silent_cpu_node_warns():
    silent_gpu = node("g", problem="no answer within 5 s", ray_gpus=8)
    silent_cpu = node("c", problem="no answer within 5 s", ray_gpus=0)
    result = preflight(fleet(silent_cpu, node("a", "h100_sxm_x8_nvlink.json"), silent_gpu), 8)
    statuses = {scope: c.status for scope, c in checks(result, "nodes")}
    assert statuses == {"g": "fail", "c": "warn"}
    assert result.exit_code == 1


def test_nvlink_per_tp_group_and_a_lost_gpu_fail_on_their_node():
    # node m: CUDA's fastest-first order puts the two NVLink-bridged 3090s at 0-1, two 1080 Ti (no P2P) at 2-3
    mixed = node("m", "mixed_3090x2_1080tix3.json", CUDA_VISIBLE_DEVICES="0,1,2,3")
    result = preflight(fleet(node("a", "a100_x4_gpu2_lost.json"), mixed), 2, 2)
    counts = {scope: c for scope, c in checks(result, "gpu-count")}
    assert counts["a"].status == "fail" and "GPU is lost" in counts["a"].message
    inter = {scope: c for scope, c in checks(result, "interconnect")}
    assert inter["m"].status == "warn" and inter["m"].message.startswith("GPUs 2-3: TP=2: no P2P between GPU 2 and GPU 3")
    assert [scope for scope, c in checks(result, "same-model") if c.status != "pass"] == ["fleet", "m"]


@pytest.mark.parametrize("pp, split, uneven", [(2, "16,16", False), (3, "11,11,10", True)])
def test_pipeline_split_is_vllms(pp, split, uneven):
    result = preflight(fleet(node("a", "h100_sxm_x8_nvlink.json"), node("b", "h100_sxm_x8_nvlink.json")), 2, pp)
    check = only(result, "pipeline")
    assert check.message == f"PP={pp}: 32 layers split [{split}]"
    assert (check.vllm_message == f"Hidden layers were unevenly partitioned: [{split}]. This can be manually "
            "overridden using the VLLM_PP_LAYER_PARTITION environment variable") is uneven


def test_more_stages_than_layers_fail():
    nodes = [node(f"n{k}", "h100_sxm_x8_nvlink.json") for k in range(5)]
    result = preflight(fleet(*nodes), 1, 40)
    check = only(result, "pipeline")
    assert check.status == "fail" and "leaves a stage without a layer" in check.message
