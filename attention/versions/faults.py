"""Known vLLM faults, as each release's data (`known_faults` in vllm_0_X.json, keyed by fault id so
that a release's patch adds, edits or removes one: `{"<id>": null}` drops it), and whether a
configuration meets one.

A fault names what it needs: the backends, the KV-cache dtypes, the query scale (`q_scale`:
"not_unit", the layer's q_scale other than 1.0) and the decode path (`decode_query`: "native_16bit",
FlashInfer's native decode wrapper handed a 16-bit query; its `capabilities` say where vLLM keeps the
decode query 16-bit for FlashInfer's XQA kernel and where it quantizes it to fp8). `meets` answers
"met" (every condition holds), "possible" (the others hold and one cannot be told from the
configuration: q scales inside a checkpoint, FlashInfer's cubins on a machine not at hand) or None.
attention/kernels/vllm/fp8_faults.py recognises the same fault afterwards, from what vLLM's classes
decided for a batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class QScale(str, Enum):
    """What is known about the attention layers' q_scale (vLLM's `layer._q_scale_float`)."""

    UNIT = "unit"  # 1.0: vLLM's default without calibrated scales (model_executor/layers/quantization/kv_cache.py)
    CALIBRATED = "calibrated"  # stated, or set by the caller (tune computes scales as calc_kv_scales did)
    CHECKPOINT = "checkpoint"  # the checkpoint carries KV-cache scales; it may carry q scales too

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FaultConfig:
    """The configuration a fault is checked against (explain's answer, or one row of tune's plan).
    `flashinfer_cubin` None: not known (a plan made away from the machine)."""

    backend: str | None
    kv_cache_dtype: str | None
    capability: tuple[int, int]
    q_scale: QScale = QScale.UNIT
    flashinfer_cubin: bool | None = True
    batch_invariant: bool = False
    decode_context_parallel_size: int = 1
    use_trtllm_attention: bool | None = None


@dataclass(frozen=True)
class FaultMatch:
    """A fault the configuration meets: `certainty` "met" or "possible", `why` the conditions in words."""

    fault: KnownFault
    certainty: str
    why: tuple[str, ...]

    def to_dict(self) -> dict:
        f = self.fault
        return {"id": f.id, "title": f.title, "certainty": self.certainty, "why": list(self.why),
                "vllm_change": f.vllm_change, "fixed_in": f.fixed_in, "workaround": f.workaround,
                "evidence": list(f.evidence)}

    def line(self) -> str:
        """One line for a text report."""
        fixed = f"fixed in vLLM {self.fault.fixed_in}" if self.fault.fixed_in else "not fixed in this release"
        when = "" if self.certainty == "met" else "possibly: "
        return (f"known vLLM fault {self.fault.id} ({when}{'; '.join(self.why)}): {self.fault.title}; {fixed}. "
                f"Workaround: {self.fault.workaround}")


def _capability_in(cc: tuple[int, int], patterns: list[str]) -> bool:
    """'9.0' is that capability, '12.x' any of that major (vLLM's is_device_capability_family)."""
    return any(p == f"{cc[0]}.x" or p == f"{cc[0]}.{cc[1]}" for p in patterns)


@dataclass(frozen=True)
class KnownFault:
    id: str
    title: str
    backends: tuple[str, ...]
    kv_cache_dtypes: tuple[str, ...]
    q_scale: str | None = None
    decode_query: str | None = None
    capabilities: dict = field(default_factory=dict)
    vllm_change: str = ""
    fixed_in: str | None = None
    workaround: str = ""
    evidence: tuple[str, ...] = ()
    checked: dict = field(default_factory=dict)  # release -> what was read to say it is (still) there

    @classmethod
    def from_data(cls, fault_id: str, raw: dict) -> KnownFault:
        return cls(id=fault_id, title=raw["title"], backends=tuple(raw.get("backends", ())),
                   kv_cache_dtypes=tuple(raw.get("kv_cache_dtypes", ())), q_scale=raw.get("q_scale"),
                   decode_query=raw.get("decode_query"), capabilities=dict(raw.get("capabilities") or {}),
                   vllm_change=raw.get("vllm_change", ""), fixed_in=raw.get("fixed_in"),
                   workaround=raw.get("workaround", ""), evidence=tuple(raw.get("evidence", ())),
                   checked=dict(raw.get("checked") or {}))

    def meets(self, config: FaultConfig) -> FaultMatch | None:
        if config.backend not in self.backends or config.kv_cache_dtype not in self.kv_cache_dtypes:
            return None
        why = [f"{config.backend} with --kv-cache-dtype {config.kv_cache_dtype}"]
        unknown = False
        for answer in (self._q_scale(config), self._decode(config)):
            if answer is None:
                continue
            held, text = answer
            if held is False:
                return None
            unknown |= held is None
            why.append(text)
        return FaultMatch(self, "possible" if unknown else "met", tuple(why))

    def _q_scale(self, config: FaultConfig) -> tuple[bool | None, str] | None:
        if self.q_scale != "not_unit":
            return None
        if config.q_scale is QScale.CALIBRATED:
            return True, "q_scale not 1.0 (calibrated scales)"
        if config.q_scale is QScale.CHECKPOINT:
            return None, "q_scale not 1.0 if the checkpoint carries q scales (it carries KV-cache scales)"
        return False, ""

    def _decode(self, config: FaultConfig) -> tuple[bool | None, str] | None:
        """FlashInfer's native decode with a 16-bit query: where vLLM keeps the query 16-bit for XQA
        (`xqa`), only when XQA is unavailable; where it quantizes the query to fp8 (`fp8_query`), never;
        elsewhere always (the fa2-only GPUs)."""
        if self.decode_query != "native_16bit":
            return None
        cc, xqa = config.capability, self.capabilities.get("xqa", [])
        if _capability_in(cc, xqa) and config.use_trtllm_attention is not False:
            if config.batch_invariant or config.decode_context_parallel_size > 1 or config.flashinfer_cubin is False:
                reason = ("VLLM_BATCH_INVARIANT=1" if config.batch_invariant else "DCP" if
                          config.decode_context_parallel_size > 1 else "no FlashInfer cubins")
                return True, f"native decode with a 16-bit query on CC {cc[0]}.{cc[1]} (XQA unavailable: {reason})"
            if config.flashinfer_cubin is None:
                return None, f"native decode with a 16-bit query on CC {cc[0]}.{cc[1]} if FlashInfer's cubins are missing"
            return False, ""
        if _capability_in(cc, self.capabilities.get("fp8_query", [])):
            return False, ""
        return True, f"native decode with a 16-bit query on CC {cc[0]}.{cc[1]} (no fp8 query path there)"


def known_faults_from_data(data: dict[str, Any] | None) -> tuple[KnownFault, ...]:
    """The release's faults, in id order (entries starting with '_' are comments)."""
    return tuple(KnownFault.from_data(k, v) for k, v in sorted((data or {}).items()) if not k.startswith("_") and v)


def faults_met(faults: tuple[KnownFault, ...], config: FaultConfig) -> tuple[FaultMatch, ...]:
    return tuple(m for f in faults if (m := f.meets(config)) is not None)
