"""`attnsel probe --ray`: our probe, once on every alive node of an existing Ray cluster.

One task per node, pinned there with Ray's NodeAffinitySchedulingStrategy(soft=False), asking
for no CPU and no GPU: NVML needs no CUDA context, and a task that holds nothing is scheduled at
once even on a node whose GPUs and CPUs vLLM has reserved. The task never falls back to
torch.cuda (that would create a CUDA context on GPUs the task does not hold). Every task runs in
parallel; the driver waits for all of them up to one deadline, cancels what is left and says
which nodes did not answer and why. Ray is imported only here, and only when asked for.

Ray and CUDA_VISIBLE_DEVICES: Ray sets CUDA_VISIBLE_DEVICES="" in a task that holds no GPU
before Ray 2.50 always, in 2.50-2.55 unless RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0, and from 2.56
only when RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1 (ray PRs #54928, #62492). vLLM's workers hold GPUs
and see the node's own value, so the task asks for the opt-out where it exists (2.50-2.55, through
the task's runtime_env) and otherwise probes every GPU with a note when Ray blanked the variable.
"""

from __future__ import annotations

import os
import platform
import socket
import threading
import time
from types import ModuleType
from typing import Any, TypedDict, cast

from attnsel.errors import EnvironmentProblem, UserInputError
from attnsel.probe.fleet.facts import (
    NODE_ANSWER_SCHEMA,
    FleetProbe,
    NodeAnswer,
    NodeProbe,
    RayNode,
    unique_labels,
)

DEFAULT_TIMEOUT_S = 60.0  # per fleet: all tasks run at once, so 100 nodes need no more than 1
CONNECT_TIMEOUT_S = 20.0  # ray.init against an address where no GCS answers waits forever
INSTALL_HINT = "pip install 'attnsel[ray]'"
OVERRIDE_ENV = "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"
NO_TORCH_OVER_RAY = (
    "over Ray the probe holds no GPU, and torch.cuda would create a CUDA context on GPUs other work may hold"
)
BLANKED_NOTE = (
    "Ray set CUDA_VISIBLE_DEVICES='' in this task because it holds no GPU ({why}); the probe shows every GPU "
    "NVML sees here. vLLM's workers see the GPUs Ray gives them (compare Ray's GPU count)"
)


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


# ---------------------------------------------------------------------------------------------
# The task that runs on each node


def probe_this_node() -> NodeAnswer:
    """Runs inside a Ray worker on one node: our probe over NVML, as plain JSON-able fields."""
    from attnsel import __version__
    from attnsel.probe.collect import collect_probe
    from attnsel.probe.facts import report_fields

    start = time.perf_counter()
    answer: NodeAnswer = {
        "schema": NODE_ANSWER_SCHEMA,
        "hostname": socket.gethostname(),
        "attnsel_version": __version__,
        "python_version": platform.python_version(),
        "notes": [],
    }
    try:
        import ray

        answer["ray_version"] = ray.__version__
        answer["node_id"] = ray.get_runtime_context().get_node_id()
        env = dict(os.environ)
        why = ray_blanked_visible_devices(ray.__version__, env)
        if why and env.get("CUDA_VISIBLE_DEVICES") == "":
            del env["CUDA_VISIBLE_DEVICES"]
            answer["notes"].append(BLANKED_NOTE.format(why=why))
        answer["report"] = report_fields(collect_probe(env, no_torch_reason=NO_TORCH_OVER_RAY))
    except Exception as exc:  # noqa: BLE001 -- the node answers with the reason, never a traceback
        answer["error"] = f"{type(exc).__name__}: {exc}"
    answer["seconds"] = round(time.perf_counter() - start, 4)
    return answer


def _ray_version(text: str) -> tuple[int, int]:
    parts = ([*text.split("."), "0"])[:2]
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def ray_blanked_visible_devices(ray_version: str, env: dict) -> str | None:
    """Why Ray would have set CUDA_VISIBLE_DEVICES to "" in a task holding no GPU, or None.

    >>> ray_blanked_visible_devices("2.49.2", {})
    'Ray 2.49.2 always does'
    >>> ray_blanked_visible_devices("2.60.0", {}) is None
    True
    >>> ray_blanked_visible_devices("2.60.0", {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"})
    'RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1'
    """
    version = _ray_version(ray_version)
    if version < (2, 50):
        return f"Ray {ray_version} always does"
    default = "1" if version < (2, 56) else "0"
    value = env.get(OVERRIDE_ENV, default).strip().lower()
    return f"{OVERRIDE_ENV}={value}" if value in ("1", "true") else None


def task_options(ray_version: str, node_id: str) -> dict:
    """ray.remote options for the probe task on one node.

    >>> node_id = "a7" * 28
    >>> sorted(task_options("2.60.0", node_id))
    ['max_retries', 'name', 'num_cpus', 'num_gpus', 'scheduling_strategy']
    >>> task_options("2.52.0", node_id)["runtime_env"]
    {'env_vars': {'RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO': '0'}}
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options: dict[str, Any] = {
        "num_cpus": 0,  # schedulable even where every CPU and GPU is reserved
        "num_gpus": 0,  # NVML needs no CUDA context
        "max_retries": 0,  # a node that died does not come back for a retry
        "name": "attnsel-probe",
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    }
    if (2, 50) <= _ray_version(ray_version) < (2, 56):
        # The documented opt-out of Ray's CUDA_VISIBLE_DEVICES="" (costs one fresh worker per node).
        options["runtime_env"] = {"env_vars": {OVERRIDE_ENV: "0"}}
    return options


# ---------------------------------------------------------------------------------------------
# The driver side


def probe_fleet(address: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S,
                connect_timeout_s: float = CONNECT_TIMEOUT_S) -> FleetProbe:
    """Connect to the cluster at `address`, probe every alive node, disconnect."""
    if timeout_s <= 0:
        raise UserInputError(f"--timeout must be more than 0 seconds, got {timeout_s:g}")
    ray = import_ray()
    from attnsel import __version__

    # --timeout bounds the whole probe as a user reads it: the connection too, when it is the shorter
    connected_here = connect(ray, address, min(connect_timeout_s, timeout_s))
    try:
        nodes = list_nodes(ray)
        alive = [n for n in nodes if n.alive]
        start = time.perf_counter()
        answers = gather(ray, alive, timeout_s)
        elapsed = time.perf_counter() - start
    finally:
        if connected_here:
            ray.shutdown()
    return FleetProbe(address, ray.__version__, __version__, timeout_s, round(elapsed, 3), tuple(answers),
                      tuple(n for n in nodes if not n.alive))


def connect(ray: ModuleType, address: str, timeout_s: float) -> bool:
    """ray.init against an existing cluster, never starting one. True when this call connected.
    ray.init blocks for good when nothing answers at the address, hence the thread and deadline."""
    if ray.is_initialized():
        return False
    refused = unreachable(address, min(timeout_s, 5.0))
    if refused:
        raise EnvironmentProblem(f"no Ray cluster reachable at {address!r}: {refused}")
    outcome: dict[str, BaseException] = {}

    def init() -> None:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR", namespace="attnsel")
        except BaseException as exc:  # noqa: BLE001 -- reported by the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=init, name="attnsel-ray-init", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise EnvironmentProblem(f"no Ray cluster answered at {address!r} within {timeout_s:g} s "
                                 "(is the address right, and is `ray status` working there?)")
    error = outcome.get("error")
    if error is not None:
        if address == "auto" and "Could not find any running Ray instance" in str(error):
            raise EnvironmentProblem("no Ray cluster found: RAY_ADDRESS is not set and no cluster runs on this "
                                     "machine; pass --ray HOST:6379 (the address `ray start --head` printed)")
        raise EnvironmentProblem(f"cannot connect to a Ray cluster at {address!r}: {type(error).__name__}: "
                                 f"{_first_line(str(error))}")
    return True


def unreachable(address: str, timeout_s: float) -> str | None:
    """Why nothing listens at the address's host:port, or None (also when the address has no
    port to try, e.g. "auto" without RAY_ADDRESS: then Ray answers quickly itself).

    >>> unreachable("not-an-address", 1.0) is None
    True
    """
    target = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
    host, _, port = target.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"


def list_nodes(ray: ModuleType) -> list[RayNode]:
    """Every node Ray's GCS knows, the head first, each with a unique short label."""
    nodes = [_ray_node(entry) for entry in ray.nodes()]
    nodes.sort(key=lambda n: (not n.alive, not n.is_head, n.address, n.node_id))
    labels = unique_labels(nodes)
    return [_with_label(n, label) for n, label in zip(nodes, labels)]


def _ray_node(entry: dict) -> RayNode:
    resources = entry.get("Resources") or {}
    accelerator = next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), None)
    return RayNode(
        node_id=str(entry.get("NodeID")),
        address=str(entry.get("NodeManagerAddress") or "?"),
        hostname=str(entry.get("NodeManagerHostname") or ""),
        alive=bool(entry.get("Alive")),
        is_head="node:__internal_head__" in resources,
        ray_gpus=float(resources.get("GPU") or 0.0),
        accelerator_type=accelerator,
        labels={k: v for k, v in (entry.get("Labels") or {}).items() if not k.startswith("ray.io/")},
        death_reason=(entry.get("DeathReasonMessage") or None) if not entry.get("Alive") else None,
    )


def _with_label(node: RayNode, label: str) -> RayNode:
    from dataclasses import replace

    return replace(node, label=label)


def gather(ray: ModuleType, nodes: list[RayNode], timeout_s: float) -> list[NodeProbe]:
    """Submit one pinned task per node, wait for all of them up to one deadline."""
    remote = ray.remote(probe_this_node)
    refs = [remote.options(**task_options(ray.__version__, n.node_id)).remote() for n in nodes]
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    for ref in pending:
        try:
            ray.cancel(ref, force=True)  # a task stuck in NVML ignores a polite cancel
        except Exception:  # noqa: BLE001 -- the answer is already "no answer"; cancelling is best effort
            pass
    done = set(ready)
    results = []
    for node, ref in zip(nodes, refs):
        if ref not in done:
            results.append(NodeProbe(node, problem=f"no answer within {timeout_s:g} s: {_STUCK}"))
        else:
            results.append(_read_answer(ray, node, ref))
    return results


_STUCK = ("the task did not finish (an NVML call that hangs, as on a GPU fallen off the bus, or a node too busy "
          "to start a Ray worker); cancelled")


class _AnswerFacts(TypedDict):
    """NodeProbe's fields taken from a node's answer as it is."""

    seconds: float | None
    hostname: str | None
    attnsel_version: str | None
    ray_version: str | None
    python_version: str | None
    notes: tuple[str, ...]


def _read_answer(ray: ModuleType, node: RayNode, ref: object) -> NodeProbe:
    from attnsel.probe.facts import report_from_fields

    try:
        received = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 -- every Ray failure becomes this node's reason
        return NodeProbe(node, problem=task_failure(exc))
    if not isinstance(received, dict) or received.get("schema") != NODE_ANSWER_SCHEMA:
        return NodeProbe(node, problem=f"unreadable answer (not {NODE_ANSWER_SCHEMA})")
    answer = cast(NodeAnswer, received)  # our schema's word: probe_this_node wrote it
    common = _AnswerFacts(  # the answer's facts every NodeProbe below carries
        seconds=answer.get("seconds"),
        hostname=answer.get("hostname"),
        attnsel_version=answer.get("attnsel_version"),
        ray_version=answer.get("ray_version"),
        python_version=answer.get("python_version"),
        notes=tuple(answer.get("notes") or ()),
    )
    if answer.get("node_id") not in (None, node.node_id):
        return NodeProbe(node, problem=f"the task ran on node {answer['node_id']}, not on this one", **common)
    if answer.get("error"):
        return NodeProbe(node, problem=f"the probe failed on the node: {answer['error']}", **common)
    try:
        report = report_from_fields(answer["report"])
    except (KeyError, TypeError, ValueError) as exc:
        version = answer.get("attnsel_version")
        return NodeProbe(node, problem=f"unreadable probe report from attnsel {version}: {type(exc).__name__}: {exc}",
                         **common)
    return NodeProbe(node, report=report, **common)


def task_failure(exc: BaseException) -> str:
    """One line for why a node's task gave no answer (Ray's exception types, by name: they moved
    between Ray releases)."""
    kind = type(exc).__name__
    text = str(getattr(exc, "cause", None) or exc)
    if "No module named 'attnsel" in text:
        return ("attnsel is not installed in the Python that runs Ray workers on this node: install the same "
                "attnsel there (for vLLM clusters: in the image every node runs)")
    if "NodeDied" in kind or "Unschedulable" in kind:
        return f"the node died or left the cluster before answering ({kind})"
    if "WorkerCrashed" in kind:
        return "the Ray worker running the probe died (e.g. a crash inside the NVML library)"
    if "RuntimeEnvSetup" in kind:
        return f"Ray could not set up the task's environment on this node: {_first_line(text)}"
    return f"{kind}: {_first_line(text)}"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines and lines[0].startswith("ray::") else (lines[0] if lines else "")
    return line[:300]
