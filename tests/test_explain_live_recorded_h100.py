"""`attnsel explain --live` as it ran on an H100 with the real vLLM 0.24.0 installed (2026-11-25,
tests/fixtures/explain/h100_vllm024_live/): vLLM's own selector answered there. The offline rule
profile for 0.24 must give the same answer for the same model and GPU, with no vLLM and no GPU here:
the same backends in the same priority order, valid or not with the same reasons, the same pick
and the same KV block size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnsel.cli.app import app

LIVE = Path(__file__).parent / "fixtures" / "explain" / "h100_vllm024_live"
ROW = re.compile(r"^│\s*(\d*)\s*│\s*(.*?)\s*│\s*(yes|no|)\s*│\s*(.*?)\s*│$")


def _live_answer(text: str) -> dict:
    """The table, pick and block size that `explain --live` printed (rich wraps long reasons onto
    continuation rows with an empty priority cell)."""
    rows: list[dict] = []
    for line in text.splitlines():
        match = ROW.match(line)
        if not match:
            continue
        priority, backend, valid, reasons = match.groups()
        if priority:
            rows.append({"name": backend.replace("◀ selected", "").strip(), "valid": valid == "yes",
                         "reasons": reasons})
        else:
            rows[-1]["reasons"] = f"{rows[-1]['reasons']} {reasons}".strip()
    selected = re.search(r"^vLLM selects: (\S+)$", text, re.M)
    block = re.search(r"^KV cache block size: (\d+)$", text, re.M)
    assert rows and selected and block, "the recorded live output lost its table"
    return {"backends": rows, "selected": selected.group(1), "block_size": int(block.group(1))}


def _offline_answer(model: str) -> dict:
    result = CliRunner().invoke(
        app, ["explain", "--model", model, "--gpu", "H100", "--vllm-version", "0.24", "--json"]
    )
    answer = json.loads(result.stdout)
    # the recording is vLLM's selector; explain goes on to the memory plan (DeepSeek-V3 on one H100: exit 1)
    assert result.exit_code == (1 if answer["error_phase"] == "memory" else 0), result.output
    backends = [
        {"name": b["name"], "valid": b["valid"], "reasons": "; ".join(b["reasons"])}
        for b in sorted(answer["backends"], key=lambda b: b["priority"])
    ]
    return {"backends": backends, "selected": answer["selected"], "block_size": answer["block_size"]}


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gemma-3-12b", "gpt-oss-20b", "deepseek-v3"])
def test_the_0_24_profile_answers_as_vllm_0_24_did_on_the_h100(model):
    live = _live_answer((LIVE / f"live_{model}.txt").read_text())
    assert _offline_answer(model) == live


def test_the_recorded_live_json_is_vllms_own_candidates_answer():
    text = (LIVE / "live_llama_json.json").read_text()
    live = json.loads(text[text.index("{\n"):])["live"]
    assert live["vllm_version"] == "0.24.0"
    offline = _offline_answer("llama-3.1-8b")
    recorded = [{"name": b["name"], "valid": b["valid"], "reasons": "; ".join(b["reasons"])}
                for b in sorted(live["backends"], key=lambda b: b["priority"])]
    assert recorded == offline["backends"]
