"""NVML calls asked ahead on threads (probe/nvml/prefetch.py, docs/probe.md "Speed") change nothing
the probe reports: over every recorded scenario, with several CUDA_VISIBLE_DEVICES settings, the
`probe --json` document, the failures in their order and the set of NVML calls are those of
ATTNSEL_PROBE_THREADS=1 (one call after another). The calls really are in flight together, what is
asked ahead is exactly what the readers ask (no drift between the call lists and the readers), and a
call that hangs on a worker thread does not keep the process alive. Replayed through our own facade."""

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

import attnsel
from attnsel.probe import collect
from attnsel.probe.collect import collect_probe
from attnsel.probe.nvml import THREADS_ENV_VAR, ReplayFacade, ReplayTorch, gpu_calls
from attnsel.probe.nvml.replay import load_scenario
from attnsel.reports.probe_document import probe_json

FIXTURES = Path(__file__).parent / "fixtures" / "probe"
SCENARIOS = [*sorted(p.name for p in FIXTURES.glob("*.json")), "hangs/h100_x8_nvml_hangs.json"]
SERIAL = {THREADS_ENV_VAR: "1"}
VISIBLE = {  # CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER settings; "uuid1": GPU 1's UUID, as a prefix
    "unset": {},
    "1,0": {"CUDA_VISIBLE_DEVICES": "1,0"},
    "7,3": {"CUDA_VISIBLE_DEVICES": "7,3"},
    "2,0,1 by bus": {"CUDA_VISIBLE_DEVICES": "2,0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    "empty": {"CUDA_VISIBLE_DEVICES": ""},
    "uuid1,0": {"CUDA_VISIBLE_DEVICES": "uuid1,0"},
}


def scenario(name):
    data = load_scenario(FIXTURES / name)
    for answers in data["calls"].values():  # a hang of 600 s replays as 0.2 s here
        for key, answer in answers.items():
            if isinstance(answer, dict) and "delay_s" in answer:
                answers[key] = {**answer, "delay_s": 0.2}
    return data


def visible_env(data, setting):
    env = dict(VISIBLE[setting])
    uuid = (data["calls"].get("nvmlDeviceGetUUID") or {}).get("1")
    if "uuid1" in env.get("CUDA_VISIBLE_DEVICES", ""):
        env["CUDA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"].replace(
            "uuid1", uuid[:12] if isinstance(uuid, str) else "GPU-none")
    return env


def run(data, env, facade=None):
    """(the --json document, the failures, the calls the facade was asked) for one probe."""
    facade = facade or ReplayFacade(data)
    sessions = []

    class Kept(collect.NvmlSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sessions.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(collect, "NvmlSession", Kept)
        report = collect_probe(env, nvml=facade, torch=ReplayTorch(data))
    failures = [f for s in sessions for f in s.failures]
    return json.dumps(probe_json(report), sort_keys=True), failures, facade, sessions


@pytest.mark.parametrize("setting", sorted(VISIBLE))
@pytest.mark.parametrize("name", SCENARIOS)
def test_asking_ahead_reports_exactly_what_one_call_after_another_reports(name, setting):
    data = scenario(name)
    env = visible_env(data, setting)
    serial_doc, serial_failures, serial_facade, _ = run(data, {**env, **SERIAL})
    doc, failures, facade, sessions = run(data, env)
    assert doc == serial_doc
    assert failures == serial_failures  # the same failures in the same order
    assert Counter(facade.asked) == Counter(serial_facade.asked)  # no call more, none fewer
    assert all(s.ahead is None or not s.ahead.unconsumed() for s in sessions)


def test_nvml_errors_are_reported_in_the_same_order_both_ways():
    data = scenario("a100_x4_gpu2_lost.json")
    _, serial_failures, _, _ = run(data, SERIAL)
    _, failures, _, _ = run(data, {})
    assert len(serial_failures) > 1 and [f.describe() for f in failures] == [f.describe() for f in serial_failures]


class Recorder(ReplayFacade):
    """The replay, noting which thread asked each call."""

    def __init__(self, data):
        super().__init__(data)
        self.threads: list[tuple[str, tuple, str]] = []

    def call(self, function, *args):
        self.threads.append((function, args, threading.current_thread().name))
        return super().call(function, *args)


@pytest.mark.parametrize("name, setting", [
    ("h100_sxm_x8_nvlink.json", "unset"), ("h100_sxm_x8_nvlink.json", "7,3"),
    ("a100_x4_gpu2_lost.json", "unset"), ("a100_x4_gpu2_lost.json", "2,0,1 by bus"),
    ("recorded_h200x2.json", "1,0"), ("a100_x2_mig.json", "unset"),
])
def test_what_is_asked_ahead_is_what_the_readers_ask(name, setting):
    data = scenario(name)
    env = visible_env(data, setting)
    serial = Recorder(data)
    run(data, {**env, **SERIAL}, serial)
    ahead = Recorder(data)
    run(data, env, ahead)
    on_workers = [(f, a) for f, a, t in ahead.threads if t.startswith("attnsel-nvml")]
    on_caller = [(f, a) for f, a, t in ahead.threads if not t.startswith("attnsel-nvml")]
    assert not any(t.startswith("attnsel-nvml") for *_, t in serial.threads)
    # every call asked ahead was one the serial readers ask, and every other call is still asked once
    assert Counter(on_workers) + Counter(on_caller) == Counter((f, a) for f, a, _ in serial.threads)
    # no unconditional per-GPU or per-pair query was left to the caller (MIG slices' refs are "i:j")
    ahead_functions = {f for f, _ in on_workers}
    assert {"nvmlDeviceGetName", "nvmlDeviceGetMaxClockInfo"} <= ahead_functions
    left = [(f, a) for f, a in on_caller if f in ahead_functions and not isinstance(a[0], str)]
    assert left == []
    if any(f == "nvmlDeviceGetP2PStatus" for f, *_ in serial.threads):  # two or more whole GPUs visible
        assert {"nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor"} <= ahead_functions


class Rendezvous(ReplayFacade):
    """The replay, but the first two name queries each wait until the other one is in flight."""

    def __init__(self, data, timeout):
        super().__init__(data)
        self.barrier = threading.Barrier(2, timeout=timeout)
        self.waits = 0
        self.lock = threading.Lock()

    def call(self, function, *args):
        if function == "nvmlDeviceGetName":
            with self.lock:
                self.waits += 1
                mine = self.waits
            if mine <= 2:
                self.barrier.wait()  # BrokenBarrierError: the other one never came
        return super().call(function, *args)


@pytest.mark.parametrize("env, together", [({}, True), (SERIAL, False)], ids=["ahead", "serial"])
def test_calls_asked_ahead_are_in_flight_together(env, together):
    data = scenario("h100_sxm_x8_nvlink.json")
    facade = Rendezvous(data, timeout=5 if together else 0.5)
    doc, failures, _, _ = run(data, env, facade)
    broken = [f for f in failures if f.error == "BrokenBarrierError"]
    names = [g["name"] for g in json.loads(doc)["gpus"]]
    if together:
        assert broken == [] and names == ["NVIDIA H100 80GB HBM3"] * 8
    else:  # one call after another: the first name query waits alone and the barrier breaks
        assert broken and broken[0].function == "nvmlDeviceGetName"


HUNG_EXIT = """
import sys
from attnsel.probe.nvml import NvmlSession, ReplayFacade, gpu_calls
facade = ReplayFacade({"calls": {"nvmlDeviceGetName": {"0": {"delay_s": 600, "answer": "GPU"}}}})
facade.init()
session = NvmlSession(facade, threads=4)
session.prefetch(gpu_calls(1))
session.close()
print("returned")
"""


def test_a_hung_call_asked_ahead_does_not_keep_the_process_alive():
    # Nothing in the probe asks ahead a call its readers would not ask (see above), so a hang there
    # holds the probe as long as it held it before; this is the case where the caller stopped
    # reading (an exception, Ctrl-C): the worker is a daemon, so the process still exits.
    importable = Path(attnsel.__file__).parent.parent  # where `import attnsel` finds this checkout
    done = subprocess.run([sys.executable, "-c", HUNG_EXIT], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(importable)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "returned"


def test_the_reader_lists_its_calls_in_one_place():
    # gpu_calls lists every GPU's first question before any second one (the first call on a GPU is slow)
    calls = gpu_calls(3)
    assert [a[0] for _, a in calls[:3]] == [0, 1, 2] and len({f for f, _ in calls[:3]}) == 1
    assert len(calls) == 3 * len(gpu_calls(1))
