"""The model dtype as vLLM settles it (docs/vllm-rules.md §6 `_get_and_verify_dtype`, §5g): the `--dtype`
flag (read by the one dtype parser, attention/rules/dtype.py), the GPU's supported dtypes and bf16
error (from probe/capability.py), the config's checkpoint dtype and `--dtype auto`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from attnsel.attention.model.rules import ModelRules
from attnsel.attention.rules import DTYPE_SPELLINGS, parse_dtype
from attnsel.errors import CheckFailed
from attnsel.probe import capability as capability_facts


def supported_dtypes(capability: tuple[int, int] | None) -> tuple[str, ...]:
    """`CudaPlatform.supported_dtypes` (§5g), as probe/capability.py states it; None (no GPU named)
    is treated as CC 8.0+."""
    return tuple(capability_facts.supported_dtypes((8, 0) if capability is None else (capability[0], capability[1])))


def check_dtype_supported(
    dtype: str, capability: tuple[int, int] | None, gpu_name: str | None = None
) -> str | None:
    """vLLM's error for bfloat16 on a GPU below CC 8.0 (§5g), or None when the dtype is fine.

    A None capability means "not known here", so nothing can be said: None.
    """
    if parse_dtype(dtype) != "bfloat16" or capability is None:
        return None
    return capability_facts.bf16_error(gpu_name or "GPU", (capability[0], capability[1]))


@dataclass(frozen=True)
class DtypeResolution:
    dtype: str
    source: str
    warnings: tuple[str, ...]
    infos: tuple[str, ...]


def _torch_name(dtype: str) -> str:
    return f"torch.{dtype}"


def _config_dtype(hf_config: Mapping, text_config: Mapping) -> tuple[str | None, str]:
    """The checkpoint dtype in vLLM's lookup order (§6 "Config dtype"): value and where."""
    candidates = [
        ("", hf_config),
        ("text config ", text_config),
        ("vision_config ", hf_config.get("vision_config")),
        ("encoder_config ", hf_config.get("encoder_config")),
    ]
    for prefix, section in candidates:
        if not isinstance(section, Mapping):
            continue
        # transformers maps config.json `torch_dtype` and `dtype` onto `config.dtype`.
        for key in ("dtype", "torch_dtype"):
            value = section.get(key)
            if isinstance(value, str) and value:
                return _canonical_config_dtype(value), f"config {prefix}{key}"
    return None, ""


def _canonical_config_dtype(value: str) -> str:
    # transformers writes torch's name ("bfloat16"), older configs may say "torch.float16" or "half"
    name = value.strip().lower().removeprefix("torch.")
    return DTYPE_SPELLINGS.get(name, name)


def resolve_dtype(
    requested: str,
    model_type: str,
    hf_config: Mapping,
    text_config: Mapping,
    *,
    is_pooling_model: bool,
    capability: tuple[int, int] | None,
    gpu_name: str | None,
    rules: ModelRules,
) -> DtypeResolution:
    flag = parse_dtype(requested)
    found, config_where = _config_dtype(hf_config, text_config)
    warnings: list[str] = []
    infos: list[str] = []
    config_known = found is not None
    config_dtype = "float32" if found is None else found
    if not config_known:
        # vLLM would read the safetensors header next; attnsel only sees config.json.
        config_where = "no dtype in config.json (vLLM then reads the safetensors header, which attnsel cannot see); assumed float32"

    if flag == "auto":
        dtype, source = _resolve_auto(
            model_type, config_dtype, config_where, is_pooling_model, capability, gpu_name, rules, warnings
        )
    else:
        dtype = flag
        shown = requested.strip().lower()
        source = f"--dtype {shown}" if shown == flag else f"--dtype {shown} (= {flag})"

    reason = rules.float16_not_supported.get(model_type)
    if dtype == "float16" and reason is not None:
        raise CheckFailed(f"The model type {model_type!r} does not support float16. Reason: {reason}")

    if config_known and dtype != config_dtype:
        if dtype == "float32":
            infos.append(f"Upcasting {_torch_name(config_dtype)} to {_torch_name(dtype)}.")
        elif config_dtype == "float32":
            infos.append(f"Downcasting {_torch_name(config_dtype)} to {_torch_name(dtype)}.")
        else:
            warnings.append(f"Casting {_torch_name(config_dtype)} to {_torch_name(dtype)}.")
    return DtypeResolution(dtype, source, tuple(warnings), tuple(infos))


def _resolve_auto(
    model_type: str,
    config_dtype: str,
    config_where: str,
    is_pooling_model: bool,
    capability: tuple[int, int] | None,
    gpu_name: str | None,
    rules: ModelRules,
    warnings: list[str],
) -> tuple[str, str]:
    """`_resolve_auto_dtype` (vllm/config/model.py), §6 "--dtype auto"."""
    supported = [d for d in supported_dtypes(capability) if not (d == "float16" and model_type in rules.float16_not_supported)]
    if is_pooling_model and "float16" in supported:
        preferred = "float16"
    else:
        preferred = supported[0]
    described = f"{config_where} {config_dtype}" if config_where.startswith("config") else config_where

    if config_dtype == "float32":
        return preferred, f"{described} → {preferred} (--dtype auto downcasts float32 to the preferred dtype)"
    if config_dtype in supported:
        return config_dtype, f"{described} kept"
    device = repr(gpu_name or "GPU")
    if capability is not None:
        device = f"{device} (with compute capability {capability[0]}.{capability[1]})"
    warnings.append(
        f"Your device {device} doesn't support {_torch_name(config_dtype)}. "
        f"Falling back to {_torch_name(preferred)} for compatibility."
    )
    return preferred, f"{described} not supported here → {preferred} (fallback)"
