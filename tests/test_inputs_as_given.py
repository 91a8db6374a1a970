"""Inputs as users give them, and the safety net under everything else (issue "every input ends in
an answer or one clear line"): `--model` as a Hugging Face id read from the local cache offline, a
URL, an attention-free model; an unforeseen error ending as exit 70 in one line (the traceback
only with ATTNSEL_DEBUG=1); --json written whole even when Ctrl-C arrives mid-write. Real
processes (pipes, /dev/fd, /dev/full, signals) are in test_hostile_process.py."""

from __future__ import annotations

import io
import json
import os
import signal
import sys

import pytest
from hostile import CATALOG, assert_promise, invoke, llama

REPO = "meta-llama/Llama-3.1-8B-Instruct"
COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"


def _hub_cache(root, repo: str, config: dict) -> None:
    """The layout huggingface_hub writes (and reads offline): models--org--name/refs/main holds
    the commit, snapshots/<commit>/config.json the file."""
    folder = root / "hub" / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))


@pytest.fixture
def offline_hub(tmp_path):
    pytest.importorskip("huggingface_hub")
    _hub_cache(tmp_path, REPO, llama())
    return {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}


def test_a_hugging_face_id_is_read_from_the_local_cache_offline(offline_hub):
    result, elapsed = invoke(["explain", "--gpu", "H100", "--model", REPO, "--json"], offline_hub)
    assert_promise(result, elapsed, 0)
    doc = json.loads(result.stdout)
    assert doc["model"]["name"] == REPO and doc["model"]["source"] == "Hugging Face cache"
    assert doc["model"]["model_type"] == "llama" and doc["selected"] == "FLASH_ATTN"
    for args in (["preflight", "--gpu", "H100", "--model", REPO], ["tune", "--dry-run", "--gpu", "H100", "--model", REPO]):
        result, elapsed = invoke(args, offline_hub)
        assert_promise(result, elapsed, 0)


def test_a_hugging_face_id_not_in_the_cache_offline_is_one_line(offline_hub):
    result, elapsed = invoke(["explain", "--gpu", "H100", "--model", "Qwen/Qwen3-8B"], offline_hub)
    assert_promise(result, elapsed, 2, "Qwen/Qwen3-8B: config.json is not in the local Hugging Face cache")


def test_a_local_folder_wins_over_a_hugging_face_id_of_the_same_spelling(offline_hub, tmp_path, monkeypatch):
    local = tmp_path / "meta-llama" / "Llama-3.1-8B-Instruct"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps(llama(num_key_value_heads=4)))
    monkeypatch.chdir(tmp_path)
    result, elapsed = invoke(["explain", "--gpu", "H100", "--model", REPO, "--json"], offline_hub)
    assert_promise(result, elapsed, 0)
    assert json.loads(result.stdout)["model"]["source"] == "folder"


def test_without_huggingface_hub_an_id_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as when it is not installed
    result, elapsed = invoke(["explain", "--gpu", "H100", "--model", REPO])
    assert_promise(result, elapsed, 2, "pip install 'attnsel[hf]'")


def test_an_unreachable_hub_is_answered_without_huggingface_hubs_retries(tmp_path, monkeypatch):
    """huggingface_hub retries a refused connection for 23 s; one attempt answers instead: a Hub endpoint
    on a local port nobody listens on refuses at once, and the download is never tried."""
    import socket

    hub = pytest.importorskip("huggingface_hub")
    constants = pytest.importorskip("huggingface_hub.constants")
    with socket.socket() as probe:  # a free local port, closed again: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    tried = []
    monkeypatch.setattr(hub, "hf_hub_download", lambda *a, **k: tried.append(a))
    result, elapsed = invoke(["explain", "--gpu", "H100", "--model", "Qwen/Qwen3-8B"], {"HF_HOME": str(tmp_path)})
    assert_promise(result, elapsed, 2, "Qwen/Qwen3-8B: the Hugging Face Hub cannot be reached")
    assert tried == []


@pytest.mark.parametrize("failure, fragment", [
    ("GatedRepoError", "is a gated model"),
    ("RepositoryNotFoundError", "no Hugging Face model"),
    ("EntryNotFoundError", "has no config.json"),
    ("LocalEntryNotFoundError", "cannot be reached"),
    ("ConnectionError", "cannot read config.json from the Hugging Face Hub"),
])
def test_hub_failures_are_one_line_each(failure, fragment):
    """Each way the Hub answers (the classes huggingface_hub raises, found by name in their MRO)."""
    from attnsel.attention.model.source import _hub_error

    hub_errors = pytest.importorskip("huggingface_hub.errors")
    cls = getattr(hub_errors, failure, None) or ConnectionError
    exc = cls.__new__(cls)
    Exception.__init__(exc, "404 Client Error\nmore lines")
    message = _hub_error(REPO, exc)
    assert fragment in message and "\n" not in message


def test_an_attention_free_model_is_answered_as_such():
    result, elapsed = invoke(["explain", "--gpu", "H100", "--model", "mamba-130m"])
    assert_promise(result, elapsed, 0)
    text = " ".join(result.stdout.split())
    assert "has no attention layers: vLLM picks no attention backend" in text
    assert "follows the Mamba state" in text and "head size 0" not in text
    doc = json.loads(invoke(["explain", "--gpu", "H100", "--model", "mamba-130m", "--json"])[0].stdout)
    assert doc["attention_free"] is True and doc["backends"] == [] and doc["selected"] is None
    matrix = invoke(["explain", "--gpu", "all", "--model", "mamba-130m"])[0]
    assert matrix.exit_code == 0 and "no attention layers" in " ".join(matrix.stdout.split())
    preflight, _ = invoke(["preflight", "--gpu", "H100", "--model", "mamba-130m"])
    assert preflight.exit_code == 0 and "no attention layer asks for a backend" in preflight.stdout


def test_an_unforeseen_error_is_exit_70_in_one_line_and_debug_shows_the_traceback(monkeypatch):
    from attnsel.probe import gpu_table

    def broken(name):
        raise RuntimeError("simulated bug\nwith a second line")

    monkeypatch.setattr(gpu_table, "find_gpu", broken)
    result, elapsed = invoke(["explain", "--gpu", "H100", "--head-size", "128"])
    assert_promise(result, elapsed, 70, "internal error RuntimeError: simulated bug with a second line")
    line = result.stderr.strip()
    assert "not a verdict" in line and "ATTNSEL_DEBUG=1" in line and "gpu_table" not in line.split("(at ")[0]
    debug, _ = invoke(["explain", "--gpu", "H100", "--head-size", "128"], {"ATTNSEL_DEBUG": "1"})
    assert debug.exit_code == 70
    assert "Traceback (most recent call last)" in debug.stderr and "RuntimeError: simulated bug" in debug.stderr
    assert debug.stderr.rstrip().splitlines()[-1].startswith("error: internal error RuntimeError")


class _InterruptingStdout(io.StringIO):
    """A stdout whose first write delivers SIGINT to this process, as a Ctrl-C would mid-write."""

    def write(self, text):
        if not self.getvalue():
            os.kill(os.getpid(), signal.SIGINT)
        return super().write(text)


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_json_is_written_whole_when_ctrl_c_arrives_mid_write(monkeypatch):
    from attnsel.cli.common import print_json

    document = {"rows": [{"i": i, "text": "x" * 100} for i in range(2000)]}
    out = _InterruptingStdout()
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(KeyboardInterrupt):
        print_json(document)
        for _ in range(1000):  # the held-back SIGINT arrives once the document is out
            pass
    assert json.loads(out.getvalue()) == document


def test_catalog_configs_read_through_stdin_match_the_catalog():
    text = (CATALOG / "qwen3-8b.json").read_text()
    by_name = json.loads(invoke(["explain", "--gpu", "H100", "--model", "qwen3-8b", "--json"])[0].stdout)
    by_stdin = json.loads(invoke(["explain", "--gpu", "H100", "--model", "-", "--json"], stdin=text)[0].stdout)
    assert by_stdin["model"]["source"] == "stdin"
    assert by_stdin["backends"] == by_name["backends"] and by_stdin["selected"] == by_name["selected"]
