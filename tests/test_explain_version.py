"""Which rule profile answers: --vllm-version, the installed vLLM (package metadata, never an
import), or the newest profile. The issue's contract: a release between two profiles -> the "nearest
older"; < 0.17 -> the oldest release profile (0.17.0) with a note that it is older than any profile; newer than every
profile -> the newest, with a note.
"""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attnsel.attention.versions.choice as rules
from attnsel.attention.versions.choice import (
    choose_profile,
    parse_vllm_version,
    profile_for_version,
    select_profile,
)
from attnsel.cli.app import app
from attnsel.errors import UserInputError

FAKE = Path(__file__).parent / "fixtures" / "fake_vllm"
RUNNER = CliRunner()


def run_json(*args):
    result = RUNNER.invoke(app, ["explain", *args, "--json"])
    return result, json.loads(result.stdout) if result.stdout.strip() else None


@pytest.mark.parametrize(
    "version,profile,note_fragment",
    [
        ("0.17.0", "vllm_0_17", None),
        ("0.17.1", "vllm_0_17", None),
        ("0.24.0", "vllm_0_24", None),
        ("0.32.9", "vllm_0_32", None),
        ("0.31.2", "vllm_0_31", None),
        ("0.16.0", "vllm_0_17", "older than every rule profile"),
        ("0.14.0", "vllm_0_17", "older than every rule profile"),
        ("0.33.0", "vllm_0_33", None),
        ("0.33.1", "vllm_0_33", None),
        ("0.33.0rc1.dev12+g4ba787ec9", "vllm_0_33", None),
    ],
)
def test_version_to_profile(version, profile, note_fragment):
    choice = profile_for_version(version)
    assert choice.profile.name == profile
    if note_fragment is None:
        assert choice.note is None
    else:
        assert note_fragment in choice.note and profile in choice.note


def test_every_release_profile_answers_for_its_own_minor_release():
    for name in rules.release_profiles():
        major, minor, _patch = rules.resolved_data(name)["vllm_release"]
        for version in (f"{major}.{minor}", f"{major}.{minor}.0", f"{major}.{minor}.7"):
            choice = profile_for_version(version)
            assert (choice.profile.name, choice.note) == (name, None)


_NEWEST_MAJOR, _NEWEST_MINOR, _ = rules.resolved_data(rules.release_profiles()[-1])["vllm_release"]


@pytest.mark.parametrize("version", [f"{_NEWEST_MAJOR}.{_NEWEST_MINOR + 1}.0", f"{_NEWEST_MAJOR}.{_NEWEST_MINOR + 1}.2",
                                     f"{_NEWEST_MAJOR + 1}.0.0", f"{_NEWEST_MAJOR}.{_NEWEST_MINOR + 7}rc1"])
def test_a_newer_unknown_release_keeps_the_newest_profile_with_a_note(version):
    newest = rules.release_profiles()[-1]
    choice = profile_for_version(version)
    assert choice.profile.name == newest
    assert "newer than every rule profile" in choice.note and newest in choice.note and version in choice.note


@pytest.mark.parametrize("version,profile", [("0.20", "vllm_0_17"), ("0.23.4", "vllm_0_17"), ("0.32.9", "vllm_0_24")])
def test_a_release_between_profiles_gets_the_nearest_older_with_a_note(monkeypatch, version, profile):
    # only three releases known: the ones in between are answered by the nearest older
    monkeypatch.setattr(rules, "release_profiles", lambda: ["vllm_0_17", "vllm_0_24", "vllm_0_33"])
    choice = profile_for_version(version)
    assert choice.profile.name == profile
    assert "nearest older" in choice.note and profile in choice.note and version in choice.note


def test_unreadable_version_is_bad_input():
    with pytest.raises(UserInputError):
        profile_for_version("latest")
    assert parse_vllm_version("v0.20") == (0, 20, 0)


def test_profile_names_still_work():
    assert choose_profile("seed").profile.name == "seed_0_17"
    assert choose_profile("seed-0.17").profile.name == "seed_0_17"  # vLLM main of Feb 2026, by name only
    assert choose_profile("0.17").profile.name == "vllm_0_17"  # the 0.17.0 release
    assert choose_profile("vllm_0_33").profile.name == "vllm_0_33"
    assert choose_profile(None).profile.name == "seed_0_17"  # library default unchanged


def test_default_without_vllm_is_the_newest_profile(monkeypatch):
    monkeypatch.setattr(rules, "installed_vllm_version", lambda: None)
    choice = select_profile(None)
    assert choice.profile.name == rules.release_profiles()[-1] and choice.source == "newest"
    assert "no vLLM installed" in choice.reason


def test_head_names_the_newest_release_in_the_versions_folder():
    # computed, not written into one release's data: adding a release moves it
    newest = rules.release_profiles()[-1]
    assert choose_profile("head").profile.name == newest
    assert select_profile("head").source == "--vllm-version"
    assert not any("head" in rules.resolved_data(name).get("answers_for", []) for name in rules.available_profiles())


@pytest.mark.parametrize("name", rules.release_profiles())
def test_with_a_release_installed_explain_answers_for_it_by_default(tmp_path, monkeypatch, name):
    # the header of the release's wheel METADATA, as pip leaves it in site-packages
    major, minor, patch = rules.resolved_data(name)["vllm_release"]
    version = f"{major}.{minor}.{patch}"
    dist_info = tmp_path / f"vllm-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: vllm\nVersion: {version}\n\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    result, doc = run_json("--head-size", "128", "--gpu", "H100")
    assert result.exit_code == 0, result.output
    assert doc["profile"] == name and f"vLLM {version} is installed here" in doc["profile_reason"]


def test_default_follows_the_installed_version(monkeypatch):
    monkeypatch.setattr(rules, "installed_vllm_version", lambda: "0.24.2")
    choice = select_profile(None)
    assert choice.profile.name == "vllm_0_24" and choice.note is None
    assert "vLLM 0.24.2 is installed here" in choice.reason


def test_an_installed_release_newer_than_every_profile_gets_the_newest_with_a_note(monkeypatch):
    newer = f"{_NEWEST_MAJOR}.{_NEWEST_MINOR + 1}.0"
    monkeypatch.setattr(rules, "installed_vllm_version", lambda: newer)
    choice = select_profile(None)
    assert choice.profile.name == rules.release_profiles()[-1]
    assert f"vLLM {newer} is installed here" in choice.reason and "newer than every rule profile" in choice.reason


def test_flag_beats_the_installed_version(monkeypatch):
    monkeypatch.setattr(rules, "installed_vllm_version", lambda: "0.17.0")
    assert select_profile("0.33").profile.name == "vllm_0_33"


@pytest.mark.parametrize("era,version,profile", [("v033", "0.33.0", "vllm_0_33"), ("seed", "0.17.0", "vllm_0_17")])
def test_detection_reads_a_real_dist_info_without_importing_vllm(monkeypatch, era, version, profile):
    # a tmp-style dist-info on sys.path is what importlib.metadata sees for an installed vLLM
    monkeypatch.syspath_prepend(str(FAKE / era))
    assert rules.installed_vllm_version() == version
    result, doc = run_json("--head-size", "128", "--gpu", "H100")
    assert result.exit_code == 0
    assert doc["profile"] == profile
    assert f"vLLM {version} is installed here" in doc["profile_reason"]
    assert "vllm" not in sys.modules  # metadata only: vLLM itself was never imported


def test_cli_note_for_a_newer_version():
    result, doc = run_json("--head-size", "128", "--gpu", "H100", "--vllm-version", f"{_NEWEST_MAJOR}.{_NEWEST_MINOR + 1}")
    assert result.exit_code == 0
    assert doc["profile"] == rules.release_profiles()[-1] and "newer than every rule profile" in doc["profile_note"]


def test_cli_note_for_an_older_version():
    result, doc = run_json("--head-size", "128", "--gpu", "H100", "--vllm-version", "0.12.0")
    assert result.exit_code == 0
    assert doc["profile"] == "vllm_0_17" and "older than every rule profile" in doc["profile_note"]


# --- both profiles on the same inputs, where vLLM changed ------------------------------------------
def test_block_size_48_seed_literal_vs_033_divisibility():
    # seed: --block-size must be in the BlockSize Literal (§4) -> argparse error, exit 1;
    # 0.33: no Literal, TRITON/FLASH_ATTN accept any multiple of 16 (§9) -> vLLM starts with 48
    seed, seed_doc = run_json("--head-size", "128", "--gpu", "H100", "--block-size", "48", "--vllm-version", "seed")
    assert seed.exit_code == 1 and "invalid choice: 48" in seed_doc["error"]
    assert all(b["reasons"] == ["block_size not supported"] for b in seed_doc["backends"])
    new, new_doc = run_json("--head-size", "128", "--gpu", "H100", "--block-size", "48", "--vllm-version", "0.33")
    assert new.exit_code == 0 and (new_doc["selected"], new_doc["block_size"]) == ("FLASH_ATTN", 48)
    triton = next(b for b in new_doc["backends"] if b["name"] == "TRITON_ATTN")
    assert triton["valid"] is True


def test_flashinfer_on_cc75_valid_in_seed_not_in_033():
    # §3a seed FLASHINFER CC 7.5-12.1; §9 0.33 CC 8.0-12.1
    _r, seed_doc = run_json("--head-size", "128", "--dtype", "fp16", "--gpu", "T4", "--vllm-version", "0.17")
    _r, new_doc = run_json("--head-size", "128", "--dtype", "fp16", "--gpu", "T4", "--vllm-version", "0.33")
    seed_fi = next(b for b in seed_doc["backends"] if b["name"] == "FLASHINFER")
    new_fi = next(b for b in new_doc["backends"] if b["name"] == "FLASHINFER")
    assert seed_fi["valid"] is True
    assert new_fi["reasons"] == ["compute capability not supported"]


def test_sink_reason_renamed():
    # §2 seed "sink setting not supported" -> §9 "attention sinks not supported" (FLEX has no sinks)
    args = ("--head-size", "128", "--gpu", "H100", "--has-sink", "--attention-backend", "FLEX_ATTENTION")
    _r, seed_doc = run_json(*args, "--vllm-version", "0.17")
    _r, new_doc = run_json(*args, "--vllm-version", "0.33")
    assert seed_doc["explicit_backend"]["reasons"] == ["sink setting not supported"]
    assert new_doc["explicit_backend"]["reasons"] == ["attention sinks not supported"]


def test_sliding_window_is_ignored_with_a_note_under_the_seed():
    _r, seed_doc = run_json("--head-size", "128", "--gpu", "H100", "--sliding-window", "--vllm-version", "0.17")
    assert seed_doc["inputs"]["has_sliding_window"] is False
    assert any("sliding window" in n and "ignored" in n for n in seed_doc["notes"])
    _r, new_doc = run_json("--head-size", "128", "--gpu", "H100", "--sliding-window", "--vllm-version", "0.33")
    assert new_doc["inputs"]["has_sliding_window"] is True
    assert not any("ignored" in n for n in new_doc["notes"])
