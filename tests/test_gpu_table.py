import pytest

from attnsel.errors import UserInputError
from attnsel.probe import families, find_gpu, match_device_name


@pytest.mark.parametrize(
    "nvml_name, key",
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100-PCIE"),
        ("NVIDIA H200", "H200"),  # the name our H200 machines report (docs/gpu-facts.md §1)
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 5090", "RTX5090"),
    ],
)
def test_nvml_device_names_map_to_the_right_table_entry(nvml_name, key):
    assert match_device_name(nvml_name).key == key


def test_user_typed_names_are_case_and_punctuation_insensitive():
    assert find_gpu("rtx 4090").key == "RTX4090"
    assert find_gpu("a100-80gb").compute_capability == (8, 0)


def test_unknown_gpu_name_suggests_close_names():
    with pytest.raises(UserInputError) as err:
        find_gpu("H10")
    assert "H100" in err.value.message and "--capability" in err.value.message


def test_families_cover_volta_to_blackwell_once_each():
    labels = [label for label, _ in families()]
    assert len(labels) == len(set(labels))
    assert any(l.startswith("Hopper") for l in labels) and any(l.startswith("Blackwell 10.0") for l in labels)


def test_every_gpu_name_attnsel_prints_can_be_typed_back():
    from attnsel.probe.gpu_table import GPU_TABLE

    for spec in GPU_TABLE:  # `explain` prints "GPU H100 SXM5 80GB"; `--gpu "H100 SXM5 80GB"` is that GPU
        assert find_gpu(spec.name) is spec
        assert find_gpu(spec.name.lower().replace(" ", "-")) is spec
