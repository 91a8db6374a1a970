"""bench/tools/release_env.py `--override`: a release's pin that PyPI cannot satisfy is replaced in the
requirements installed after vLLM (vLLM 0.34.0 pins flashinfer-python==0.7.3, never uploaded; its
METADATA is read here from the wheel's real Requires-Dist lines)."""

from __future__ import annotations

import pytest

from attnsel.bench.tools import release_env

# the lines of vllm-0.34.0.dist-info/METADATA that matter here (cut from the wheel, in its order)
METADATA_034 = """Metadata-Version: 2.4
Name: vllm
Version: 0.34.0
Requires-Dist: regex
Requires-Dist: transformers<5.23.0,>=5.16.1
Requires-Dist: protobuf!=6.30.*,>=5.29.6; platform_machine != "s390x"
Requires-Dist: six>=1.16.0; python_version > "3.11"
Requires-Dist: torch==2.14.0
Requires-Dist: flashinfer-python==0.7.3
Requires-Dist: nvidia-cutlass-dsl[cu13]==4.8.0
Requires-Dist: tokenspeed-mla==2.0.3; platform_system == "Linux"
Requires-Dist: pandas; extra == "bench"
Requires-Dist: opentelemetry-sdk>=1.26.0; extra == "otel"

Description text
"""


def test_override_replaces_the_pin_and_keeps_the_rest():
    overrides = release_env.parse_overrides(["flashinfer-python==0.7.4"])
    wanted = release_env.overridden_requires(METADATA_034, overrides)
    assert "flashinfer-python==0.7.4" in wanted and not any("0.7.3" in line for line in wanted)
    # everything else is installed as the wheel asks, markers kept for pip to evaluate; extras dropped
    assert 'six>=1.16.0; python_version > "3.11"' in wanted and "torch==2.14.0" in wanted
    assert "nvidia-cutlass-dsl[cu13]==4.8.0" in wanted
    assert not any("extra ==" in line for line in wanted)
    assert len(wanted) == 8


def test_override_matches_names_as_pip_does():
    # PEP 503: case, '-', '_' and '.' are one name
    overrides = release_env.parse_overrides(["Flashinfer_Python>=0.7.4", "NVIDIA.cutlass-dsl[cu13]==4.8.1"])
    wanted = release_env.overridden_requires(METADATA_034, overrides)
    assert "Flashinfer_Python>=0.7.4" in wanted and "NVIDIA.cutlass-dsl[cu13]==4.8.1" in wanted
    assert "nvidia-cutlass-dsl[cu13]==4.8.0" not in wanted


@pytest.mark.parametrize("value", ["flashinfer-python", "==0.7.4", ""])
def test_an_override_without_a_version_spec_is_refused(value):
    with pytest.raises(SystemExit, match="expected NAME followed by a version spec"):
        release_env.parse_overrides([value])


def test_an_override_of_a_package_the_release_does_not_require_is_refused():
    with pytest.raises(SystemExit, match="does not require flash-attn"):
        release_env.overridden_requires(METADATA_034, release_env.parse_overrides(["flash-attn==2.0"]))


def test_build_help_documents_the_override(capsys):
    with pytest.raises(SystemExit):
        release_env.main(["build", "--help"])
    assert "--override" in capsys.readouterr().out
