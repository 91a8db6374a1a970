"""The checks of a deployment's GPUs: how many, whether they are one model, how they are linked,
and whether they run the model's dtype (docs/vllm-rules.md §5g, docs/probe.md "Custom all-reduce").
A `ProbeReport` in, a `Check` out; also the report of a target machine described by --gpu/--num-gpus."""

from __future__ import annotations

from collections.abc import Sequence

from attnsel.attention.preflight.status import FAIL, PASS, WARN, Check
from attnsel.probe import GpuInfo, ProbeReport, bf16_error, same_model
from attnsel.probe.links import (
    VLLM_CAR_NO_P2P,
    VLLM_CAR_PCIE_ONLY,
    unknown_verdict,
    vllm_fully_connected,
)

PCI_BUS_ID = "PCI_BUS_ID"

# vLLM custom_all_reduce.py: CustomAllreduce._SUPPORTED_WORLD_SIZES and its warning, verbatim.
CUSTOM_ALLREDUCE_WORLD_SIZES = (2, 4, 6, 8)
VLLM_CAR_WORLD_SIZE = (
    "Custom allreduce is disabled due to an unsupported world size: {n}. Supported world sizes: {sizes}. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly."
)
# docs/vllm-rules.md §5g, NvmlCudaPlatform.log_warnings (the probe keeps the same text).
VLLM_MIXED_GPU_WARNING = (
    "Detected different devices in the system: {names}. Please make sure to set `CUDA_DEVICE_ORDER=PCI_BUS_ID` "
    "to avoid unexpected behavior."
)

TARGET_SOURCE = "target"  # ProbeReport.source for a machine described by --gpu/--num-gpus


# ---------------------------------------------------------------------------------------------
# A target machine without GPUs here


def target_report(gpu_name: str, num_gpus: int) -> ProbeReport:
    """A ProbeReport for `--gpu NAME --num-gpus N`: N identical GPUs from the built-in table;
    links between them unknown (nothing was probed)."""
    from attnsel.probe import find_gpu

    spec = find_gpu(gpu_name, capability_flag=False)  # preflight has no --capability
    gpus = tuple(
        GpuInfo(
            index=i,
            physical_index=None,
            name=spec.name,
            compute_capability=spec.compute_capability,
            memory_total_bytes=int(spec.memory_gib * 2**30),
            table_peak_memory_bandwidth_bytes_per_s=spec.peak_memory_bandwidth_bytes_per_s,
        )
        for i in range(num_gpus)
    )
    verdict = unknown_verdict(f"not probed: --gpu {gpu_name} describes a target machine", num_gpus)
    return ProbeReport(
        source=TARGET_SOURCE, driver_version=None, cuda_driver_version=None, gpus=gpus,
        nvlink=verdict, mixed_gpus=False, device_order=PCI_BUS_ID,
    )


# ---------------------------------------------------------------------------------------------
# The checks


def _usable(report: ProbeReport) -> list[GpuInfo]:
    return [g for g in report.gpus if g.error is None and g.compute_capability is not None]


def group_gpus(report: ProbeReport, tp: int) -> list[GpuInfo]:
    """The GPUs a TP group of `tp` runs on: logical 0..tp-1 (vLLM's local ranks)."""
    return sorted(report.gpus, key=lambda g: g.index)[:tp]


def check_gpu_count(report: ProbeReport, tp: int, parallel: str | None = None) -> Check:
    """Enough usable GPUs for `tp` (with pipeline parallelism: TP x PP, named by `parallel`)."""
    needs = parallel or f"--tensor-parallel-size {tp}"
    lower = "--tensor-parallel-size" if parallel is None else "--tensor-parallel-size or --pipeline-parallel-size"
    usable = _usable(report)
    usable_ids = {id(g) for g in usable}  # identity, not ==: linear in the GPU count
    broken = [g for g in report.gpus if id(g) not in usable_ids]
    if not report.gpus:
        # the probe's note names CUDA_VISIBLE_DEVICES when it hides every GPU NVML sees (probe/collect.py)
        hidden = next((note for note in report.notes if "CUDA_VISIBLE_DEVICES=" in note), None)
        why = report.fallback_reason or hidden or "NVML and torch.cuda see no GPU"
        return Check(
            "gpu-count", FAIL, f"no GPU visible ({why}); {needs} needs {tp}",
            hint="run preflight on the GPU machine, or pass --gpu NAME --num-gpus N to check a target machine",
        )
    if len(usable) < tp:
        extra = f" ({len(broken)} more visible but failing: {broken[0].error})" if broken else ""
        return Check(
            "gpu-count", FAIL,
            f"{len(usable)} usable GPU(s) visible{extra}, {needs} needs {tp}",
            hint=f"make {tp} GPUs visible (CUDA_VISIBLE_DEVICES={report.cuda_visible_devices or 'unset'}) "
                 f"or lower {lower}" + (f" to {max(1, len(usable))}" if parallel is None else ""),
        )
    if any(g.index < tp for g in broken):
        bad = next(g for g in broken if g.index < tp)
        return Check("gpu-count", FAIL, f"GPU {bad.index} of the tensor-parallel group cannot be used: {bad.error}",
                     hint="check `nvidia-smi`; hide the GPU with CUDA_VISIBLE_DEVICES")
    used = "GPU 0" if tp == 1 else f"GPUs 0-{tp - 1}"
    seen = "on the target machine" if report.source == TARGET_SOURCE else "visible"
    return Check("gpu-count", PASS, f"{len(usable)} GPU(s) {seen}; {parallel or f'TP={tp}'} uses {used}")


def _model_names(gpus: Sequence[GpuInfo]) -> list[str]:
    return list(dict.fromkeys(g.name for g in gpus))


def check_same_model(report: ProbeReport, tp: int, strict: bool = False) -> Check:
    group = group_gpus(report, tp)
    order_set = report.cuda_device_order == PCI_BUS_ID or report.device_order == PCI_BUS_ID
    names = ", ".join(_model_names(group))
    if not group:
        return Check("same-model", WARN, "not checked: no GPU visible (see gpu-count)")
    if len(group) < 2 and not report.vllm_device_warning:
        return Check("same-model", PASS, f"one GPU in the group ({names})")
    if not same_model(group):
        if order_set:
            return Check("same-model", PASS, f"different models in the group ({names}); CUDA_DEVICE_ORDER=PCI_BUS_ID is set")
        # vLLM's own line names every GPU of the machine (the probe keeps it); else the visible ones
        text = report.vllm_device_warning or VLLM_MIXED_GPU_WARNING.format(names=", ".join(g.name for g in report.gpus))
        return Check(
            "same-model", FAIL if strict else WARN,
            f"different GPU models in the tensor-parallel group ({names}) and CUDA_DEVICE_ORDER is not PCI_BUS_ID: "
            "CUDA numbers GPUs fastest first, so GPU k may not be the one nvidia-smi calls k",
            hint="export CUDA_DEVICE_ORDER=PCI_BUS_ID and choose one model with CUDA_VISIBLE_DEVICES",
            vllm_message=text,
        )
    if report.vllm_device_warning:
        # vllm#19045, #16740: vLLM compares the raw names of every GPU in the machine.
        return Check(
            "same-model", PASS,
            f"the group is one model ({names}); vLLM will still log its mixed-device warning because it also "
            "looks at GPUs hidden by CUDA_VISIBLE_DEVICES (vllm#19045): harmless here",
            hint="export CUDA_DEVICE_ORDER=PCI_BUS_ID to silence it",
            vllm_message=report.vllm_device_warning,
        )
    return Check("same-model", PASS, f"one model: {names}")


def check_interconnect(report: ProbeReport, tp: int) -> Check:
    """vLLM's custom all-reduce for a TP group of `tp` (custom_all_reduce.py; vllm#56128, PR#4159)."""
    if tp == 1:
        return Check("interconnect", PASS, "TP=1: no all-reduce, no GPU-to-GPU link needed")
    if tp not in CUSTOM_ALLREDUCE_WORLD_SIZES:
        text = VLLM_CAR_WORLD_SIZE.format(n=tp, sizes=str(list(CUSTOM_ALLREDUCE_WORLD_SIZES)))
        return Check(
            "interconnect", WARN, f"TP={tp}: vLLM's custom all-reduce does not support this size and uses NCCL (slower, works)",
            hint=f"prefer --tensor-parallel-size in {', '.join(map(str, CUSTOM_ALLREDUCE_WORLD_SIZES))}",
            vllm_message=text,
        )
    if report.source == TARGET_SOURCE:
        return Check(
            "interconnect", WARN, f"TP={tp}: NVLink/P2P not checked for a --gpu target machine",
            hint="run `attnsel preflight` (or `attnsel probe`) on the machine itself",
        )
    group = group_gpus(report, tp)
    if len(group) < tp:
        return Check("interconnect", WARN, f"TP={tp}: not checked, only {len(group)} GPU(s) visible (see gpu-count)")
    ids = {g.index for g in group}
    pairs = [p for p in report.nvlink.pairs if p.a in ids and p.b in ids]
    if report.source != "nvml" or len(pairs) < tp * (tp - 1) // 2:
        return Check(
            "interconnect", WARN, f"TP={tp}: NVLink/P2P unknown ({report.nvlink.reason})",
            hint="run where NVML works (`nvidia-smi` must work) to check vLLM's custom all-reduce",
        )
    fully, reason = vllm_fully_connected(pairs, tp)
    if fully:
        return Check("interconnect", PASS, f"TP={tp}: {reason}; vLLM's custom all-reduce can run")
    if tp == 2:
        pair = pairs[0]
        if pair.pcie_read and pair.pcie_write:
            return Check(
                "interconnect", PASS,
                f"TP=2 without NVLink ({pair.topology or pair.pcie_topology or 'PCIe'}): NVML reports PCIe P2P read/write OK, "
                "so custom all-reduce runs if vLLM's own P2P test passes",
            )
        return Check(
            "interconnect", WARN, f"TP=2: no P2P between GPU {pair.a} and GPU {pair.b}: custom all-reduce falls back to NCCL (slower, works)",
            hint="check the PCIe topology (`nvidia-smi topo -m`); IOMMU/ACS settings can block P2P",
            vllm_message=VLLM_CAR_NO_P2P,
        )
    return Check(
        "interconnect", WARN,
        f"TP={tp}: {reason}; vLLM disables custom all-reduce on more than two GPUs without a full NVLink mesh and uses NCCL "
        "(slower, works)",
        hint="use GPUs with a full NVLink mesh (`nvidia-smi topo -m` shows NV# between every pair) or a smaller TP",
        vllm_message=VLLM_CAR_PCIE_ONLY,
    )


def check_dtype(group: Sequence[GpuInfo], dtype: str, dtype_source: str | None = None) -> Check:
    """vLLM's check_if_supports_dtype looks at GPU 0 only (docs/vllm-rules.md §5g); other GPUs of the group
    with a lower capability fail later, inside the kernels."""
    where = f" ({dtype_source})" if dtype_source else ""
    if not group:
        return Check("dtype", WARN, f"dtype {dtype}{where}: not checked, no GPU visible (see gpu-count)")
    if dtype != "bfloat16":
        return Check("dtype", PASS, f"dtype {dtype}{where}")
    first = group[0]
    error = bf16_error(first.name, first.compute_capability)
    if error:
        return Check("dtype", FAIL, f"bfloat16 needs compute capability 8.0; GPU 0 ({first.name}) has {first.capability_str}",
                     hint="pass --dtype half (float16)", vllm_message=error)
    weaker = [g for g in group[1:] if bf16_error(g.name, g.compute_capability)]
    if weaker:
        g = weaker[0]
        return Check(
            "dtype", FAIL,
            f"bfloat16: GPU {g.index} ({g.name}, CC {g.capability_str}) of the group cannot run it; vLLM checks only GPU 0, "
            "so this fails later inside the kernels",
            hint="use one GPU model (CUDA_VISIBLE_DEVICES) or --dtype half",
        )
    return Check("dtype", PASS, f"dtype bfloat16{where}: supported by every GPU of the group")


VLLM_PP_UNEVEN = ("Hidden layers were unevenly partitioned: [{parts}]. This can be manually overridden using the "
                  "VLLM_PP_LAYER_PARTITION environment variable")


def pipeline_check(hf_config: dict, pp: int) -> Check:
    """vLLM's get_pp_indices (distributed/utils.py): layers split evenly, the remainder to the
    stages before the last."""
    sub_config = hf_config.get("text_config")
    text: dict = sub_config if isinstance(sub_config, dict) else hf_config
    layers = text.get("num_hidden_layers", hf_config.get("num_hidden_layers"))
    if pp == 1:
        return Check("pipeline", PASS, "PP=1: one stage holds every layer")
    if not isinstance(layers, int) or layers <= 0:
        return Check("pipeline", WARN, f"PP={pp}: the config has no num_hidden_layers, so the split is unknown")
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    split = ",".join(map(str, parts))
    if min(parts) == 0:
        return Check("pipeline", FAIL, f"PP={pp} stages for {layers} layers: layer split [{split}] leaves a stage "
                     "without a layer", hint=f"use --pipeline-parallel-size <= {layers}")
    if layers % pp:
        return Check("pipeline", PASS, f"PP={pp}: {layers} layers split [{split}]",
                     vllm_message=VLLM_PP_UNEVEN.format(parts=split))
    return Check("pipeline", PASS, f"PP={pp}: {layers} layers split [{split}]")
