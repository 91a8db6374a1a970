"""The JSON answers of explain and preflight hold exactly the keys their one definition names
(attention/explain/document.py, attention/preflight/document.py): a key written but not defined,
or defined but never written, fails here, so a reader typed against the definition reads what the
command prints. The status and verdict words are the enums' words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from attnsel.attention.explain.document import (
    AttentionFreeAnswer,
    ExplainAnswer,
    ExplainHistory,
    ExplainMatrix,
    MatrixRowFields,
    ModelSection,
    ReleaseFields,
    VitSection,
)
from attnsel.attention.preflight import CheckStatus
from attnsel.attention.preflight.document import (
    CheckFields,
    DeploymentFields,
    PreflightDocument,
)
from attnsel.bench.verify import Message, RunStatus
from attnsel.bench.verify import protocol as P
from attnsel.bench.verify import run as V
from attnsel.cli.app import app

PROBE = Path(__file__).parent / "fixtures" / "probe"
ENV = {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None, "NO_COLOR": "1", "ATTNSEL_NVML_SCENARIO": None}


def answer(*args: str, env: dict | None = None) -> dict[str, Any]:
    result = CliRunner().invoke(app, [*args, "--json"], env={**ENV, **(env or {})})
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def keys_fit(document: dict, kind: Any) -> None:
    """Every required key present, no key the definition does not name."""
    required, optional = set(kind.__required_keys__), set(kind.__optional_keys__)
    assert required <= set(document), f"{kind.__name__} misses {sorted(required - set(document))}"
    assert set(document) <= required | optional, f"{kind.__name__} does not name {sorted(set(document) - required - optional)}"


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-vl-7b", "jamba-v0.1"])
def test_explain_on_one_gpu_writes_the_defined_answer(model):
    doc = answer("explain", "--model", model, "--gpu", "H100")
    keys_fit(doc, ExplainAnswer)
    keys_fit(doc["model"], ModelSection)
    if doc["model"]["vit"] is not None:  # a vision encoder: its backend
        keys_fit(doc["model"]["vit"], VitSection)
    assert "memory" in doc or "memory_not_planned" in doc  # a model on a named GPU: a plan, or why none


def test_explain_of_an_attention_free_model_writes_its_own_answer():
    doc = answer("explain", "--model", "mamba-130m", "--gpu", "H100")
    keys_fit(doc, AttentionFreeAnswer)


def test_explain_for_every_gpu_family_writes_the_defined_matrix():
    doc = answer("explain", "--model", "llama-3.1-8b", "--gpu", "all")
    keys_fit(doc, ExplainMatrix)
    assert doc["rows"]
    for row in doc["rows"]:
        keys_fit(row, MatrixRowFields)


def test_explain_across_releases_writes_the_defined_history():
    doc = answer("explain", "--head-size", "128", "--capability", "9.0", "--vllm-version", "all")
    keys_fit(doc, ExplainHistory)
    for release in doc["releases"]:
        keys_fit(release, ReleaseFields)


@pytest.mark.parametrize("scenario", ["h100_sxm_x8_nvlink.json", None])
def test_preflight_writes_the_defined_result(scenario):
    env = {"ATTNSEL_NVML_SCENARIO": str(PROBE / scenario)} if scenario else {}
    target = () if scenario else ("--gpu", "H100")
    doc = answer("preflight", "--model", "llama-3.1-8b", *target, env=env)
    keys_fit(doc, PreflightDocument)
    keys_fit(doc["deployment"], DeploymentFields)
    keys_fit(doc["explain"], ExplainAnswer)
    for check in doc["checks"]:
        keys_fit(check, CheckFields)
        assert CheckStatus.read(check["status"]) is not None
    assert set(doc["counts"]) == {status.value for status in CheckStatus}


PROTOCOL = {Message.STARTING: P.Starting, Message.STARTED: P.Started, Message.HELD: P.Held,
            Message.SHAPE_START: P.ShapeStart, Message.CALL: P.Call, Message.SHAPE: P.Shape, Message.FATAL: P.Fatal,
            Message.DONE: P.Done}


def test_the_engine_workers_messages_are_the_defined_ones(fake_engine, tune_run_dir):
    """What the worker writes on its pipe, as the parent hands it to the progress display."""
    fake_engine({"default": ["FLASH_ATTN", 16],
                 "backends": {"FLASH_ATTN": {"step_ms": 18.1, "prefill_tok_s": 45000, "jitter": 0.001},
                              "FLASHINFER": {"step_ms": 15.0, "prefill_tok_s": 50000, "jitter": 0.001}}})
    seen: list[dict] = []
    doc = V.run_verify(V.VerifyRequest(tune_dir=tune_run_dir, shapes=[(1, 2048)], decode_steps=32), tune_run_dir,
                       V.VerifyProgress(on_message=seen.append))
    kinds = [Message.read(m["type"]) for m in seen]
    assert None not in kinds and {Message.STARTED, Message.SHAPE_START, Message.CALL, Message.SHAPE} <= set(kinds)
    for message in seen:
        keys_fit(message, PROTOCOL[message["type"]])
    statuses = [row["status"] for row in doc["candidates"]] + [s["status"] for row in doc["candidates"] for s in row["shapes"]]
    assert statuses and all(RunStatus.read(status) is not None for status in statuses)
