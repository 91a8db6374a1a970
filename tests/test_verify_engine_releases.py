"""What `attnsel verify`'s engine worker gives vLLM and reads back, per release: the records
bench/tools/engine_cpu_check.py made from each release's wheel (tests/fixtures/verify_engine/vllm_0_X.json;
0.26 on from the installed release on a stand-in H100, 0.24 from its source), replayed
against today's code and release data. A change to the engine arguments, the facts read back, a
log pattern or a release's `engine` data fails here until the check is run again for it."""

import pytest
from recordings import FIXTURES, recorded

from attnsel.attention.versions import release_profiles, resolved_data, select_profile
from attnsel.bench.tools import engine_cpu_check as CHECK
from attnsel.bench.verify import engine_log
from attnsel.bench.verify import engine_worker as EW
from attnsel.bench.verify import inspection as RB

# every release in attention/versions from 0.26 (checked installed in its layer), and 0.24 (from its
# source), that has its recording (tests/test_parity_recorded.py's recording gate fails for one that has none)
RELEASES = ("0_24", *(name.removeprefix("vllm_") for name in release_profiles()
                      if tuple(resolved_data(name)["vllm_release"]) >= (0, 26, 0)
                      and (FIXTURES / "verify_engine" / f"{name}.json").exists()))
INSTALLED = RELEASES[1:]  # 0.24: no release layer here, its source only
RECORDS = {r: recorded("verify_engine", f"vllm_{r}.json") for r in RELEASES}


def load(release):
    import json

    return json.loads(RECORDS[release].read_text())


@pytest.mark.parametrize("release", RELEASES)
def test_nothing_is_off_in_the_release_and_its_data_is_what_was_checked(release):
    record = load(release)
    assert CHECK.problems(record) == [] and record["problems"] == []
    assert record["engine"] == select_profile(record["vllm_version"]).profile.engine


@pytest.mark.parametrize("release", RELEASES)
def test_every_log_pattern_was_found_where_the_release_data_says_and_reads_its_line(release):
    record = load(release)
    rows = record["log_patterns"]
    engine = select_profile(record["vllm_version"]).profile.engine
    # the common patterns first, less those a line the release brought replaces (its data's
    # engine.log_patterns, by field), then those lines
    own_fields = {p.field for p in engine_log.release_patterns(engine)}
    patterns = [p for p in engine_log.PATTERNS if p.field not in own_fields]
    common, own = rows[:len(patterns)], rows[len(patterns):]
    assert sorted(row["field"] for row in own) == sorted(own_fields)
    assert all(row["found"] and row["example_reads"] for row in own), own
    for pattern, row in zip(patterns, common, strict=True):
        source, anchor, example = engine_log.release_source(pattern, engine.get("log_sources"))
        assert (row["field"], row["source"], row["anchor"], row["example"]) == (pattern.field, source, anchor, example)
        assert row["found"], row
        assert pattern.regex.search(example), (release, pattern.field)


@pytest.mark.parametrize("release", INSTALLED)
def test_the_arguments_verify_passes_today_land_where_verify_expects(release):
    record = load(release)
    assert record["mode"] == "installed" and len(record["cases"]) == len(CHECK.CASES)
    for row in record["cases"]:
        assert "error" not in row and row["off"] == {}, row
        job = {**row["job"], "model_dir": "M"}
        assert {k: v for k, v in EW.engine_kwargs(job).items() if k != "model"} == row["kwargs"]
        landed = row["landed"]
        assert landed["attention_backend"] == job["backend"] and landed["max_model_len"] == job["max_model_len"]
    # every fact the worker reads back is an attribute of that release's config
    assert set(record["config_attributes"]) == set(RB.CONFIG_FACTS.values())
    assert all(record["config_attributes"].values())


def test_an_mla_layer_names_no_backend_in_any_release_so_it_is_read_from_the_log():
    for release in RELEASES:
        inspection = load(release)["inspection"]
        assert inspection["names_backend"] == {"Attention": True, "MLAAttention": False}
        assert all(inspection["ready_response"].values())  # block size and KV cache synced to the front end
    text = "(self_attn): DeepseekV2MLAAttention(\n  (mla_attn): MLAAttention(\n    (kv_b_proj): ColumnParallelLinear()"
    engine = select_profile("0.33").profile.engine
    assert RB.backends_in_inspection(text) == [] and RB.unnamed_attention_layers(text, engine) == ["MLAAttention"]


def test_vllm_0_33_s_composite_backends_share_an_impl_and_are_read_from_the_log_too():
    engine = select_profile("0.33").profile.engine
    text = "(attn): Attention(head_size=128, num_heads=32, backend=CompositeAttentionImpl)"
    assert RB.backends_in_inspection(text, engine["inspection_ambiguous_impls"]) == []
    assert RB.unnamed_attention_layers(text, engine) == ["Attention (CompositeAttentionImpl)"]
    assert "inspection_ambiguous_impls" not in select_profile("0.26").profile.engine


def test_vllm_0_33_s_reworded_log_lines_still_read():
    facts = engine_log.parse_engine_log(
        "INFO [interface.py:777] Setting kv cache block size to 64 for FLASHMLA/TRITON_MLA backend(s).\n"
        "INFO [kv_cache_utils.py:1147] GPU KV cache size: 832,000 tokens, Maximum concurrency for 4,352 tokens "
        "per request: 20.05x\n")
    assert facts["block_size_set"] == 64 and facts["kv_cache_tokens"] == 832000
    assert facts["max_concurrency"] == {"tokens": 4352, "requests": 20.05}
