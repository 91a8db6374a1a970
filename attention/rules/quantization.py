"""vLLM's first checks on `--quantization`, as a release makes them at start-up (the data: `quantization`
in attention/versions/vllm_0_X.json, reached through the version object's `quantization`).

In vLLM's order (docs/memory.md, "vLLM's start-up checks"):
1. config/model.py `_verify_quantization` (0.34.0:1403-1505): the checkpoint's `quantization_config`
   names a method; a `--quantization` outside the names that method's config classes turn it into is a
   mismatch; then a name outside `QuantizationMethods` is unknown. `vllm serve` gives argparse a
   metavar, not choices (engine/arg_utils.py: the type also allows str), so an unknown name is this
   ValueError at start-up, not an argparse error: attnsel's verdict is 1 (vLLM would raise), not 2.
   A method the release deprecates (`DEPRECATED_QUANTIZATION_METHODS`: fbgemm_fp8) is refused unless
   --allow-deprecated-quantization (0.34.0:1492-1505).
2. model_loader/weight_utils.py `get_quant_config` (0.34.0:410): a method that reads its own file
   beside a checkpoint without `quantization_config` (awq, gptq, modelopt ...) finds none.
3. config/vllm.py `_get_quantization_config` (0.34.0:887-898): the GPU's capability is below the
   method's `get_min_capability()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class QuantizationRules:
    """One release's `quantization` data."""

    methods: tuple[str, ...]
    min_capability: Mapping[str, int]
    config_files: Mapping[str, tuple[str, ...]]
    online: frozenset[str]
    same_checkpoint: tuple[frozenset[str], ...]
    any_checkpoint: frozenset[str]
    messages: Mapping[str, str]
    sources: Mapping[str, str]
    deprecated: frozenset[str] = frozenset()
    weight_bits: Mapping[str, Any] = field(default_factory=dict)  # `weight_bits`: gptq / awq TYPE_MAP checks

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> QuantizationRules | None:
        if not data or not data.get("methods"):
            return None
        return cls(methods=tuple(data["methods"]),
                   min_capability={k: int(v) for k, v in (data.get("min_capability") or {}).items() if v is not None},
                   config_files={k: tuple(v) for k, v in (data.get("config_files") or {}).items() if v},
                   online=frozenset(data.get("online") or ()),
                   same_checkpoint=tuple(frozenset(g) for g in data.get("same_checkpoint") or ()),
                   any_checkpoint=frozenset(data.get("any_checkpoint") or ()),
                   messages=dict(data["messages"]), sources=dict(data.get("sources") or {}),
                   deprecated=frozenset(data.get("deprecated") or ()),
                   weight_bits=dict(data.get("weight_bits") or {}))

    def same(self, checkpoint: str, method: str) -> bool:
        return method == checkpoint or method in self.any_checkpoint or any(
            checkpoint in group and method in group for group in self.same_checkpoint)

    def resolved(self, checkpoint: str) -> str:
        """The name vLLM gives a checkpoint's own method (auto-round -> inc)."""
        if checkpoint in self.methods:
            return checkpoint
        return next((m for group in self.same_checkpoint if checkpoint in group for m in self.methods if m in group),
                    checkpoint)


@dataclass(frozen=True)
class QuantizationRefusal:
    kind: str  # "mismatch" | "unknown" | "deprecated" | "no_config_file" | "weight_bits" | "capability"
    message: str  # vLLM's text
    source: str  # the release's file:line that raises it
    fix: str


def checkpoint_section(hf_config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The checkpoint's quantization config (vLLM's model_arch_config.quantization_config; a VLM's text_config)."""
    text = hf_config.get("text_config")
    section = hf_config.get("quantization_config") or hf_config.get("compression_config") or (
        text.get("quantization_config") if isinstance(text, Mapping) else None)
    return section if isinstance(section, Mapping) else None


def checkpoint_method(hf_config: Mapping[str, Any]) -> str | None:
    """The checkpoint's quant_method."""
    section = checkpoint_section(hf_config)
    if section is None:
        return None
    method = section.get("quant_method")
    return str(method) if method not in (None, "") else None


def _has_file(folder: str | None, names: tuple[str, ...]) -> bool:
    if folder is None:
        return False  # a model name or a lone config.json: the config says the checkpoint is not quantized
    return any(p.name.endswith(names) for p in Path(folder).glob("*.json"))


def quantization_refusal(rules: QuantizationRules | None, flag: str | None, hf_config: Mapping[str, Any],
                         capability: tuple[int, int] | None, model_dir: str | None = None,
                         allow_deprecated: bool = False) -> QuantizationRefusal | None:
    """vLLM's refusal of the model's quantization on this GPU, or None (it passes these checks).
    `allow_deprecated`: vLLM's --allow-deprecated-quantization (a deprecated method then only logs a warning)."""
    if rules is None:
        return None
    text, where = rules.messages, rules.sources
    checkpoint = checkpoint_method(hf_config)
    method = flag
    if checkpoint is not None:
        if flag is not None and not rules.same(checkpoint, flag):
            return QuantizationRefusal("mismatch", text["mismatch"].format(checkpoint=checkpoint, method=flag),
                                       where.get("mismatch", ""), f"leave --quantization out (the checkpoint's is {checkpoint})")
        method = flag or rules.resolved(checkpoint)
    if method is None:
        return None
    if method not in rules.methods:
        return QuantizationRefusal("unknown", text["unknown"].format(method=method, methods=list(rules.methods)),
                                   where.get("unknown", ""), "--quantization with one of vLLM's names, or none "
                                   "(the checkpoint's own)")
    if method in rules.deprecated and not allow_deprecated:
        # config/model.py:1492-1505 @ 0.34.0 raises ValueError(text, method): two arguments, so vLLM's message
        # is the tuple as Python prints it, its %s never filled in
        return QuantizationRefusal("deprecated", str(ValueError(text["deprecated"], method)), where.get("deprecated", ""),
                                   "--allow-deprecated-quantization (vLLM then only warns), or another --quantization")
    files = rules.config_files.get(method)
    if checkpoint is None and files and method not in rules.online and not _has_file(model_dir, files):
        return QuantizationRefusal("no_config_file", text["no_config_file"].format(method=method),
                                   where.get("no_config_file", ""), f"a checkpoint quantized with {method}, or an "
                                   "online method such as fp8")
    refused = _weight_bits(rules, method, checkpoint_section(hf_config) if checkpoint is not None else None)
    if refused is not None:
        return refused
    minimum = rules.min_capability.get(method)
    if capability is not None and minimum is not None and capability[0] * 10 + capability[1] < minimum:
        current = capability[0] * 10 + capability[1]
        return QuantizationRefusal("capability", text["capability"].format(method=method, minimum=minimum, current=current),
                                   where.get("capability", ""), f"a GPU of compute capability {minimum // 10}.{minimum % 10} "
                                   "or newer, or another --quantization")
    return None


def _weight_bits(rules: QuantizationRules, method: str, section: Mapping[str, Any] | None) -> QuantizationRefusal | None:
    """The checkpoint's bits (and GPTQ's sym) against the method's TYPE_MAP, as vLLM reads them building its
    quantization config (auto_gptq.py / auto_awq.py __init__, base_config.py get_from_keys)."""
    rule = rules.weight_bits.get(method)
    if rule is None or section is None:
        return None
    values = []
    for keys in rule["keys"]:
        found = next((section[key] for key in keys if key in section), _MISSING)
        if found is _MISSING:
            return QuantizationRefusal("weight_bits", rules.weight_bits["missing_key"].format(keys=list(keys)),
                                       rules.weight_bits.get("missing_key_source", ""), "a checkpoint config that names it")
        values.append(found)
    if values in [list(t) for t in rule["supported"]]:
        return None
    supported = ", ".join("/".join(str(v) for v in t) for t in rule["supported"])
    return QuantizationRefusal("weight_bits", rule["text"].format(*values), rule.get("source", ""),
                               f"a {method} checkpoint vLLM loads ({'/'.join(k[0] for k in rule['keys'])}: {supported})")


_MISSING = object()
