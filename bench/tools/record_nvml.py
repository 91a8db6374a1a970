"""Record every NVML answer the probe asks for into a scenario JSON that the replay facade reads.

Run on a GPU machine (no torch needed unless --with-torch / --measure-p2p):
    python -m attnsel.bench.tools.record_nvml -o $OUT/nvml_h200x2.json
then replay it anywhere:
    ATTNSEL_NVML_SCENARIO=nvml_h200x2.json attnsel probe
CUDA_VISIBLE_DEVICES is ignored while recording so that every GPU and every pair is captured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

from attnsel.probe import collect_probe
from attnsel.probe.nvml import (
    SCENARIO_SCHEMA,
    NvmlCallError,
    NvmlInitError,
    PynvmlFacade,
    RealTorch,
    call_key,
)


class RecordingFacade:
    """Wraps a real facade and keeps each call's answer (value, NVML error or exception)."""

    def __init__(self, inner: PynvmlFacade):
        self.inner = inner
        self.init_answer: Any = None
        self.init_ms: float | None = None
        self.calls: dict[str, dict[str, Any]] = {}

    def init(self) -> None:
        start = time.perf_counter()
        try:
            self.inner.init()
        except NvmlInitError as exc:
            self.init_answer = {"nvml_error": exc.name}
            raise
        finally:
            self.init_ms = (time.perf_counter() - start) * 1e3

    def shutdown(self) -> None:
        self.inner.shutdown()

    def call(self, function: str, *args: Any) -> Any:
        key = call_key(args)
        slot = self.calls.setdefault(function, {})
        try:
            answer = self.inner.call(function, *args)
        except NvmlCallError as exc:
            slot[key] = {"nvml_error": exc.name}
            raise
        except Exception as exc:  # noqa: BLE001 -- recorded, then re-raised for the funnel
            slot[key] = {"exception": type(exc).__name__, "message": str(exc)}
            raise
        slot[key] = answer
        return answer


class NoTorch:
    """The torch side when torch is not to be asked: no inventory, no copy measured."""

    def inventory(self):
        return None

    def measure_copy_gbps(self, pairs):
        return {p: "not measured" for p in pairs}


def _nvml_py_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:  # noqa: BLE001
        return None


def record(with_torch: bool, measure_p2p: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    recorder = RecordingFacade(PynvmlFacade())

    torch_side = RealTorch() if (with_torch or measure_p2p) else NoTorch()
    report = collect_probe(env, nvml=recorder, measure_p2p=measure_p2p, torch=torch_side)
    scenario: dict[str, Any] = {
        "schema": SCENARIO_SCHEMA,
        "description": f"recorded with attnsel.bench.tools.record_nvml: {len(report.gpus)} GPU(s), "
        + ", ".join(sorted({g.name for g in report.gpus})),
        "recorded_with": {
            "nvidia_ml_py": _nvml_py_version(),
            "python": platform.python_version(),
            "nvml_init_ms": round(recorder.init_ms or 0.0, 2),
            "pynvml_p2p_caps_index_read": _p2p_read_constant(),
            "cuda_visible_devices_at_record_time": os.environ.get("CUDA_VISIBLE_DEVICES"),
        },
        "init": recorder.init_answer,
        "calls": recorder.calls,
        "torch": None,
    }
    if with_torch or measure_p2p:
        try:
            scenario["torch"] = RealTorch().inventory()
        except Exception as exc:  # noqa: BLE001
            scenario["torch"] = {"exception": type(exc).__name__, "message": str(exc)}
    if measure_p2p and isinstance(scenario["torch"], dict):
        scenario["torch"]["p2p_copy_gbps"] = {
            f"{p.a},{p.b}": p.measured_gbps for p in report.nvlink.pairs if p.measured_gbps is not None
        }
    return scenario


def _p2p_read_constant() -> str | None:
    try:
        import pynvml

        return repr(pynvml.NVML_P2P_CAPS_INDEX_READ)
    except Exception:  # noqa: BLE001
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="scenario JSON to write")
    parser.add_argument("--with-torch", action="store_true", help="also record torch.cuda's inventory")
    parser.add_argument("--measure-p2p", action="store_true", help="also record measured copy GB/s per pair")
    args = parser.parse_args(argv)
    scenario = record(args.with_torch, args.measure_p2p)
    with open(args.output, "w") as fh:
        json.dump(scenario, fh, indent=1)
        fh.write("\n")
    calls = sum(len(v) for v in scenario["calls"].values())
    print(f"wrote {args.output}: {calls} NVML answers, init {scenario['recorded_with']['nvml_init_ms']} ms", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
