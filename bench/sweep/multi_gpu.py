"""`attnsel tune --gpus all|0,1,...`: one lane of workers per GPU, the grid split between them.

Rows timed on different GPUs are only comparable if the GPUs time the same work the same: one
more GPU of a model is not always one more identical GPU (clocks, thermals, a noisy neighbour,
a throttled card). So before the lanes start, one reference row (the first planned shape of the
first backend) is timed on every GPU at once, and each GPU is compared with the first by the
same noise gate the recommendation uses (bench/timing/stats.py `compare`). If any differs beyond noise,
the sweep does not mix GPUs: it runs on the first GPU alone and says why. Every row records the
GPU that timed it (`gpu`), and the document keeps the calibration.

Split: whole backend groups per lane (a backend's rows share one worker, its imports and its JIT),
greedily by estimated cost, FLASHINFER last in its lane (its JIT pre-build overlaps the others).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Optional

from attnsel.bench.sweep import results as R
from attnsel.bench.timing import stats as T
from attnsel.errors import UserInputError
from attnsel.files import shown_path

# Rough cost of a backend group, in "rows": its rows plus a start-up charge (imports, cold JIT).
STARTUP_COST_ROWS = {"FLASHINFER": 60, "FLEX_ATTENTION": 30}
DEFAULT_STARTUP_COST_ROWS = 20


def gpu_ordinals(value: Optional[str]):
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


def parse_gpus(value: Optional[str], visible_count: int) -> Optional[list[str]]:
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


def visible_entry(ordinal: str, env: Optional[dict] = None) -> str:
    """What a worker's CUDA_VISIBLE_DEVICES must hold to see exactly this process's GPU `ordinal`:
    the same entry of our own CUDA_VISIBLE_DEVICES when it is set (an index, UUID or MIG id,
    probe/visible_devices.py reads them all), else the ordinal itself.

    >>> visible_entry("1", {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}), visible_entry("1", {})
    ('GPU-bbb', '1')
    """
    env = os.environ if env is None else env
    current = env.get("CUDA_VISIBLE_DEVICES")
    if current is None or not current.strip():
        return str(ordinal)
    entries = [e.strip() for e in current.split(",") if e.strip()]
    return entries[int(ordinal)] if int(ordinal) < len(entries) else str(ordinal)


def same_model_reason(devices: list[dict]) -> Optional[str]:
    """Why these GPUs cannot share one sweep (None: one model): rows from different GPU models
    would rank their kernels, not the backends."""
    kinds = {(d.get("name"), tuple(d.get("capability") or ())) for d in devices}
    if len(kinds) <= 1:
        return None
    listed = "; ".join(f"GPU {d.get('ordinal')}: {d.get('name')} (CC {'.'.join(map(str, d.get('capability') or ()))})"
                       for d in devices)
    return f"--gpus needs one GPU model, these differ: {listed}"


def assign_lanes(order: list[tuple[str, list[dict]]], lanes: int) -> list[list[tuple[str, list[dict]]]]:
    """Backend groups onto `lanes` lanes, largest estimated cost first onto the least loaded lane;
    each lane keeps the sweep's order (so FLASHINFER stays last in its lane).

    >>> groups = [("FLEX_ATTENTION", [0] * 16), ("TRITON_ATTN", [0] * 80), ("FLASH_ATTN", [0] * 80),
    ...           ("FLASHINFER", [0] * 80)]
    >>> [[b for b, _ in lane] for lane in assign_lanes(groups, 2)]
    [['FLEX_ATTENTION', 'FLASHINFER'], ['TRITON_ATTN', 'FLASH_ATTN']]
    """
    position = {backend: i for i, (backend, _) in enumerate(order)}
    cost = {b: len(items) + STARTUP_COST_ROWS.get(b, DEFAULT_STARTUP_COST_ROWS) for b, items in order}
    loads = [0.0] * lanes
    chosen: list[list[tuple[str, list[dict]]]] = [[] for _ in range(lanes)]
    for backend, items in sorted(order, key=lambda kv: -cost[kv[0]]):
        lane = min(range(lanes), key=lambda i: (loads[i], i))
        chosen[lane].append((backend, items))
        loads[lane] += cost[backend]
    return [sorted(lane, key=lambda kv: position[kv[0]]) for lane in chosen if lane]


def calibration_verdict(per_gpu: dict[str, dict]) -> tuple[bool, list[str]]:
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


def calibrate(order, plan, options, gpus: list[str], output_dir: Path) -> dict:
    """Times the first planned row of the first backend on every GPU at once."""
    from attnsel.bench.sweep.run import Lane, gpu_lane
    from attnsel.bench.sweep.groups import run_backend_group

    backend, items = order[0]
    item = dict(items[0], key=items[0]["key"] + "|calibration", check=False)
    timings: dict[str, Optional[dict]] = {}

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


def run_on_gpus(order, plan, options, output_dir: Path, writer, progress, enrich: Callable[[dict], dict],
                outcomes: dict, infos: dict, facts: dict) -> None:
    """Calibrate, then one lane per GPU in parallel (or the first GPU alone when they disagree);
    `facts` receives the calibration and the lanes (tune.json "gpus"). Each lane's first workers
    import while the GPUs are calibrated (on 2 x H200 the lanes' exposed starts, ~16 s each, came
    after a ~11 s calibration: docs/tune-performance.md); they are dropped if the lanes are not mixed."""
    from attnsel.bench.sweep.run import Lane, gpu_lane, prespawn_lane, run_groups
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
    facts["lanes"] = {gpu: [backend for backend, _ in lane] for gpu, lane in zip(gpus, lanes)}
    errors: list[BaseException] = []

    def lane_run(gpu: str, lane_order) -> None:
        try:
            run_groups(lane_order, plan, options, output_dir, writer, progress, enrich, outcomes, infos,
                       Lane(*gpu_lane(gpu)), prespawned=early.get(gpu))
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
    if errors:
        raise errors[0]


def _kill_waiting(early: dict[str, dict]) -> None:
    for workers in early.values():
        for worker in workers.values():
            worker.kill()
