"""The CPU check (bench/tools/vllm_cpu_check.py) asks the release's own selector before it drives a
row, with the selector inputs tune's plan builds (bench/tools/cpu_check_selector.py): a row vLLM
refuses is recorded as refused in vLLM's words, never driven, so the check and `tune` (which never
times such a row) count the same rows. On 0.27-0.30 that is FLASH_ATTN at head size 512 with an fp8
cache ("FP8 KV cache requires FA3 on SM90 or FA4 on SM100"), whose impl raises if built anyway."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnsel.bench.plan import vllm_verdict

FIXTURES = Path(__file__).parent / "fixtures"
RECORDINGS = sorted((FIXTURES / "vllm_cpu").glob("vllm_*.json"))
# recordings saved since the check records the selector's answer per row
ASKED = [p for p in RECORDINGS if all("selector_reasons" in r for r in json.loads(p.read_text())["rows"])]


@pytest.fixture
def cpu_check(monkeypatch):
    """The check's module; importing it sets TRITON_INTERPRET / CUDA_VISIBLE_DEVICES for a run
    (setdefault), which this leaves as the test session had them."""
    for name in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    pytest.importorskip("torch")
    from attnsel.bench.tools import vllm_cpu_check

    return vllm_cpu_check


def _recorded_selector_answer(version: str, backend: str, head_size: int, capability: list[int]) -> dict:
    """One case of `explain --live`'s recording on a release (tests/fixtures/parity, parity_live.py):
    the real selector's inputs and its reasons for `backend`, with an fp8 KV cache."""
    cases = json.loads((FIXTURES / "parity" / f"parity_{version}.json").read_text(encoding="utf-8"))["cases"]
    for case in cases:
        inputs, context = case["inputs"], case["context"]
        if (inputs["head_size"], context["capability"]) != (head_size, capability) or inputs["use_mla"]:
            continue
        if not str(inputs["kv_cache_dtype"]).startswith("fp8"):
            continue
        for name, _priority, reasons in case["vllm"]["backends"]:
            if name == backend:
                return {"inputs": inputs, "reasons": reasons}
    raise LookupError(f"no recorded {backend} answer at head size {head_size} on CC {capability} in parity_{version}")


def test_a_row_the_releases_selector_refuses_is_recorded_refused_with_its_reason(cpu_check, monkeypatch):
    """vLLM 0.29's recorded answer for FLASH_ATTN at head size 512 with an fp8 cache on an H100:
    the check's head-512 fp8 rows say exactly that and are never prepared."""
    import attnsel.attention.explain as explain_door
    import attnsel.attention.kernels as kernels_door

    recorded = _recorded_selector_answer("029", "FLASH_ATTN", 512, [9, 0])
    assert recorded["reasons"], "the recording has vLLM refusing the pair"
    asked, prepared = [], []

    def ask_vllm(inputs, ctx, offline=False):
        asked.append((inputs.head_size, inputs.kv_cache_dtype, tuple(ctx.capability), ctx.user_backend))
        refuses = (inputs.head_size == recorded["inputs"]["head_size"] and ctx.user_backend == "FLASH_ATTN"
                   and str(inputs.kv_cache_dtype).startswith("fp8") and tuple(ctx.capability) == (9, 0))
        verdict = SimpleNamespace(valid=not refuses, reasons=tuple(recorded["reasons"]) if refuses else ())
        return SimpleNamespace(explicit_backend=verdict, error=None)

    class DrivableAdapter:  # our adapter, as if it could build every row
        def unsupported_reason(self, w, block_size, device):
            return None

        def prepare(self, b):
            prepared.append(b.head_size)
            raise RuntimeError("driven")

    monkeypatch.setattr(explain_door, "ask_vllm", ask_vllm)
    monkeypatch.setattr(kernels_door, "adapters_for", lambda backend, device: [DrivableAdapter()])
    monkeypatch.setattr(cpu_check, "_recorded_calls", lambda backend: [])
    rows = cpu_check.check_backend("FLASH_ATTN", "fp8")

    head_512 = [r for r in rows if " d512 " in r["shape"]]
    assert head_512 and all(r["ok"] is None for r in head_512)
    assert {r["skipped"] for r in head_512} == {"; ".join(recorded["reasons"])}
    assert all(r["selector_reasons"] == recorded["reasons"] for r in head_512)
    assert 512 not in prepared and 64 in prepared  # the rows vLLM accepts are still driven
    # asked as `--attention-backend FLASH_ATTN` on the H100 stand-in, once per row
    assert len(asked) == len(rows) and {a[2:] for a in asked} == {((9, 0), "FLASH_ATTN")}


@pytest.mark.parametrize("path", ASKED, ids=lambda p: p.stem)
def test_tunes_plan_refuses_exactly_what_the_releases_selector_refused_in_the_check(path, cpu_check):
    """Row by row, the reasons tune's plan gives (the release's rule profile, bench/plan/rules.py) are
    what the real release's selector answered in the recorded check; a refused row says them and was
    not driven, and every row the check drove is one vLLM accepts."""
    from attnsel.bench.tools.cpu_check_selector import tune_shape

    recording = json.loads(path.read_text(encoding="utf-8"))
    for row in recording["rows"]:
        workloads = {w.label(): w for w, _ in cpu_check.checked_workloads(row["backend"], row["kv_cache_dtype"])}
        capability = cpu_check.STAND_IN.get(row["backend"], cpu_check.H100)[0]
        plan, _ = vllm_verdict(row["backend"], row["block_size"], tune_shape(workloads[row["shape"]]), capability,
                               vllm_version=recording["vllm"])
        where = f"{row['backend']} {row['shape']} bs={row['block_size']}"
        assert plan == row["selector_reasons"], where
        if row["selector_reasons"]:
            assert row["ok"] is None and row["skipped"] == "; ".join(row["selector_reasons"]), where


def test_the_releases_from_027_on_were_checked_after_asking_their_selector():
    assert {p.stem for p in ASKED} >= {"vllm_0_27", "vllm_0_28", "vllm_0_29", "vllm_0_30"}
