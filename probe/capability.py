"""vLLM's per-GPU capability facts (docs/vllm-rules.md §5g, seed `vllm/platforms/cuda.py`). Pure functions."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from attnsel.errors import UserInputError

if TYPE_CHECKING:  # the facts module's dataclasses cost ~10 ms of every explain start-up
    from attnsel.probe.facts import GpuInfo

# NVIDIA compute capabilities run 1.0 ... 12.1 today; the bound leaves room for new majors while
# refusing what no GPU can have ("99.99", "-1.0", a minor of two digits).
MAX_CAPABILITY_MAJOR = 19


def parse_capability(text: str, flag: str = "--capability") -> tuple[int, int]:
    """The one parser for a compute capability a user types: "9.0", "10.3", "9" (= 9.0), "12"
    (= 12.0), "sm90" / "sm_100" / "90" (nvcc's spelling: the last digit is the minor).

    >>> parse_capability("9.0"), parse_capability("10"), parse_capability("sm_120"), parse_capability("89")
    ((9, 0), (10, 0), (12, 0), (8, 9))
    """
    raw = str(text).strip().lower()
    nvcc = raw.startswith("sm")
    raw = raw.removeprefix("sm_").removeprefix("sm")
    try:
        if "." in raw:
            major_text, minor_text = raw.split(".", 1)
            if not (major_text.isdigit() and minor_text.isdigit() and len(major_text) <= 3 and len(minor_text) <= 3):
                raise ValueError(raw)
            major, minor = int(major_text), int(minor_text)
        else:
            if not raw.isdigit() or len(raw) > 4:
                raise ValueError(raw)
            value = int(raw)
            major, minor = (value // 10, value % 10) if nvcc or value >= 20 else (value, 0)
    except ValueError:
        raise UserInputError(f"bad {flag} {text!r}: use MAJOR.MINOR, e.g. 9.0 (H100) or 10.0 (B200)") from None
    if not 1 <= major <= MAX_CAPABILITY_MAJOR or minor > 9:
        raise UserInputError(f"bad {flag} {text!r}: no NVIDIA GPU has compute capability {major}.{minor} "
                             "(they run from 3.0 to 12.x)")
    return major, minor


def _at_least(cc: tuple[int, int] | None, major: int, minor: int) -> bool:
    # vLLM's has_device_capability compares major * 10 + minor and is False without a capability.
    return cc is not None and cc[0] * 10 + cc[1] >= major * 10 + minor


def supported_dtypes(cc: tuple[int, int] | None) -> list[str]:
    """CudaPlatformBase.supported_dtypes: CC >= 8.0 -> bf16, fp16, fp32; >= 6.0 -> fp16, fp32; else fp32.

    >>> supported_dtypes((9, 0))
    ['bfloat16', 'float16', 'float32']
    >>> supported_dtypes((7, 5))
    ['float16', 'float32']
    >>> supported_dtypes((5, 2))
    ['float32']
    """
    if _at_least(cc, 8, 0):
        return ["bfloat16", "float16", "float32"]
    if _at_least(cc, 6, 0):
        return ["float16", "float32"]
    return ["float32"]


def bf16_error(gpu_name: str, cc: tuple[int, int] | None) -> str | None:
    """The ValueError vLLM's check_if_supports_dtype raises for bf16 below CC 8.0, verbatim; None if bf16 is fine.

    >>> bf16_error("Tesla T4", (7, 5))
    'Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.'
    >>> bf16_error("NVIDIA H200", (9, 0)) is None
    True
    """
    if _at_least(cc, 8, 0):
        return None
    compute_str = "does not have a compute capability" if cc is None else f"has compute capability {cc[0]}.{cc[1]}"
    return (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        f"Your {gpu_name} GPU {compute_str}. "
        "You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half."
    )


class CapabilityFacts(TypedDict):
    """What vLLM derives from one GPU's compute capability (a JSON object in `probe --json`)."""

    compute_capability: str | None
    supported_dtypes: list[str]
    supports_bf16: bool
    supports_fp16: bool
    supports_fp8: bool
    bf16_error: str | None


def capability_facts(gpu: GpuInfo) -> CapabilityFacts:
    """Everything vLLM derives from one GPU's compute capability (used by `probe` and `explain`)."""
    cc = gpu.compute_capability
    return {
        "compute_capability": gpu.capability_str,
        "supported_dtypes": supported_dtypes(cc),
        "supports_bf16": _at_least(cc, 8, 0),
        "supports_fp16": _at_least(cc, 6, 0),
        "supports_fp8": _at_least(cc, 8, 9),  # CudaPlatformBase.supports_fp8: has_device_capability(89)
        "bf16_error": bf16_error(gpu.name, cc),
    }
