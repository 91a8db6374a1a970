"""A built-in table of common data-center and desktop GPUs, for `--gpu NAME` (no GPU needed)
and as the fallback for peak memory bandwidth when NVML cannot give bus width x clock.

Bandwidths and L2 sizes are vendor datasheet figures (leads, not measurements); the H100 SXM,
A100 PCIe, RTX 4090 and RTX 6000 Ada figures match FlashInfer's blog table, the H200 one our own
NVML reading (6016-bit bus x 3201 MHz x 2 = 4.81 TB/s, docs/gpu-facts.md §1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from attnsel.errors import UserInputError


@dataclass(frozen=True)
class GpuSpec:
    key: str  # the name users type: "H100", "A100-80GB", "RTX4090"
    name: str  # a display name
    family: str  # architecture family, for `explain --gpu all`
    compute_capability: tuple[int, int]
    memory_gib: float
    memory_bandwidth_gbps: float  # GB/s (10^9), datasheet peak
    l2_mib: float | None = None
    aliases: tuple[str, ...] = ()
    nvml_pattern: str | None = None  # regex on the NVML device name (case-insensitive)

    @property
    def capability_str(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def peak_memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbps * 1e9

    def to_dict(self) -> dict:
        d = asdict(self)
        d["compute_capability"] = self.capability_str
        return d


def _g(key: str, name: str, family: str, cc: tuple[int, int], mem: float, bw: float, l2: float | None = None,
       aliases: Sequence[str] = (), pattern: str | None = None) -> GpuSpec:
    return GpuSpec(key, name, family, cc, mem, bw, l2, tuple(aliases), pattern)


# The first entry of each family is its representative in `explain --gpu all`.
GPU_TABLE: tuple[GpuSpec, ...] = (
    _g("P100", "Tesla P100 16GB", "Pascal", (6, 0), 16, 732, 4, ["TESLA-P100"], r"p100"),
    _g("V100", "Tesla V100 SXM2 32GB", "Volta", (7, 0), 32, 900, 6, ["V100-32GB", "V100-SXM2", "TESLA-V100"], r"v100"),
    _g("T4", "Tesla T4", "Turing", (7, 5), 16, 320, 4, ["TESLA-T4"], r"\bt4\b"),
    _g("RTX2080TI", "GeForce RTX 2080 Ti", "Turing", (7, 5), 11, 616, 5.5, ["2080TI", "RTX-2080-TI"], r"2080 ti"),
    _g("A100", "A100 SXM4 80GB", "Ampere", (8, 0), 80, 2039, 40, ["A100-80GB", "A100-SXM4-80GB", "A100-SXM"], r"a100"),
    _g("A100-40GB", "A100 SXM4 40GB", "Ampere", (8, 0), 40, 1555, 40, ["A100-SXM4-40GB", "A100-40G"], r"a100.*40\s*gb"),
    _g("A100-80GB-PCIE", "A100 80GB PCIe", "Ampere", (8, 0), 80, 1935, 40, ["A100-PCIE", "A100-PCIE-80GB"], r"a100.*pcie"),
    _g("A10G", "A10G", "Ampere", (8, 6), 24, 600, 6, ["A10-G"], r"a10g"),
    _g("A10", "A10", "Ampere", (8, 6), 24, 600, 6, [], r"\ba10\b"),
    _g("A40", "A40", "Ampere", (8, 6), 48, 696, 6, [], r"\ba40\b"),
    _g("RTXA6000", "RTX A6000", "Ampere", (8, 6), 48, 768, 6, ["A6000", "RTX-A6000"], r"rtx a6000"),
    _g("RTX3090", "GeForce RTX 3090", "Ampere", (8, 6), 24, 936, 6, ["3090", "RTX-3090"], r"3090"),
    _g("L4", "L4", "Ada", (8, 9), 24, 300, 48, [], r"\bl4\b"),
    _g("L40S", "L40S", "Ada", (8, 9), 48, 864, 96, [], r"l40s"),
    _g("L40", "L40", "Ada", (8, 9), 48, 864, 96, [], r"\bl40\b"),
    _g("RTX6000ADA", "RTX 6000 Ada Generation", "Ada", (8, 9), 48, 960, 96, ["RTX-6000-ADA", "6000ADA"], r"rtx 6000 ada"),
    _g("RTX4090", "GeForce RTX 4090", "Ada", (8, 9), 24, 1008, 72, ["4090", "RTX-4090"], r"4090"),
    _g("H100", "H100 SXM5 80GB", "Hopper", (9, 0), 80, 3352, 50, ["H100-SXM", "H100-80GB", "H100-SXM5", "H100-80GB-HBM3"], r"\bh100"),
    _g("H100-PCIE", "H100 PCIe 80GB", "Hopper", (9, 0), 80, 2039, 50, ["H100PCIE"], r"\bh100.*pcie"),
    _g("H100-NVL", "H100 NVL 94GB", "Hopper", (9, 0), 94, 3938, 50, ["H100NVL"], r"\bh100.*nvl"),
    _g("H20", "H20 96GB", "Hopper", (9, 0), 96, 4000, 60, [], r"\bh20\b"),
    _g("H200", "H200 SXM 141GB", "Hopper", (9, 0), 141, 4800, 60, ["H200-SXM", "H200-141GB"], r"\bh200"),
    _g("GH200", "GH200 96GB", "Hopper", (9, 0), 96, 4000, 60, ["GH200-96GB"], r"gh200"),
    _g("B200", "B200 180GB", "Blackwell", (10, 0), 180, 8000, 126, ["B200-SXM"], r"\bb200\b"),
    _g("GB200", "GB200 186GB", "Blackwell", (10, 0), 186, 8000, 126, [], r"gb200"),
    _g("B300", "B300 288GB", "Blackwell Ultra", (10, 3), 288, 8000, 126, ["B300-SXM"], r"\bb300\b"),
    _g("GB300", "GB300 288GB", "Blackwell Ultra", (10, 3), 288, 8000, 126, [], r"gb300"),
    _g("RTXPRO6000", "RTX PRO 6000 Blackwell 96GB", "Blackwell (desktop)", (12, 0), 96, 1792, 128,
       ["RTX-PRO-6000", "PRO6000", "RTXPRO6000-BLACKWELL"], r"rtx pro 6000"),
    _g("RTX5090", "GeForce RTX 5090", "Blackwell (desktop)", (12, 0), 32, 1792, 96, ["5090", "RTX-5090"], r"5090"),
    _g("GB10", "DGX Spark GB10", "Blackwell (desktop)", (12, 1), 128, 273, 24, ["DGX-SPARK", "SPARK"], r"gb10\b"),
)


def _norm(text: str) -> str:
    text = text.upper()
    for word in ("NVIDIA", "GEFORCE", "TESLA"):
        text = text.replace(word, "")
    return re.sub(r"[^A-Z0-9]", "", text)


_BY_KEY: dict[str, GpuSpec] = {}
for _spec in GPU_TABLE:
    for _k in (_spec.key, *_spec.aliases, _spec.name):  # the name our output shows can be typed back
        _BY_KEY.setdefault(_norm(_k), _spec)


def gpu_names() -> list[str]:
    return [spec.key for spec in GPU_TABLE]


# Accelerators people type that are not NVIDIA GPUs: vLLM runs them on other platforms (ROCm, XPU,
# TPU, Neuron, HPU), whose attention backends attnsel does not model. Matched on the normalised name.
_OTHER_VENDORS: tuple[tuple[str, str], ...] = (
    (r"^(AMD)?(INSTINCT)?MI\d{2,3}[A-Z]?$|^(AMD)?RADEON|^(AMD)?RX\d{4}|^AMD", "an AMD GPU (vLLM's ROCm platform)"),
    (r"^(INTEL)?GAUDI\d?|^HPU|^(INTEL)?HABANA", "an Intel Gaudi accelerator (vLLM's HPU platform)"),
    (r"^(INTEL)?(ARC|XPU|PONTEVECCHIO|MAX1[0-9]{3}|DATACENTERGPUMAX)|^INTEL", "an Intel GPU (vLLM's XPU platform)"),
    (r"^(GOOGLE)?(CLOUD)?TPU|^TRILLIUM|^V[4-6][EP]$", "a Google TPU (vLLM's TPU platform)"),
    (r"^(AWS)?(TRAINIUM|INFERENTIA|TRN[12]|INF[12])", "an AWS Neuron device (vLLM's Neuron platform)"),
    (r"^(APPLE)?M[1-5](PRO|MAX|ULTRA)?$|^CPU$", "a CPU or an Apple chip (vLLM's CPU platform)"),
)


def not_nvidia(name: str) -> str | None:
    """What a non-NVIDIA accelerator name is ("an AMD GPU (vLLM's ROCm platform)"), else None.

    >>> not_nvidia("MI300X")
    "an AMD GPU (vLLM's ROCm platform)"
    >>> not_nvidia("H100") is None
    True
    """
    key = _norm(name[:200])
    if key in _BY_KEY:
        return None
    return next((what for pattern, what in _OTHER_VENDORS if re.search(pattern, key)), None)


def find_gpu(name: str, *, capability_flag: bool = True) -> GpuSpec:
    """Look a GPU up by the name users type: a table key or alias, exactly, ignoring case, spaces,
    dashes and the vendor words NVIDIA/GeForce/Tesla ("H100", "a100-80gb", "RTX 4090"). Never by
    substring: "H1000" or "a100 nonsense" is no A100 or H100; the error suggests the close names.

    >>> find_gpu("h100").compute_capability
    (9, 0)
    >>> find_gpu("NVIDIA GeForce RTX 4090").key
    'RTX4090'
    """
    spec = _BY_KEY.get(_norm(name))
    if spec is not None:
        return spec
    known = f"Known GPUs: {', '.join(gpu_names())}" + ("; or pass --capability X.Y." if capability_flag else ".")
    other = not_nvidia(name)
    if other is not None:
        raise UserInputError(f"{_shown(name)} is not an NVIDIA GPU: it is {other}; attnsel answers for vLLM's "
                             f"CUDA platform only. {known}")
    raise UserInputError(f"unknown GPU name {_shown(name)}.{_suggestion(name)} {known}")


def _shown(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "...'"


def _suggestion(name: str) -> str:
    """Table names the typed one contains as a word ("a100 nonsense" -> A100), then look-alikes."""
    import difflib  # only for a name that is not in the table: `probe` never needs it

    words = {_norm(w) for w in re.split(r"[\s,;/]+", name[:200]) if w}
    contained = [spec.key for key, spec in _BY_KEY.items() if key in words]
    similar = [_BY_KEY[k].key for k in difflib.get_close_matches(_norm(name[:200]), list(_BY_KEY), n=3, cutoff=0.6)]
    close = list(dict.fromkeys(contained + similar))[:3]
    return f" Did you mean {', '.join(close)}?" if close else ""


def match_device_name(device_name: str, memory_total_bytes: int | None = None) -> GpuSpec | None:
    """Map an NVML/torch device name ("NVIDIA H100 80GB HBM3") to a table entry, or None."""
    lowered = device_name.lower()
    candidates = [s for s in GPU_TABLE if s.nvml_pattern and re.search(s.nvml_pattern, lowered)]
    if not candidates:
        return None
    # The most specific pattern wins ("h100.*pcie" over "h100"); memory size breaks ties.
    longest = max(len(s.nvml_pattern or "") for s in candidates)
    candidates = [s for s in candidates if len(s.nvml_pattern or "") == longest]
    if memory_total_bytes and len(candidates) > 1:
        gib = memory_total_bytes / 2**30
        return min(candidates, key=lambda s: abs(s.memory_gib - gib))
    return candidates[0]


def table_peak_bandwidth(device_name: str | None, memory_total_bytes: int | None) -> float | None:
    """The table's peak memory bandwidth (bytes/s) for a device name, or None when no entry matches."""
    spec = match_device_name(device_name, memory_total_bytes) if device_name else None
    return spec.peak_memory_bandwidth_bytes_per_s if spec else None


def families() -> list[tuple[str, GpuSpec]]:
    """One representative GPU per (family, capability), for the `explain --gpu all` matrix."""
    seen: dict[tuple[str, tuple[int, int]], GpuSpec] = {}
    for spec in GPU_TABLE:
        seen.setdefault((spec.family, spec.compute_capability), spec)
    return [(f"{fam} {spec.capability_str}", spec) for (fam, _cc), spec in seen.items()]
