"""How does `attnsel probe --ray` scale with nodes? Simulated nodes on this machine.

    python -m attnsel.bench.tools.fleet_scale --nodes 16 [--scenario h100_sxm_x8_nvlink.json] [--rounds 3]

Starts a Ray cluster of N worker raylets plus a CPU-only head (`ray.cluster_utils.Cluster`, 1 CPU
and 78 MiB of object store each, no dashboard), each node replaying the NVML scenario (default:
an 8-GPU HGX H100), then probes it `--rounds` times through the real path (`probe_fleet`: one
pinned task per node). Prints one JSON object: cluster start time; per round the wall time of
`probe_fleet` (connect + tasks + disconnect), the time from submitting the tasks to the last
answer, the slowest node's own probe time; the size of the fleet JSON and of one node's report;
the memory (RSS) of the cluster's processes before and after. The first round includes starting a
Ray worker on every node (a cold cluster); later rounds reuse them. docs/fleet-scale.md reads
these numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "probe"
SMALL: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 78 * 2**20}


def _rss_mib(root_pid: int) -> float:
    """Resident memory of `root_pid`'s descendants (the raylets, GCS and Ray workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, stack = 0, list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return round(total / 1024, 1)


def arrivals(address: str, timeout_s: float) -> dict:
    """One more round through the same calls as `probe_fleet`, recording when each answer lands:
    the first answer, the median and the last, counted from submitting the tasks."""
    import ray

    from attnsel.probe.fleet import connect, list_nodes, probe_this_node, task_options

    connect(ray, address, timeout_s)
    try:
        alive = [n for n in list_nodes(ray) if n.alive]
        remote = ray.remote(probe_this_node)
        start = time.perf_counter()
        pending = [remote.options(**task_options(ray.__version__, n.node_id)).remote() for n in alive]
        submitted = time.perf_counter() - start
        landed = []
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=timeout_s)
            if not ready:
                break
            landed.append(time.perf_counter() - start)
    finally:
        ray.shutdown()
    landed.sort()
    return {"submit_s": round(submitted, 4), "first_s": round(landed[0], 3),
            "median_s": round(landed[len(landed) // 2], 3), "last_s": round(landed[-1], 3)}


def run(nodes: int, scenario: str, rounds: int, timeout_s: float) -> dict:
    from ray.cluster_utils import Cluster

    from attnsel.probe.fleet import fleet_verdict, probe_fleet
    from attnsel.reports import fleet_probe_json

    env = {"ATTNSEL_NVML_SCENARIO": str(FIXTURES / scenario)}
    start = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **SMALL))
    try:
        for _ in range(nodes):
            cluster.add_node(num_gpus=8, env_vars=env, **SMALL)
        cluster.wait_for_nodes()
        started = time.perf_counter() - start
        rss_idle = _rss_mib(os.getpid())
        results = []
        for _ in range(rounds):
            t = time.perf_counter()
            fleet = probe_fleet(cluster.address, timeout_s)
            wall = time.perf_counter() - t
            answered = [n for n in fleet.nodes if n.report is not None]
            results.append({
                "wall_s": round(wall, 3),
                "tasks_s": fleet.elapsed_s,
                "answered": len(answered),
                "slowest_node_probe_s": max((n.seconds or 0.0) for n in fleet.nodes),
            })
        landing = arrivals(cluster.address, timeout_s)
        rss_after = _rss_mib(os.getpid())
        verdict = fleet_verdict(fleet)
        document = json.dumps(fleet_probe_json(fleet, verdict))
        node_doc = json.dumps(fleet_probe_json(fleet, verdict)["nodes"][-1])
        return {
            "nodes": nodes + 1,
            "gpu_nodes": nodes,
            "scenario": scenario,
            "cpu_cores": os.cpu_count(),
            "cluster_start_s": round(started, 2),
            "rounds": results,
            "arrivals": landing,
            "homogeneous": verdict.homogeneous,
            "fleet_json_bytes": len(document),
            "node_json_bytes": len(node_doc),
            "cluster_rss_mib_idle": rss_idle,
            "cluster_rss_mib_after_probes": rss_after,
        }
    finally:
        cluster.shutdown()


def driver_side(nodes: int, scenario: str) -> dict:
    """The driver's own work for `nodes` answers, without Ray: read each answer, the verdict, the
    JSON document, the preflight (TP=8, PP=4) and its text. What grows with the fleet on one core."""
    import io
    import pickle

    from attnsel.attention.model import load_model_config
    from attnsel.attention.preflight import Deployment, run_fleet_preflight
    from attnsel.attention.versions import select_profile
    from attnsel.probe import collect_probe, report_fields, report_from_fields
    from attnsel.probe.fleet import FleetProbe, NodeProbe, RayNode, fleet_verdict
    from attnsel.reports import fleet_probe_json, render_preflight_text

    report = collect_probe({"ATTNSEL_NVML_SCENARIO": str(FIXTURES / scenario)}, no_torch_reason="bench")
    answer = {"schema": "attnsel-node-probe/1", "report": report_fields(report)}
    wire = pickle.dumps(answer)
    timings = {}
    t = time.perf_counter()
    reports = [report_from_fields(pickle.loads(wire)["report"]) for _ in range(nodes)]
    timings["read_answers_s"] = time.perf_counter() - t
    probes = tuple(NodeProbe(RayNode(f"{k:056x}", f"10.0.{k // 250}.{k % 250}", f"gpu-{k}", True, False, 8.0,
                                     label=f"10.0.{k // 250}.{k % 250}"), report=r, attnsel_version="0.1.0")
                   for k, r in enumerate(reports))
    fleet = FleetProbe("10.0.0.1:6379", "2.60.0", "0.1.0", 60.0, 1.0, probes)
    t = time.perf_counter()
    verdict = fleet_verdict(fleet)
    timings["verdict_s"] = time.perf_counter() - t
    t = time.perf_counter()
    document = json.dumps(fleet_probe_json(fleet, verdict), indent=2)
    timings["json_s"] = time.perf_counter() - t
    config, profile = load_model_config("llama-3.1-8b"), select_profile(None)
    t = time.perf_counter()
    result = run_fleet_preflight(fleet, config, Deployment(tensor_parallel_size=8), 4, profile=profile.profile)
    timings["preflight_s"] = time.perf_counter() - t
    out = io.StringIO()
    t = time.perf_counter()
    render_preflight_text(result, out)
    timings["preflight_text_s"] = time.perf_counter() - t
    return {
        "nodes": nodes,
        "gpus": nodes * len(report.gpus),
        "answer_bytes_per_node": len(wire),
        "fleet_json_bytes": len(document),
        "preflight_text_lines": out.getvalue().count("\n"),
        "preflight_ok": result.ok,
        **{k: round(v, 4) for k, v in timings.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16, help="simulated GPU nodes (besides the head)")
    parser.add_argument("--scenario", default="h100_sxm_x8_nvlink.json", help="NVML scenario every node replays")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--driver-only", type=int, metavar="N", help="only time the driver's work for N answers "
                        "(no Ray cluster): e.g. --driver-only 100")
    args = parser.parse_args()
    if args.driver_only:
        print(json.dumps(driver_side(args.driver_only, args.scenario), indent=2))
        return
    print(json.dumps(run(args.nodes, args.scenario, args.rounds, args.timeout), indent=2))


if __name__ == "__main__":
    main()
