"""CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER resolution (CUDA programming guide "CUDA Environment
Variables", MIG user guide "CUDA Device Enumeration", nvitop parse_cuda_visible_devices doctests;
docs/probe.md, "CUDA_VISIBLE_DEVICES"; vllm#41848, PR#51716, PR#41776)."""

import doctest

import pytest

import attnsel.probe.visible_devices as vd
from attnsel.probe.visible_devices import MigChild, PhysicalGpu, resolve_visible_devices


def test_doctests_of_the_resolver_pass():
    result = doctest.testmod(vd)
    assert result.attempted >= 10
    assert result.failed == 0


@pytest.mark.parametrize("module", ["nvml.protocol", "nvml.prefetch", "links.p2p", "capability", "mixed_gpus"])
def test_doctests_of_the_other_probe_modules_pass(module):
    import importlib

    result = doctest.testmod(importlib.import_module(f"attnsel.probe.{module}"))
    assert result.attempted >= 1
    assert result.failed == 0


H100 = [
    PhysicalGpu(i, u, f"00000000:{b}:00.0", "NVIDIA H100 80GB HBM3", (9, 0))
    for i, (u, b) in enumerate(
        [
            ("GPU-aaaa1111-0000-4000-8000-000000000000", "18"),
            ("GPU-bbbb2222-0000-4000-8000-000000000001", "2A"),
            ("GPU-bbbb3333-0000-4000-8000-000000000002", "3A"),
            ("GPU-cccc4444-0000-4000-8000-000000000003", "5D"),
        ]
    )
]


@pytest.mark.parametrize(
    "cvd, expected, invalid",
    [
        (None, [0, 1, 2, 3], None),  # unset: every device
        ("", [], None),  # empty: none
        ("3,1", [3, 1], None),  # the order written is the CUDA order
        ("0,2,-1,1", [0, 2], "-1"),  # CUDA guide's own example: stops at the invalid entry
        ("1,9,2", [1], "9"),  # out of range ends the list
        ("GPU-cccc", [3], None),  # unique UUID prefix
        ("GPU-bbbb", [], "GPU-bbbb"),  # ambiguous prefix is invalid
        ("GPU-bbbb3,GPU-aaaa", [2, 0], None),
        ("GPU-aaaa1111-0000-4000-8000-000000000000", [0], None),  # full UUID
        ("GPU-ffff", [], "GPU-ffff"),  # no such GPU
        ("0,GPU-cccc", [0], "GPU-cccc"),  # integers and UUIDs cannot be mixed (nvitop)
        ("banana,0", [], "banana"),
        ("1,1", [], None),  # duplicate: no device at all (nvitop '0,0' -> [])
    ],
)
def test_cuda_visible_devices_resolves_as_cuda_does(cvd, expected, invalid):
    res = resolve_visible_devices(H100, cvd, "PCI_BUS_ID")
    assert res.physical_indices == expected
    assert res.invalid_entry == invalid
    assert [d.logical_index for d in res.devices] == list(range(len(expected)))


def test_duplicate_entry_is_reported_as_a_problem():
    res = resolve_visible_devices(H100, "2,0,2")
    assert res.devices == ()
    assert any("twice" in p for p in res.problems)


def test_uuid_forms_never_crash_the_resolver():
    # vllm#41848: int() on a MIG UUID raised ValueError; every odd form must give an answer instead.
    for value in ["MIG-xyz", "MIG-GPU-aaaa1111/1/0", "GPU-", ",", "0,", " ", "+1", "GPU-AAAA1111"]:
        res = resolve_visible_devices(H100, value)
        assert isinstance(res.physical_indices, list)
    assert resolve_visible_devices(H100, "GPU-AAAA1111").physical_indices == [0]  # hex case does not matter


MIXED = [
    PhysicalGpu(0, "GPU-10", "00000000:03:00.0", "NVIDIA GeForce GTX 1080 Ti", (6, 1), 3584 * 1911.0),
    PhysicalGpu(1, "GPU-30", "00000000:04:00.0", "NVIDIA GeForce RTX 3090", (8, 6), 10496 * 2100.0),
    PhysicalGpu(2, "GPU-11", "00000000:81:00.0", "NVIDIA GeForce GTX 1080 Ti", (6, 1), 3584 * 1911.0),
    PhysicalGpu(3, "GPU-31", "00000000:82:00.0", "NVIDIA GeForce RTX 3090", (8, 6), 10496 * 2100.0),
]


def test_integers_count_in_fastest_first_order_by_default():
    # vllm#19045: with the default FASTEST_FIRST, "0,1" are the two 3090s, not NVML GPUs 0 and 1.
    res = resolve_visible_devices(MIXED, "0,1", None)
    assert res.device_order == "FASTEST_FIRST"
    assert res.physical_indices == [1, 3]
    notes = vd.describe_order(res, MIXED)
    assert notes and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in notes[0]


def test_pci_bus_id_order_matches_nvml_numbering():
    res = resolve_visible_devices(MIXED, "0,1", "PCI_BUS_ID")
    assert res.physical_indices == [0, 1]
    assert vd.describe_order(res, MIXED) == []


def test_identical_gpus_keep_pci_order_under_fastest_first():
    assert resolve_visible_devices(H100, None, None).physical_indices == [0, 1, 2, 3]
    assert vd.describe_order(resolve_visible_devices(H100, None, None), H100) == []


def test_unknown_device_order_value_is_flagged_and_treated_as_default():
    res = resolve_visible_devices(MIXED, None, "pci_bus_id")
    assert res.device_order == "FASTEST_FIRST"
    assert res.problems


MIG_PARENT = "GPU-3eb79704-1571-707c-aee8-f43ce747313d"
MIGS = (
    MigChild(0, "MIG-d184f67c-c95f-5ef2-a935-195bd0094fbd", 1, 0),
    MigChild(1, "MIG-37b51284-1df4-5451-979d-3231ccb0822e", 2, 0),
)
MIG_BOX = [
    PhysicalGpu(0, MIG_PARENT, "00000000:07:00.0", "NVIDIA A100-SXM4-40GB", (8, 0), mig_enabled=True, mig_children=MIGS),
    PhysicalGpu(1, "GPU-849d5a8d-610e-eeea-1fd4-81ff44a23794", "00000000:0F:00.0", "NVIDIA A100-SXM4-40GB", (8, 0)),
]


@pytest.mark.parametrize(
    "cvd, refs",
    [
        ("MIG-37b51284-1df4-5451-979d-3231ccb0822e", ["0:1"]),  # MIG UUID (R470+ form)
        ("MIG-37b5", ["0:1"]),  # unique prefix
        (f"MIG-{MIG_PARENT}/2/0", ["0:1"]),  # legacy MIG-GPU-<uuid>/<GI>/<CI>
        ("MIG-GPU-3eb79704/1/0", ["0:0"]),  # legacy form with a short GPU UUID
        ("MIG-d184f67c-c95f-5ef2-a935-195bd0094fbd,MIG-37b51284-1df4-5451-979d-3231ccb0822e", ["0:0"]),  # one MIG max
        (None, ["0:0"]),  # a GPU in MIG mode is seen only through its first MIG device
    ],
)
def test_mig_entries_resolve_to_the_slice_not_the_parent(cvd, refs):
    res = resolve_visible_devices(MIG_BOX, cvd, "PCI_BUS_ID")
    assert res.refs == refs
    assert res.devices[0].uuid.startswith("MIG-")


def test_a_whole_gpu_next_to_a_mig_gpu_can_still_be_selected():
    res = resolve_visible_devices(MIG_BOX, "1", "PCI_BUS_ID")
    assert res.refs == ["1"]
    assert res.devices[0].mig is None
