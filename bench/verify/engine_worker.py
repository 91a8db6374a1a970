"""The child process that runs ONE vLLM engine for `attnsel verify`: `python -m attnsel.bench.verify.engine_worker`.

Why a process per candidate: an engine that runs out of memory, fails to start, or hangs in a
compiler must cost its own row only, and the next engine must find the GPU empty. The parent
(bench/verify/run.py, torch-free) starts this worker in a new session and kills its process group
(vLLM's engine-core process included) on a timeout.

Protocol (its messages typed in bench/verify/protocol.py). The parent writes one JSON job as the first line on stdin:
    {"engine": "module:attr" | "/path/file.py:attr", "backend": "TRITON_ATTN" | null,
     "block_size": 64 | null, "model_dir", "tensor_parallel_size", "dtype", "gpu_memory_utilization",
     "max_model_len", "engine_overrides": {LLM argument: value}, "vocab_size", "shapes": [{"batch", "context"}],
     "repeats", "decode_steps", "seed", "hold": true (optional)}
A pre-spawned worker (bench/verify/beside.py) first gets {"type": "prespawn", "engine"}: it loads the
engine and runs its optional `preload()` (imports only), answers {"type": "imported", "import_s"} and
then reads its job. A job with "hold" stops after "started" until the parent writes {"type": "go"}
(the next engine's worker imports meanwhile, never while this engine measures).
The worker answers with JSON lines on its original stdout (vLLM's own logs, which go to stdout,
are sent to stderr with everything else, so they cannot corrupt the protocol):
    {"type": "starting", "pid"}
    {"type": "started", "start_s", "facts": {...what the engine reports about itself...}}
    {"type": "shape_start", "index", "label", "n1", "n2", "calls"}
    {"type": "call", "index", "phase": "warmup" | "measure", "max_tokens", "seconds"}
    {"type": "shape", "index", "result": {...}}
    {"type": "done"}    or    {"type": "fatal", "status": "oom" | "error", "error"}

How decode is timed (docs/gpu-facts.md §6): every shape runs once
before it is timed (first use compiles kernels for that shape, and that time would land in
whatever call comes first), then decode per step = (T(N2 tokens) - T(N1 tokens)) / (N2 - N1)
with the same prompts. N1 exceeds the steps the scheduler needs to prefill the whole batch, so
the N2 - N1 extra steps of the longer call are all full-batch decode steps (see step_counts).
Calls run in ABBA order (N1, N2, N2, N1, ...) so that a slow drift cancels out of the pairs.

The engine is the worker's boundary to vLLM: `VllmEngine` (below) is the real one, built on
vLLM's own `LLM` class (`vllm bench latency` uses the same calls); CI passes a fake engine that
fails to start, raises, hangs or dies (tests/fixtures/verify_engine/fake_engine.py).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from attnsel.bench.verify.inspection import (
    backends_in_inspection,
    config_facts,
    installed_engine_facts,
    unnamed_attention_layers,
)
from attnsel.bench.verify.protocol import FromWorker, Message
from attnsel.bench.verify.status import RunStatus

DEFAULT_ENGINE = "attnsel.bench.verify.engine_worker:VllmEngine"
# Steps after the last request of the batch got its first token before the N1 call ends: the
# scheduler runs the decode of early requests alongside the prefill of later ones.
SETTLE_STEPS = 8

OOM_MARKERS = ("out of memory", "outofmemoryerror", "no available memory for the cache blocks",
               "larger than the available kv cache memory", "is less than desired gpu memory utilization")


class Engine(Protocol):
    """What the worker needs from an inference engine (our own boundary, faked in CI)."""

    def start(self, job: dict) -> dict: ...  # start it; what it reports about itself (see VllmEngine.facts)

    def generate(self, prompts: list[list[int]], max_tokens: int) -> None: ...  # one batch, to the end

    def close(self) -> None: ...


def load_engine(spec: str) -> Engine:
    """`module:attr` or `/path/file.py:attr` (a class or factory called with no arguments)."""
    return resolve(spec)()


def resolve(spec: str) -> Any:
    """The object `module:attr` or `/path/file.py:attr` names."""
    import importlib
    import runpy

    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ValueError(f"engine spec must be 'module:attr' or 'file.py:attr', got {spec!r}")
    namespace = runpy.run_path(target) if target.endswith(".py") else vars(importlib.import_module(target))
    return namespace[attr]


# ---------------------------------------------------------------------------------------------
# What to run for one shape (pure functions; the parent uses them for its plan and estimates)


def step_counts(batch: int, context: int, max_batched_tokens: int, decode_steps: int) -> tuple[int, int]:
    """(N1, N2): N1 covers the chunked prefill of the whole batch (batch x context tokens,
    max_batched_tokens per step) plus SETTLE_STEPS; N2 adds `decode_steps` full-batch steps.

    >>> step_counts(64, 4096, 16384, 128)
    (24, 152)
    """
    prefill_steps = math.ceil(batch * context / max(1, max_batched_tokens))
    n1 = prefill_steps + SETTLE_STEPS
    return n1, n1 + max(1, decode_steps)


def call_order(n1: int, n2: int, repeats: int) -> list[int]:
    """ABBA order of the timed calls: N1, N2, N2, N1, N1, N2, ...

    >>> call_order(24, 152, 2)
    [24, 152, 152, 24]
    """
    order: list[int] = []
    for k in range(repeats):
        order += [n1, n2] if k % 2 == 0 else [n2, n1]
    return order


def prompt_length(context: int, n2: int, max_model_len: int | None) -> int:
    """Prompt tokens per request: the shape's context, shortened only when the context plus the
    N2 generated tokens would pass the engine's max_model_len."""
    if max_model_len and context + n2 > max_model_len:
        return max(1, int(max_model_len) - n2)
    return context


def requests_fit(facts: dict, tokens_per_request: int) -> int | None:
    """How many requests of `tokens_per_request` tokens the engine's KV cache holds at once: whole
    blocks per request for one attention group; for a hybrid model (several KV-cache groups that
    share one block pool) vLLM's own group-aware capacity in tokens, divided by the request."""
    blocks, block_size = facts.get("num_gpu_blocks"), facts.get("block_size")
    if not facts.get("is_hybrid") and blocks and block_size:
        return int(blocks) // math.ceil(tokens_per_request / int(block_size))
    tokens = facts.get("kv_cache_tokens")
    if tokens:
        return int(tokens) // max(1, tokens_per_request)
    return None


def make_prompts(batch: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    """The same token ids for every candidate (same seed), different for each request."""
    rng = random.Random(seed)
    population = range(1, max(2, int(vocab_size)))
    return [rng.choices(population, k=length) for _ in range(batch)]


def is_out_of_memory(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(marker in text for marker in OOM_MARKERS)


def error_text(exc: BaseException) -> str:
    from attnsel.bench.worker import error_text as one_line

    return one_line(exc)


# ---------------------------------------------------------------------------------------------
# Running the shapes


class ShapeRunner:
    """Runs the warm-up and the timed calls of each shape on a started engine; never raises."""

    def __init__(self, engine: Engine, facts: dict, job: dict, send: Callable[[FromWorker], None]):
        self.engine, self.facts, self.job, self.send = engine, facts, job, send
        self.clock: Callable[[], float] = getattr(engine, "clock", time.perf_counter)

    def plan(self, shape: dict) -> dict:
        batch, context = int(shape["batch"]), int(shape["context"])
        budget = int(self.facts.get("max_num_batched_tokens") or 8192)
        n1, n2 = step_counts(batch, context, budget, int(self.job.get("decode_steps", 128)))
        prompt = prompt_length(context, n2, self.facts.get("max_model_len") or self.job.get("max_model_len"))
        return {"batch": batch, "context": context, "prompt_tokens": prompt, "n1": n1, "n2": n2,
                "label": f"decode b={batch} ctx={context}"}

    def run(self, index: int, shape: dict) -> dict:
        plan = self.plan(shape)
        result = dict(plan, calls=[])
        fit = requests_fit(self.facts, plan["prompt_tokens"] + plan["n2"])
        result["requests_fit"] = fit
        if fit is not None and fit < plan["batch"]:
            result.update(status=RunStatus.DOES_NOT_FIT, error=f"the KV cache holds {fit} requests of "
                          f"{plan['prompt_tokens'] + plan['n2']} tokens, the shape needs {plan['batch']}")
            return result
        order = call_order(plan["n1"], plan["n2"], int(self.job.get("repeats", 2)))
        self.send({"type": Message.SHAPE_START, "index": index, "label": plan["label"], "n1": plan["n1"],
                   "n2": plan["n2"], "calls": len(order) + 1})
        try:
            prompts = make_prompts(plan["batch"], plan["prompt_tokens"], int(self.job.get("vocab_size") or 32000),
                                   int(self.job.get("seed", 0)))
            self._call(index, prompts, plan["n1"], "warmup", result)
            for max_tokens in order:
                self._call(index, prompts, max_tokens, "measure", result)
        except Exception as exc:  # noqa: BLE001 -- the shape records it; the next shape still runs
            result.update(status=RunStatus.OOM if is_out_of_memory(exc) else RunStatus.ERROR, error=error_text(exc),
                          traceback=traceback.format_exc(limit=6)[-2000:])
            return result
        result["status"] = RunStatus.OK
        return result

    def _call(self, index: int, prompts: list[list[int]], max_tokens: int, phase: str, result: dict) -> None:
        started = self.clock()
        self.engine.generate(prompts, max_tokens)
        seconds = self.clock() - started
        result["calls"].append({"phase": phase, "max_tokens": max_tokens, "seconds": seconds})
        self.send({"type": Message.CALL, "index": index, "phase": phase, "max_tokens": max_tokens, "seconds": seconds})


def serve(job: dict, stream: TextIO, engine: Engine | None = None, import_hidden_s: float | None = None) -> int:
    """Start the job's engine (or `engine`, loaded by a pre-spawned worker that imported its
    libraries for import_hidden_s while it waited) and run its shapes."""
    send = _sender(stream)
    send({"type": Message.STARTING, "pid": os.getpid()})
    try:
        engine = engine or load_engine(job.get("engine") or DEFAULT_ENGINE)
        clock = getattr(engine, "clock", time.perf_counter)
        started = clock()
        facts = engine.start(job)
        start_s = clock() - started
    except Exception as exc:  # noqa: BLE001 -- vLLM refused, ran out of memory, or is missing
        traceback.print_exc()
        send({"type": Message.FATAL, "status": RunStatus.OOM if is_out_of_memory(exc) else RunStatus.ERROR,
              "error": error_text(exc)})
        return 1
    if import_hidden_s is not None:
        facts["import_hidden_s"] = import_hidden_s
    send({"type": Message.STARTED, "start_s": start_s, "facts": facts})
    if job.get("hold") and not _wait_for_go():
        engine.close()
        return 1
    runner = ShapeRunner(engine, facts, job, send)
    for index, shape in enumerate(job.get("shapes") or []):
        send({"type": Message.SHAPE, "index": index, "result": runner.run(index, shape)})
    try:
        engine.close()
    except Exception:  # noqa: BLE001 -- the parent ends the process group anyway
        traceback.print_exc()
    send({"type": Message.DONE})
    return 0


def _sender(stream: TextIO) -> Callable[[FromWorker], None]:
    def send(message: FromWorker) -> None:
        stream.write(json.dumps(message, default=str) + "\n")
        stream.flush()

    return send


def _protocol_stream() -> TextIO:
    """A private copy of stdout for the protocol; fd 1 then points at stderr, so vLLM's logger
    (VLLM_LOGGING_STREAM is stdout by default) and its engine-core process write to the log."""
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8")


def _wait_for_go() -> bool:
    """A held engine (job "hold"): its first shape waits for the parent's {"type": "go"} (the next
    engine's worker imports meanwhile, bench/verify/beside.py); False when the parent is gone."""
    return bool(sys.stdin.readline())


def preload(spec: str) -> tuple[Engine, float]:
    """A pre-spawned worker: load the engine and import its libraries (no CUDA, no engine)."""
    started = time.perf_counter()
    engine = load_engine(spec)
    warm = getattr(engine, "preload", None)
    if callable(warm):
        warm()
    return engine, time.perf_counter() - started


def main() -> int:
    stream = _protocol_stream()
    engine, hidden = None, None
    try:
        job = json.loads(sys.stdin.readline())
        if job.get("type") == Message.PRESPAWN:
            engine, hidden = preload(job.get("engine") or DEFAULT_ENGINE)
            _sender(stream)({"type": Message.IMPORTED, "import_s": hidden})
            job = json.loads(sys.stdin.readline())
    except ValueError as exc:
        _sender(stream)({"type": Message.FATAL, "status": RunStatus.ERROR, "error": f"bad job: {exc}"})
        return 2
    return serve(job, stream, engine, hidden)


# ---------------------------------------------------------------------------------------------
# The real engine: vLLM's LLM class


def engine_kwargs(job: dict) -> dict:
    """The `LLM(...)` arguments: dummy weights from config.json alone, no tokenizer, prefix
    caching off (it would let repeated prompts skip their prefill), vLLM's default CUDA-graph mode
    and torch.compile, graphs captured only for the sizes the verified batches replay (the job's
    `engine_overrides`); --attention-backend / --block-size only where the candidate names them
    (vLLM's default pair runs with neither, as a deployment without flags would)."""
    kwargs: dict[str, Any] = {
        "model": job["model_dir"], "load_format": "dummy", "skip_tokenizer_init": True,
        "enable_prefix_caching": False, "seed": int(job.get("seed", 0)),
        "tensor_parallel_size": int(job.get("tensor_parallel_size") or 1),
    }
    for key in ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enforce_eager"):
        if job.get(key):  # the last three: memory_record's cases only (verify runs vLLM's defaults)
            kwargs[key] = job[key]
    for key in ("dtype", "kv_cache_dtype"):  # what tune timed (bf16 and "auto" for most models)
        if job.get(key) and job[key] != "auto":
            kwargs[key] = job[key]
    if job.get("backend"):
        kwargs["attention_backend"] = job["backend"]
    if job.get("block_size"):
        kwargs["block_size"] = int(job["block_size"])
    for group, value in (job.get("engine_overrides") or {}).items():  # e.g. the CUDA-graph sizes (verify/plan.py)
        kwargs[group] = dict(kwargs.get(group) or {}, **value) if isinstance(value, dict) else value
    return kwargs


class VllmEngine:
    """vLLM's `LLM` class, as `vllm bench latency` drives it (vllm/benchmarks/latency.py)."""

    def __init__(self) -> None:
        self.llm: Any = None  # vllm.LLM once started (vLLM has no type information here)
        self._params: dict[int, Any] = {}
        self._release_engine: dict | None = None  # the job's: the parent chose the installed release once

    def preload(self) -> None:
        """What `start` imports first, imported by a pre-spawned worker while it waits (import
        only: vLLM initialises CUDA in LLM(...), so its engine core may still be forked)."""
        import vllm  # noqa: F401
        from vllm import LLM, SamplingParams  # noqa: F401
        from vllm.inputs import TokensPrompt  # noqa: F401

    def start(self, job: dict) -> dict:
        started = time.perf_counter()
        from vllm import (
            LLM,  # 18.5 s on the H100 (docs/gpu-facts.md §5): part of a deployment's start, shown apart
        )

        imported = time.perf_counter()
        self._release_engine = job.get("release_engine")
        self.llm = LLM(**engine_kwargs(job))
        facts = self.facts()
        facts["import_s"], facts["llm_init_s"] = imported - started, time.perf_counter() - imported
        return facts

    def facts(self) -> dict:
        """Read back from the engine what it really uses. The engine core runs in its own process
        (VLLM_ENABLE_V1_MULTIPROCESSING), but at the end of its start-up it sends the KV-cache
        figures back to this front end (EngineCoreReadyResponse, v1/engine/core_client.py:715);
        the attention backends come from the workers through `collective_rpc("get_model_inspection")`,
        the call `LLM.__repr__` makes (entrypoints/llm.py:906)."""
        import vllm

        facts = config_facts(self.llm.llm_engine.vllm_config)
        facts["vllm_version"] = getattr(vllm, "__version__", None)
        facts["multiprocessing"] = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
        try:
            inspection = self.llm.collective_rpc("get_model_inspection", timeout=120)
            text = inspection[0] if inspection else ""
            # verify's jobs carry the release's engine data; a job without it (bench/tools/memory_record.py) asks here
            engine = self._release_engine if self._release_engine is not None else installed_engine_facts()
            facts["attention_backends"] = backends_in_inspection(text, engine.get("inspection_ambiguous_impls") or ())
            unnamed = unnamed_attention_layers(text, engine)
            if unnamed:  # MLA: the backend is read from vLLM's log line instead (bench/verify/engine_process.py)
                facts["inspection_unnamed_layers"] = unnamed
        except Exception as exc:  # noqa: BLE001 -- the log lines still say which backend ran
            facts["inspection_error"] = error_text(exc)
        return facts

    def generate(self, prompts: list[list[int]], max_tokens: int) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = self._params.get(max_tokens)
        if params is None:
            params = self._params[max_tokens] = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        short = [o for o in outputs if len(o.outputs[0].token_ids) != max_tokens]
        if short:
            raise RuntimeError(f"{len(short)} of {len(outputs)} requests did not generate {max_tokens} tokens")

    def close(self) -> None:
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None


if __name__ == "__main__":
    sys.exit(main())
