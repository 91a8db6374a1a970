"""Every rule a release's data names is one its code implements (attention/versions/code.py).

A backend's attribute may name a rule of the release's code instead of a plain value
(`"sink": {"rule": "flashinfer"}`, `"combination": "flash_attn"`); each kind has a table of the names
the release's `Rules` implements. A name missing from it would fail only when a selection reaches
that backend, so every release's data is checked here, for every release in the versions folder.
"""

import pytest

from attnsel.attention.versions import available_profiles, get_profile
from attnsel.attention.versions.validation import _NEW_INPUT_CHECKS


def _named(profile) -> set[tuple[str, str]]:
    """The rule names the release's validation can reach: a flag's only where the release's
    selector has the input that asks for it (validation.py)."""
    flags = ["mm_prefix", *(attr for field, attr, _ in _NEW_INPUT_CHECKS if profile.has_selector_field(field))]
    named: set[tuple[str, str]] = set()
    for name in profile.backend_names:
        spec = profile.backend(name)
        for field in flags:
            value = getattr(spec, field)
            if isinstance(value, dict):
                named.add(("flag", value["rule"]))
        for kind, value in (("sink", spec.sink), ("per_head", spec.per_head_quant_scales), ("kv", spec.kv_cache_dtypes)):
            if isinstance(value, dict):
                named.add((kind, value["rule"]))
        if spec.combination is not None:
            named.add(("combination", spec.combination))
        if spec.kernel_block_sizes_rule is not None:
            named.add(("kernel_sizes", spec.kernel_block_sizes_rule))
        if spec.composite is not None and spec.composite.get("causal_combination"):
            named.add(("combination", spec.composite["causal_combination"]))
    return named


@pytest.mark.parametrize("name", available_profiles())
def test_every_rule_the_data_names_is_implemented(name):
    profile = get_profile(name)
    implemented = profile.code.rule_names()
    named = _named(profile)
    assert named, name
    assert sorted(f"{kind} {rule}" for kind, rule in named if rule not in implemented[kind]) == []


def test_a_rule_no_release_implements_is_refused_by_name():
    profile = get_profile(available_profiles()[-1])
    with pytest.raises(ValueError, match="no combination rule 'not_a_rule'"):
        profile.code.combination_rule("not_a_rule")
