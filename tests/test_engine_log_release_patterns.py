"""Engine log lines a release brought or reworded are that release's data (`engine.log_patterns` in
attention/versions/vllm_0_X.json, inherited), read through the version object: every such pattern
reads its own example line, finds its format string in the release's source where the engine check
recorded it, and a release without any reads its log exactly as the common patterns do."""

from __future__ import annotations

import pytest

from attnsel.attention.versions import get_profile, release_profiles
from attnsel.bench.verify import engine_log

RELEASES = release_profiles()
WITH_OWN = [n for n in RELEASES if engine_log.release_patterns(get_profile(n).engine)]
# a log with a line of each common pattern (their own examples) and of each release's own
ALL_EXAMPLES = "\n".join(dict.fromkeys([p.example for p in engine_log.PATTERNS] +
                                      [p.example for n in WITH_OWN for p in engine_log.release_patterns(get_profile(n).engine)]))


def test_some_release_brings_lines_of_its_own():
    assert WITH_OWN


@pytest.mark.parametrize("release", RELEASES)
def test_a_release_reads_its_log_with_the_common_patterns_and_its_own(release):
    own = engine_log.release_patterns(get_profile(release).engine)
    facts = engine_log.parse_engine_log(ALL_EXAMPLES, own)
    common = engine_log.parse_engine_log(ALL_EXAMPLES)
    replaced = {p.field for p in own}
    # fields the release does not read its own way come out as before, byte for byte
    assert {k: v for k, v in facts.items() if k not in replaced} == {k: v for k, v in common.items() if k not in replaced}
    for pattern in own:
        match = pattern.regex.search(pattern.example)
        assert match is not None, (release, pattern.field)
        assert pattern.field in facts and facts[pattern.field] is not None
        assert pattern.field in engine_log.parse_engine_log(pattern.example, own)


@pytest.mark.parametrize("release", WITH_OWN)
def test_each_own_pattern_names_a_call_and_its_literal(release):
    for pattern in engine_log.release_patterns(get_profile(release).engine):
        assert pattern.source.endswith(".py") and pattern.anchor.strip()


def test_the_extensible_kv_cache_lines_read_as_numbers():
    release = next(n for n in WITH_OWN if "kv_cache_extended_blocks" in
                   {p.field for p in engine_log.release_patterns(get_profile(n).engine)})
    own = engine_log.release_patterns(get_profile(release).engine)
    by_field = {p.field: p for p in own}
    example = by_field["kv_cache_extended_blocks"].example
    facts = engine_log.parse_engine_log(f"(EngineCore_DP0 pid=7) INFO 12-06 05:00:00 [extensible_kv_cache.py:536] {example}", own)
    blocks, gib = example.split("to ")[1].split(" blocks (")
    assert facts["kv_cache_extended_blocks"] == int(blocks)
    assert facts["kv_cache_extended_gib"] == float(gib.split(" GiB")[0])


def test_verify_reads_the_lines_of_the_release_its_engine_runs():
    from attnsel.bench.verify.run import release_log_patterns

    assert release_log_patterns(None) == ()  # a stand-in engine, no vLLM: the common patterns only
    for name in RELEASES:
        profile = get_profile(name)
        def where(patterns):
            return [(p.field, p.regex.pattern, p.source, p.anchor, p.example) for p in patterns]

        assert where(release_log_patterns(profile.vllm_version)) == where(engine_log.release_patterns(profile.engine))


def test_the_release_kits_engine_check_found_every_line_where_the_release_data_says():
    """tests/fixtures/release_kit/vllm_0_X/engine.json: bench/tools/engine_cpu_check.py run by the release kit on
    the release's own wheel, against that release's `engine` data as it is now."""
    import json
    from pathlib import Path

    for path in sorted((Path(__file__).parent / "fixtures" / "release_kit").glob("*/engine.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        engine = get_profile(record["vllm_version"]).engine
        assert record["engine"] == engine, path
        patterns = engine_log.patterns_for(engine_log.release_patterns(engine))
        rows = record["log_patterns"]
        assert [r["field"] for r in rows] == [p.field for p in patterns]
        assert all(r["found"] and r["example_reads"] for r in rows), path
