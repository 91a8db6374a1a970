"""Developer check: does the INSTALLED vLLM take `attnsel verify`'s engine arguments where verify
expects them, and does it still log and expose what verify reads back? On a machine without a GPU,
run under a release layer (bench/tools/release_env.py):

    PYTHONPATH=<folder holding an `attnsel` link> python -m attnsel.bench.tools.release_env run 0.26.0 -- \\
        -m attnsel.bench.tools.engine_cpu_check --record tests/fixtures/verify_engine/vllm_0_26.json
    python -m attnsel.bench.tools.engine_cpu_check --source /tmp/vllm-0.24.0/vllm --version 0.24.0 --record ...

What it does, per release:
  * arguments: for dense (Llama-3.1-8B) and MLA (DeepSeek-V2-Lite) candidates, with and without
    --attention-backend / --block-size, CUDA-graph capture sizes, enforce_eager and max_model_len,
    the `LLM(**kwargs)` verify's worker passes (engine_worker.engine_kwargs) goes through vLLM's own
    `LLM.__init__` up to the engine (LLMEngine.from_engine_args is stopped there), and the
    EngineArgs it built make the VllmConfig (`create_engine_config(UsageContext.LLM_CLASS)`) on a
    stand-in H100 (vllm_cpu_check.stand_in_gpu); each argument must land where verify expects it;
  * read-back: every attribute inspection.CONFIG_FACTS reads exists on that VllmConfig; the
    worker method `get_model_inspection` exists; which attention layer classes name their backend
    in it (the release's `engine.inspection_layers`); each backend's impl class maps to its
    name in inspection.IMPL_BACKENDS;
  * log: each engine_log.PATTERNS call is still in the release's source (its file holds the anchor
    literal; attention/versions `engine.log_sources` names a moved one), and its example line reads.
`--source DIR` (a release's unpacked .py files, no layer) checks the source-only parts.
Exit 0 when nothing is off.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from attnsel.bench.verify import engine_log
from attnsel.bench.verify import engine_worker as EW
from attnsel.bench.verify import inspection as RB

MODELS = {"dense": "llama-3.1-8b", "mla": "deepseek-v2-lite"}
CAPTURE = {"compilation_config": {"cudagraph_capture_sizes": [1, 64]}}
# (label, model kind, backend, block size, extra job keys)
CASES: tuple[tuple[str, str, str | None, int | None, dict[str, object]], ...] = (
    ("dense vLLM's default", "dense", None, None, {}),
    ("dense FLASH_ATTN:16", "dense", "FLASH_ATTN", 16, {}),
    ("dense FLASHINFER:64", "dense", "FLASHINFER", 64, {}),
    ("dense TRITON_ATTN:32 enforce_eager", "dense", "TRITON_ATTN", 32, {"enforce_eager": True}),
    ("dense block size only 32", "dense", None, 32, {}),
    ("mla vLLM's default", "mla", None, None, {}),
    ("mla FLASHMLA:64", "mla", "FLASHMLA", 64, {}),
    ("mla TRITON_MLA:32 max_model_len 8192", "mla", "TRITON_MLA", 32, {"max_model_len": 8192}),
    ("mla backend only FLASH_ATTN_MLA", "mla", "FLASH_ATTN_MLA", None, {}),
)
READY_FIELDS = ("block_size", "num_gpu_blocks", "kv_cache_size_tokens", "kv_cache_max_concurrency")
ATTENTION_LAYERS = {"Attention": "model_executor/layers/attention/attention.py",
                    "MLAAttention": "model_executor/layers/attention/mla_attention.py"}


def _job(model_dir: str, backend: str | None, block: int | None, extra: dict) -> dict:
    job = {"model_dir": model_dir, "gpu_memory_utilization": 0.9, "max_model_len": 4352, "dtype": "bfloat16",
           "backend": backend, "block_size": block, "engine_overrides": CAPTURE}
    return {**job, **extra}


class _Stop(Exception):
    """Raised in place of LLMEngine.from_engine_args: LLM.__init__ has built its EngineArgs."""

    def __init__(self, engine_args: Any):
        super().__init__("stopped before the engine")
        self.engine_args = engine_args


def engine_config(kwargs: dict) -> Any:
    """The VllmConfig `LLM(**kwargs)` would start its engine with (vLLM's own LLM.__init__ builds the EngineArgs)."""
    from vllm.entrypoints import llm as llm_module
    from vllm.usage.usage_lib import UsageContext

    engine_cls = llm_module.LLMEngine
    original = engine_cls.from_engine_args

    def stop(*args: Any, **kw: Any) -> Any:
        raise _Stop(kw.get("engine_args", args[0] if args else None))

    engine_cls.from_engine_args = stop  # type: ignore[method-assign]
    try:
        llm_module.LLM(**kwargs)
    except _Stop as stopped:
        return stopped.engine_args.create_engine_config(usage_context=UsageContext.LLM_CLASS)
    finally:
        engine_cls.from_engine_args = original  # type: ignore[method-assign]
    raise RuntimeError("LLM.__init__ did not reach LLMEngine.from_engine_args")


def landed(job: dict, kwargs: dict, cfg: Any) -> dict:
    """Where each argument verify passes landed in the VllmConfig, and whether that is what verify expects."""
    got = RB.config_facts(cfg)
    comp = cfg.compilation_config
    out = {"attention_backend": got["requested_backend"], "block_size": got["block_size"],
           "cudagraph_capture_sizes": list(comp.cudagraph_capture_sizes or []),
           "enforce_eager": bool(cfg.model_config.enforce_eager), "max_model_len": got["max_model_len"],
           "cudagraph_mode": got["cudagraph_mode"], "compilation_mode": got["compilation_mode"],
           "max_num_batched_tokens": got["max_num_batched_tokens"], "prefix_caching": cfg.cache_config.enable_prefix_caching,
           "load_format": cfg.load_config.load_format, "dtype": got["dtype"]}
    expected = {"attention_backend": job.get("backend"), "max_model_len": job["max_model_len"],
                "enforce_eager": bool(job.get("enforce_eager")), "prefix_caching": False, "load_format": "dummy"}
    if job.get("block_size"):
        expected["block_size"] = job["block_size"]
    if not job.get("enforce_eager"):  # vLLM drops the capture sizes of an eager engine
        expected["cudagraph_capture_sizes"] = kwargs["compilation_config"]["cudagraph_capture_sizes"]
    off = {k: {"expected": v, "got": out[k]} for k, v in expected.items() if out[k] != v}
    return {"landed": out, "off": off}


def check_cases(models: dict) -> list[dict]:
    rows = []
    for label, kind, backend, block, extra in CASES:
        job = _job(models[kind], backend, block, extra)
        kwargs = EW.engine_kwargs(job)
        row: dict[str, Any] = {"case": label, "model": MODELS[kind], "job": {k: v for k, v in job.items() if k != "model_dir"},
                               "kwargs": {k: v for k, v in kwargs.items() if k != "model"}}
        try:
            row.update(landed(job, kwargs, engine_config(kwargs)))
        except Exception as exc:  # noqa: BLE001 -- vLLM refused: that is the finding
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
    return rows


def config_attributes() -> dict:
    """Each CONFIG_FACTS path: does the release's config class declare it?"""
    import dataclasses

    from vllm import config as C

    classes = {"cache_config": C.CacheConfig, "model_config": C.ModelConfig, "scheduler_config": C.SchedulerConfig,
               "compilation_config": C.CompilationConfig, "attention_config": C.AttentionConfig}
    out = {}
    for path in RB.CONFIG_FACTS.values():
        group, _, attr = path.partition(".")
        cls = classes[group]
        names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        out[path] = attr in names or hasattr(cls, attr)
    return out


def inspection_facts(vllm_dir: Path) -> dict:
    """Whether the workers answer `get_model_inspection`, and which attention layers print `backend=`."""
    base = (vllm_dir / "v1/worker/worker_base.py").read_text(encoding="utf-8")
    names = {}
    for layer, rel in ATTENTION_LAYERS.items():
        text = (vllm_dir / rel).read_text(encoding="utf-8")
        body = text.split(f"class {layer}(", 1)[1].split("\nclass ", 1)[0] if f"class {layer}(" in text else ""
        repr_body = body.split("def extra_repr", 1)[1].split("\n    def ", 1)[0] if "def extra_repr" in body else ""
        names[layer] = "backend=" in repr_body
    engine = (vllm_dir / "v1/engine/__init__.py").read_text(encoding="utf-8")
    ready = engine.split("class EngineCoreReadyResponse", 1)[-1].split("\nclass ", 1)[0]
    return {"get_model_inspection": "def get_model_inspection" in base, "names_backend": names,
            # the engine core's start-up answer, which the front end's config is synced from
            "ready_response": {f: f"    {f}:" in ready for f in READY_FIELDS}}


def impl_names() -> dict:
    """Each registered backend's impl class -> what IMPL_BACKENDS reads it as; `printed`: an
    Attention layer's repr names it (MLA layers print none, so their impl names are never read)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    out: dict[str, dict[str, object]] = {}
    for member in AttentionBackendEnum:
        try:
            backend = member.get_class()
            impl = backend.get_impl_cls().__name__
        except Exception as exc:  # noqa: BLE001 -- not importable on CPU
            out[member.name] = {"error": f"{type(exc).__name__}"}
            continue
        is_mla = getattr(backend, "is_mla", lambda: False)()
        out[member.name] = {"impl": impl, "read_as": RB.IMPL_BACKENDS.get(impl), "printed": not is_mla}
    return out


def log_patterns(vllm_dir: Path, log_sources: dict, own: tuple = ()) -> list[dict]:
    """Each PATTERNS call (where the release data says it moved) and each line the release brought
    (`own`: engine_log.release_patterns), looked up in the release's source; its example must read."""
    rows = []
    for pattern in engine_log.patterns_for(tuple(own)):
        source, anchor, example = engine_log.release_source(pattern, log_sources)
        path = vllm_dir / source
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        row = {"field": pattern.field, "source": source, "anchor": anchor, "found": anchor in text,
               "example": example, "example_reads": pattern.regex.search(example) is not None}
        if not row["found"]:
            row["found_in"] = sorted(str(p.relative_to(vllm_dir)) for p in vllm_dir.rglob("*.py")
                                     if anchor in p.read_text(encoding="utf-8", errors="replace"))
        rows.append(row)
    return rows


def _release_facts(version: str) -> dict:
    from attnsel.attention.versions import select_profile

    choice = select_profile(version)
    return {"profile": choice.profile.name, "engine": choice.profile.engine,
            "backends": sorted(choice.profile.data["backends"])}


def problems(record: dict) -> list[str]:
    """What is off, in words (empty: verify's arguments and read-back hold for this release)."""
    out = [f"{r['case']}: {r['error']}" for r in record.get("cases") or [] if r.get("error")]
    out += [f"{r['case']}: {k} landed as {v['got']!r}, verify expects {v['expected']!r}"
            for r in record.get("cases") or [] for k, v in (r.get("off") or {}).items()]
    out += [f"config attribute {p} is gone" for p, ok in (record.get("config_attributes") or {}).items() if not ok]
    inspection = record["inspection"]
    if not inspection["get_model_inspection"]:
        out.append("the workers have no get_model_inspection")
    if inspection["names_backend"] != record["engine"].get("inspection_layers"):
        out.append(f"layers naming their backend: {inspection['names_backend']}, the release data says "
                   f"{record['engine'].get('inspection_layers')}")
    modelled = set(record.get("backends") or ())  # the CUDA backends the release data knows
    shared = set(record["engine"].get("inspection_ambiguous_impls") or ())  # read from the log instead
    out += [f"impl {v['impl']} of {k} is read as {v['read_as']}" for k, v in (record.get("impls") or {}).items()
            if k in modelled and v.get("printed") and v.get("read_as") != k and v["impl"] not in shared]
    out += [f"the engine's ready answer has no {f}" for f, ok in inspection.get("ready_response", {}).items() if not ok]
    out += [f"log pattern {r['field']}: {r['anchor']!r} not in {r['source']}" + (f" (in {', '.join(r['found_in'])})"
            if r.get("found_in") else "") for r in record["log_patterns"] if not r["found"]]
    out += [f"log pattern {r['field']}: its example does not read" for r in record["log_patterns"] if not r["example_reads"]]
    return out


def run_check(source: Path | None, version: str | None) -> dict:
    if source is None:
        from attnsel.bench.tools.vllm_cpu_check import stand_in_gpu

        stand_in_gpu()
        import vllm

        version, vllm_dir = vllm.__version__, Path(vllm.__file__).parent
    else:
        vllm_dir = source
    assert version, "--version is needed with --source"
    release = _release_facts(version)
    record: dict[str, Any] = {"vllm_version": version, "profile": release["profile"], "engine": release["engine"],
                              "backends": release["backends"], "mode": "source" if source else "installed"}
    if source is None:
        record["cases"] = check_cases(_model_dirs())
        record["config_attributes"] = config_attributes()
        record["impls"] = impl_names()
    record["inspection"] = inspection_facts(vllm_dir)
    record["log_patterns"] = log_patterns(vllm_dir, release["engine"].get("log_sources") or {},
                                          engine_log.release_patterns(release["engine"]))
    record["problems"] = problems(record)
    return record


def _model_dirs() -> dict:
    from attnsel.attention.model import config as MC
    from attnsel.bench.verify.run import write_model_dir

    root = Path(tempfile.mkdtemp(prefix="engine-cpu-check-"))
    return {kind: str(write_model_dir(MC.load_model_config(name), root / kind)) for kind, name in MODELS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a release's unpacked vllm package (source-only checks)")
    parser.add_argument("--version", help="the release of --source, e.g. 0.24.0")
    parser.add_argument("--record", type=Path, help="write the record here (tests/fixtures/verify_engine/vllm_0_X.json)")
    args = parser.parse_args(argv)
    record = run_check(args.source, args.version)
    for row in record.get("cases") or []:
        print(f"{row['case']:<40} {row.get('error') or ('ok' if not row['off'] else 'OFF: ' + json.dumps(row['off']))}"
              f"  {json.dumps(row.get('landed', {}), default=str)[:200]}")
    for problem in record["problems"]:
        print("PROBLEM:", problem)
    if args.record:
        args.record.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"vLLM {record['vllm_version']}: {len(record['problems'])} problem(s)")
    return 1 if record["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
