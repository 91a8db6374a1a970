"""`attnsel tune --gpus all|0,1,...`: one lane of workers per GPU, the grid split between them.

Rows timed on different GPUs are only comparable if the GPUs time the same work the same: one
more GPU of a model is not always one more identical GPU (clocks, thermals, a noisy neighbour,
a throttled card). So before the lanes start, one reference row (the first planned shape of the
first backend) is timed on every GPU at once, and each GPU is compared with the first by the
same noise gate the recommendation uses (bench/timing/stats.py `compare`). If any differs beyond noise,
the sweep does not mix GPUs: it runs on the first GPU alone and says why. Every row records the
GPU that timed it (`gpu`), and the document keeps the calibration.

Split (bench/sweep/lanes.py): whole backend groups per lane, greedily by estimated cost, then some
of a backend's block sizes moved to another lane while that lowers the most loaded lane's estimated
cost; FLASHINFER last in its lane (its JIT pre-build overlaps the others).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnsel.bench.sweep import results as R
from attnsel.bench.sweep.lanes import assign_lanes, lane_facts, merge_lane_results
from attnsel.bench.timing import stats as T
from attnsel.errors import UserInputError
from attnsel.files import shown_path

if TYPE_CHECKING:
    from attnsel.bench.plan import Plan
    from attnsel.bench.sweep.run import SweepOptions, SweepProgress

GroupOrder = list[tuple[str, list[dict]]]  # (backend, its items) in the order the groups run


def gpu_ordinals(value: str | None) -> str | list[str] | None:
    """`--gpus` as written, checked before any GPU is asked: None, "all" or ordinals ["0", "1"].

    >>> gpu_ordinals(" ALL "), gpu_ordinals("0, 1")
    ('all', ['0', '1'])
    """
    if value is None:
        return None
    text = value.strip().lower()
    if text == "all":
        return "all"
    parts = [p.strip() for p in text[:4096].split(",") if p.strip()]
    # at most 4 digits an ordinal (int() of thousands of digits raises); more GPUs than any machine
    if not parts or len(text) > 4096 or not all(p.isdigit() and len(p) <= 4 for p in parts):
        raise UserInputError(f"--gpus takes 'all' or CUDA ordinals like 0,1, got {shown_path(value)}")
    if len(set(parts)) != len(parts):
        raise UserInputError(f"--gpus lists a GPU twice: {shown_path(value)}")
    return parts


def parse_gpus(value: str | None, visible_count: int) -> list[str] | None:
    """`--gpus all` or `0,1`: CUDA ordinals of this process (as torch numbers them here).

    >>> parse_gpus("all", 2), parse_gpus("1", 2), parse_gpus(None, 2)
    (['0', '1'], ['1'], None)
    """
    parts = gpu_ordinals(value)
    if parts is None:
        return None
    if parts == "all":
        if visible_count < 1:
            raise UserInputError("--gpus all: no GPU is visible here")
        return [str(i) for i in range(visible_count)]
    bad = [p for p in parts if int(p) >= visible_count]
    if bad:
        raise UserInputError(f"--gpus {value}: {visible_count} GPU(s) visible here (0..{visible_count - 1}), "
                             f"no GPU {', '.join(bad)}")
    return [str(int(p)) for p in parts]


def visible_entry(ordinal: str, env: dict | None = None) -> str:
    """What a worker's CUDA_VISIBLE_DEVICES must hold to see exactly this process's GPU `ordinal`:
    the same entry of our own CUDA_VISIBLE_DEVICES when it is set (an index, UUID or MIG id,
    probe/visible_devices.py reads them all), else the ordinal itself.

    >>> visible_entry("1", {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}), visible_entry("1", {})
    ('GPU-bbb', '1')
    """
    current = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if current is None or not current.strip():
        return str(ordinal)
    entries = [e.strip() for e in current.split(",") if e.strip()]
    return entries[int(ordinal)] if int(ordinal) < len(entries) else str(ordinal)


@dataclass
class Lane:
    """Where a run of backend groups executes: its workers' extra environment (--gpus: the GPU
    they see) and what every row it produces records about it."""

    label: str | None = None  # the GPU as given to --gpus (a CUDA ordinal of this process)
    env: dict | None = None

    def log_name(self, backend: str) -> str:
        return f"worker-{backend}" + (f"-gpu{self.label}" if self.label is not None else "") + ".log"


def gpu_lane(gpu: str) -> tuple[str, dict]:
    """(label, worker env) for one --gpus entry: the worker sees only that GPU."""
    return gpu, {"CUDA_VISIBLE_DEVICES": visible_entry(gpu)}


def same_model_reason(devices: list[dict]) -> str | None:
    """Why these GPUs cannot share one sweep (None: one model): rows from different GPU models
    would rank their kernels, not the backends."""
    kinds = {(d.get("name"), tuple(d.get("capability") or ())) for d in devices}
    if len(kinds) <= 1:
        return None
    listed = "; ".join(f"GPU {d.get('ordinal')}: {d.get('name')} (CC {'.'.join(map(str, d.get('capability') or ()))})"
                       for d in devices)
    return f"--gpus needs one GPU model, these differ: {listed}"


def calibration_verdict(per_gpu: dict[str, dict | None]) -> tuple[bool, list[str]]:
    """(the GPUs agree, one line per GPU compared with the first) from each GPU's timing of the
    same reference row (timing dicts as rows carry them)."""
    gpus = list(per_gpu)
    if not gpus:
        return False, ["no GPU timed the reference row"]
    first = per_gpu[gpus[0]]
    if first is None:
        return False, [f"GPU {gpus[0]} could not time the reference row"]
    base = T.TimingStats.from_dict(first)
    agree, lines = True, []
    for gpu in gpus[1:]:
        timing = per_gpu[gpu]
        if timing is None:
            agree = False
            lines.append(f"GPU {gpu} could not time the reference row")
            continue
        result = T.compare(T.TimingStats.from_dict(timing), base)
        same = result.verdict == "noisy"
        agree = agree and same
        lines.append(f"GPU {gpu} vs GPU {gpus[0]}: {timing['median_ms'] * 1e3:.1f} us vs {first['median_ms'] * 1e3:.1f} us, "
                     + ("within noise" if same else f"{result.verdict} ({result.reason})"))
    return agree, lines


def calibrate(order: GroupOrder, plan: Plan, options: SweepOptions, gpus: list[str], output_dir: Path) -> dict:
    """Times the first planned row of the first backend on every GPU at once."""
    from attnsel.bench.sweep.groups import run_backend_group

    backend, items = order[0]
    item = dict(items[0], key=items[0]["key"] + "|calibration", check=False)
    timings: dict[str, dict | None] = {}

    def one(gpu: str) -> None:
        lane = Lane(*gpu_lane(gpu))
        rows: list[dict] = []
        run_backend_group(backend, [item], plan.shape.to_dict(), options,
                          output_dir / lane.log_name(f"{backend}-calibration"), on_row=rows.append, env=lane.env)
        ok = [r for r in rows if r.get("status") == R.STATUS_OK]
        timings[gpu] = ok[0]["timing"] if ok else None

    threads = [threading.Thread(target=one, args=(gpu,), daemon=True) for gpu in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    agree, lines = calibration_verdict({g: timings.get(g) for g in gpus})
    return {"backend": backend, "block_size": item["block_size"], "workload": item["workload"]["label"],
            "per_gpu": timings, "agree": agree, "comparisons": lines}


def run_on_gpus(order: GroupOrder, plan: Plan, options: SweepOptions, output_dir: Path, writer: R.ResultsWriter,
                progress: SweepProgress, enrich: Callable[[dict], dict], outcomes: dict, infos: dict,
                facts: dict, *, run_groups: Callable[..., None], prespawn_lane: Callable[..., dict]) -> None:
    """Calibrate, then one lane per GPU in parallel (or the first GPU alone when they disagree);
    `facts` receives the calibration and the lanes (tune.json "gpus"). Each lane's first workers
    import while the GPUs are calibrated (on 2 x H200 the lanes' exposed starts, ~16 s each, came
    after a ~11 s calibration: docs/tune-performance.md); they are dropped if the lanes are not mixed.
    `run_groups` and `prespawn_lane` run one lane (bench/sweep/run.py hands them in: that module
    runs this one, not the other way)."""
    from attnsel.bench.sweep.worker_process import stop_all_workers

    gpus = list(options.gpus or [])
    lanes = assign_lanes(order, len(gpus))
    early: dict[str, dict] = {}
    try:
        for gpu, lane_order in zip(gpus, lanes):
            early[gpu] = prespawn_lane(lane_order, plan, options, output_dir, Lane(*gpu_lane(gpu)))
        calibration = calibrate(order, plan, options, gpus, output_dir)
    except BaseException:
        _kill_waiting(early)
        raise
    facts["calibration"] = calibration
    if not calibration["agree"]:
        _kill_waiting(early)
        early, gpus = {}, gpus[:1]
        lanes = assign_lanes(order, 1)
    facts.update(lane_facts(gpus, lanes))
    errors: list[BaseException] = []
    # each lane its own outcomes/infos by backend (a backend may run in two lanes), merged below
    lane_outcomes: dict[str, dict] = {gpu: {} for gpu in gpus}
    lane_infos: dict[str, dict] = {gpu: {} for gpu in gpus}

    def lane_run(gpu: str, lane_order: GroupOrder) -> None:
        try:
            run_groups(lane_order, plan, options, output_dir, writer, progress, enrich, lane_outcomes[gpu],
                       lane_infos[gpu], Lane(*gpu_lane(gpu)), prespawned=early.get(gpu))
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=lane_run, args=(gpu, lane_order), daemon=True)
               for gpu, lane_order in zip(gpus, lanes)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)  # wakes up for Ctrl-C
    except BaseException:
        stop_all_workers()  # the lanes' workers run in their own sessions: nothing else stops them
        raise
    finally:
        merge_lane_results(gpus, lanes, lane_outcomes, lane_infos, outcomes, infos)
    if errors:
        raise errors[0]


def _kill_waiting(early: dict[str, dict]) -> None:
    for workers in early.values():
        for worker in workers.values():
            worker.kill()
