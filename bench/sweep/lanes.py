"""`tune --gpus`: which rows each GPU's lane runs, and one backend's outcome put back together when
its rows ran in several lanes (docs/tune-performance.md "Finer lanes").

A lane runs *parts*: a backend's rows for some of its block sizes, in one worker. A part pays its
own worker start (hidden behind the lane's previous part when pre-spawned) and, cold, the JIT of
its block sizes; a block size is never split (vLLM's Triton JIT and the crash/timeout limits of
bench/sweep/groups.py are per (backend, block size)). FlashInfer's JIT build is shared between
parts through its on-disk cache: each pre-spawned part builds with the module's file lock held
(attention/kernels/flashinfer_jit.py `build_kwargs`, need_lock), so a second part waits for
the first one's ninja, then finds it up to date (flashinfer 0.7.2.post1 flashinfer/jit/core.py:577-599).
"""

from __future__ import annotations

# The cost model, in "rows" of a vLLM-driven backend (~0.16 s each, warm, 2 x H200; the recorded
# phases in tests/fixtures/tune/h200x2_gpus and docs/tune-performance.md "Finer lanes"):
# a FLEX_ATTENTION row costs 4 (16 rows took 10.4 s: inductor compiles each shape).
# Backends whose worker is pre-spawned when the sweep starts, whatever their place in the order:
# their pre-build (JIT compile, CPU only) then overlaps every backend before them.
EARLY_PREBUILD_BACKENDS = ("FLASHINFER",)
# How many backends ahead workers are pre-spawned. Two: FLASHINFER's worker then starts with the
# sweep and compiles its JIT modules (103 s of nvcc on a cold H200, 2026-11-21) while TRITON_ATTN
# (38 s) and FLASH_ATTN (26 s) run, instead of during FLASH_ATTN only, most of which its own
# 12 s import would use up. A waiting worker holds no CUDA context, only host memory.
PRESPAWN_AHEAD = 2
ROW_COST = {"FLEX_ATTENTION": 4}
# A worker's start (torch + its library import), warm: FLEX_ATTENTION 9-10 s, the vLLM-driven ones
# 16-20 s, FlashInfer 17-24 s. It is exposed only where the lane's earlier parts do not hide it.
STARTUP_COST_ROWS = {"FLEX_ATTENTION": 60, "FLASHINFER": 120}
DEFAULT_STARTUP_COST_ROWS = 110
# A lane's first worker imports during the calibration (bench/sweep/run.py `prespawn_lane`): ~11 s
# hidden (TRITON_ATTN first in its lane: 7.1 s of its ~18 s start still exposed).
CALIBRATION_ROWS = 70
# The least one more part costs beyond its rows: its worker's protocol and exit (other_s ~0.4 s).
PART_COST_ROWS = 3
MAX_MOVES = 64  # the search below stops long before on any real grid (each move lowers the loads)

Part = tuple[str, list[dict]]


def part_cost(backend: str, rows: int) -> int:
    """A part's estimated cost first in its lane: its rows, and its start less the calibration.

    >>> part_cost("FLEX_ATTENTION", 16), part_cost("TRITON_ATTN", 80), part_cost("FLASHINFER", 80)
    (67, 120, 130)
    """
    return lane_load([(backend, rows)])


def _spawned_at(j: int, backend: str, starts: list[int]) -> int:
    """When part j's worker starts importing (bench/sweep/run.py `positions_to_prespawn`): the
    first during the calibration, FlashInfer's with the lane, the others PRESPAWN_AHEAD parts ahead."""
    if j == 0:
        return -CALIBRATION_ROWS
    return 0 if backend in EARLY_PREBUILD_BACKENDS else starts[max(0, j - PRESPAWN_AHEAD)]


def lane_load(parts: list[tuple[str, int]]) -> int:
    """A lane's estimated cost from its (backend, rows) parts in the order they run: each part's
    rows, plus what of its worker's start the calibration and the parts before it do not hide
    (at least PART_COST_ROWS).

    >>> lane_load([("FLEX_ATTENTION", 16), ("FLASHINFER", 80)]), lane_load([("TRITON_ATTN", 80), ("FLASH_ATTN", 80)])
    (200, 203)
    """
    load, starts = 0, []
    for j, (backend, rows) in enumerate(parts):
        starts.append(load)
        ready = _spawned_at(j, backend, starts) + STARTUP_COST_ROWS.get(backend, DEFAULT_STARTUP_COST_ROWS)
        load += rows * ROW_COST.get(backend, 1) + max(PART_COST_ROWS, ready - load)
    return load


def _block_sizes(items: list[dict]) -> list[int]:
    return list(dict.fromkeys(item["block_size"] for item in items))


class _Plan:
    """Lanes as {backend: [block sizes]}, with each (backend, block size)'s row count."""

    def __init__(self, order: list[Part], lanes: int):
        self.rows = {(b, bs): sum(1 for i in items if i["block_size"] == bs) for b, items in order for bs in _block_sizes(items)}
        self.position = {b: i for i, (b, _) in enumerate(order)}
        self.lanes: list[dict[str, list[int]]] = [{} for _ in range(lanes)]

    def load(self, lane: dict[str, list[int]]) -> int:
        """lane_load with the lane's parts in the sweep's order."""
        return lane_load([(b, sum(self.rows[(b, bs)] for bs in lane[b])) for b in sorted(lane, key=self.position.__getitem__)])

    def loads(self) -> list[int]:
        return [self.load(lane) for lane in self.lanes]

    def moved(self, src: int, dst: int, backend: str, k: int) -> tuple[dict, dict]:
        """Lanes src and dst after moving `backend`'s last k block sizes of src to dst (merged
        with dst's part of that backend, if it has one)."""
        a, b = dict(self.lanes[src]), dict(self.lanes[dst])
        sizes = a.pop(backend)
        if k < len(sizes):
            a[backend] = sizes[:-k]
        b[backend] = b.get(backend, []) + sizes[-k:]
        return a, b

    def best_move(self) -> tuple[int, int, str, int] | None:
        """The move off the most loaded lane that leaves both lanes it touches lightest, if that is
        below the most loaded lane's load today (ties: fewer parts, then the first found)."""
        loads = self.loads()
        heavy = max(range(len(loads)), key=lambda i: (loads[i], -i))
        best, best_key = None, None
        for backend, sizes in self.lanes[heavy].items():
            for dst in (i for i in range(len(self.lanes)) if i != heavy):
                for k in range(1, len(sizes) + 1):
                    a, b = self.moved(heavy, dst, backend, k)
                    key = (max(self.load(a), self.load(b)), len(a) + len(b))
                    if key[0] < loads[heavy] and (best_key is None or key < best_key):
                        best, best_key = (heavy, dst, backend, k), key
        return best


def assign_lanes(order: list[Part], lanes: int) -> list[list[Part]]:
    """Rows onto `lanes` lanes: whole backend groups first, largest estimated cost first onto the
    least loaded lane; then, while it lowers the most loaded lane's estimated cost (lane_load), some
    of its backend's block sizes move to another lane (a new part there, or merged into that lane's
    part of the same backend), never fewer than one block size a part. Each lane keeps the sweep's
    order (so FLASHINFER stays last in its lane). One lane: `order` itself.

    >>> rows = lambda n: [{"block_size": bs} for bs in (16, 32, 64, 128, 256)[:n // 16] for _ in range(16)]
    >>> groups = [("FLEX_ATTENTION", rows(16)), ("TRITON_ATTN", rows(80)), ("FLASH_ATTN", rows(80)),
    ...           ("FLASHINFER", rows(80))]
    >>> [[(b, len(items)) for b, items in lane] for lane in assign_lanes(groups, 2)]
    [[('FLEX_ATTENTION', 16), ('FLASHINFER', 80)], [('TRITON_ATTN', 80), ('FLASH_ATTN', 80)]]
    >>> [[(b, len(items)) for b, items in lane] for lane in assign_lanes(groups[1:3], 4)]
    [[('TRITON_ATTN', 48)], [('FLASH_ATTN', 48)], [('TRITON_ATTN', 32)], [('FLASH_ATTN', 32)]]
    """
    if lanes <= 1:
        return [list(order)] if order else []
    plan = _Plan(order, lanes)
    for backend, items in sorted(order, key=lambda kv: -part_cost(kv[0], len(kv[1]))):
        loads = plan.loads()
        plan.lanes[min(range(lanes), key=lambda i: (loads[i], i))][backend] = _block_sizes(items)
    for _ in range(MAX_MOVES):
        move = plan.best_move()
        if move is None:
            break
        src, dst, backend, k = move
        plan.lanes[src], plan.lanes[dst] = plan.moved(src, dst, backend, k)
    items_of = dict(order)
    return [[(b, [i for i in items_of[b] if i["block_size"] in lane[b]]) for b, _ in order if b in lane]
            for lane in plan.lanes if lane]


def lane_facts(gpus: list[str], lanes: list[list[Part]]) -> dict:
    """tune.json "gpus": `lanes` (GPU -> its backends, in the order run) and `lane_block_sizes`
    (GPU -> backend -> the block sizes that lane ran: a backend may appear in several lanes)."""
    return {"lanes": {gpu: [backend for backend, _ in lane] for gpu, lane in zip(gpus, lanes)},
            "lane_block_sizes": {gpu: {backend: _block_sizes(items) for backend, items in lane}
                                 for gpu, lane in zip(gpus, lanes)}}


def merge_lane_results(gpus: list[str], lanes: list[list[Part]], lane_outcomes: dict[str, dict],
                       lane_infos: dict[str, dict], outcomes: dict, infos: dict) -> None:
    """Each lane's outcomes and worker info (by backend) into the sweep's, in GPU order: a backend
    run in one lane keeps its outcome as is; one split over lanes gets one outcome whose `parts`
    are its lanes' outcomes (bench/tune/phases.py sums them). Worker info: the first GPU's."""
    from attnsel.bench.sweep.groups import GroupOutcome

    by_backend: dict[str, list] = {}
    for gpu, lane in zip(gpus, lanes):
        for backend, items in lane:
            outcome = lane_outcomes.get(gpu, {}).get(backend)
            if outcome is not None:
                by_backend.setdefault(backend, []).append((gpu, _block_sizes(items), outcome))
            if backend not in infos and lane_infos.get(gpu, {}).get(backend):
                infos[backend] = lane_infos[gpu][backend]
    for backend, parts in by_backend.items():
        outcomes[backend] = parts[0][2] if len(parts) == 1 else GroupOutcome.merged(parts)
