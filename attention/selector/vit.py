"""vLLM's ViT (vision tower) attention backend, `CudaPlatformBase.get_vit_attn_backend` (docs/vllm-rules.md §8).

The version's data (`vit`) gives the supported list (and one for CC < 8.0 where the version has
it), the backends the automatic loop skips, the one it returns as soon as it reaches it, and the
fallback. An explicit backend (--mm-encoder-attn-backend) must be in the list; otherwise the first
backend whose head size, dtype and compute capability pass wins (docs/vllm-rules.md §8, §9 ViT).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from attnsel.attention.rules import SelectionContext, VllmRaises
from attnsel.attention.versions import RuleProfile


@dataclass(frozen=True)
class VitChoice:
    backend: str
    log: str | None  # the info_once line vLLM prints, or None (TORCH_SDPA fallback logs nothing)

    def to_dict(self) -> dict:
        return {"backend": self.backend, "log": self.log}


def _enum_repr(profile: RuleProfile, name: str) -> str:
    return f"<AttentionBackendEnum.{name}: {profile.registry[name]!r}>"


def vit_backend(
    profile: RuleProfile,
    head_size: int,
    dtype: str,
    capability: tuple[int, int] | None,
    override: str | None = None,
    importable: Mapping[str, bool] | None = None,
) -> VitChoice:
    """The ViT attention backend; raises VllmRaises(AssertionError) for an unsupported override."""
    rules = profile.data["vit"]
    supported = list(rules["supported"])
    if "supported_below_cc80" in rules and (capability is None or tuple(capability) < (8, 0)):
        supported = list(rules["supported_below_cc80"])
    if override is not None:
        name = profile.resolve_backend_name(override)
        if name not in supported:
            listed = "[" + ", ".join(_enum_repr(profile, n) for n in supported) + "]"
            raise VllmRaises(
                f"Backend AttentionBackendEnum.{name} is not supported for vit attention. "
                f"Supported backends are: {listed}",
                exc_type="AssertionError",
                phase="vit",
            )
        return VitChoice(name, f"Using backend AttentionBackendEnum.{name} for vit attention")
    ctx = SelectionContext(capability=capability or (0, 0), importable=importable)
    for name in supported:
        if name in rules["skip_in_auto"]:
            continue
        if name == rules.get("returned_when_reached"):
            return VitChoice(name, f"Using backend AttentionBackendEnum.{name} for vit attention")
        if not profile.is_importable(name, ctx):
            continue  # an ImportError skips the backend
        spec = profile.backend(name)
        ok = profile.supports_head_size(spec, head_size, ctx if capability is not None else None)
        ok = ok and dtype in spec.dtypes
        if capability is not None:
            ok = ok and profile.supports_capability(spec, capability)
        if ok:
            return VitChoice(name, f"Using backend AttentionBackendEnum.{name} for vit attention")
    return VitChoice(rules["fallback"], None)
