"""Derive a vLLM release's rule profile from its predecessor's plus what the installed release answers.

    python -m attnsel.bench.tools.derive_profile --base vllm_0_33 --name vllm_0_24 [--write] [--out FILE]

Run it with the Python of the release's environment (`release_env run`). It asks the installed vLLM,
on CPU as bench/tools/parity_live.py does, for what is data in a profile -- the backend registry, the
CacheDType / BlockSize literals, AttentionSelectorConfig's fields, AttentionType's values, the ViT
lists -- and, backend by backend, for each attribute's *behaviour* on every compute capability and a
few contexts (batch invariance, TRT-LLM off, no cubins, GQA, FlashAttention overrides): dtypes,
kv-cache dtypes, head sizes 1..1024, capability, attention types, MLA/sparse, each `supports_*` flag,
kernel block sizes. Where the base profile already answers the same, nothing changes; where vLLM's
answer differs and is the same in every context, the new value is written as data (e.g. a plain head
size list); where it differs *and* depends on the context, it is a rule that needs code: reported,
not guessed. Priority lists and `supports_combination` texts are code too: the parity run finds
those. `--write` writes attention/versions/<name>.json as a patch on the base (registry.diff_patch).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnsel.bench.tools.parity_grid import CAPABILITIES

HEADS = range(1, 1025)
CONTEXTS: tuple[dict[str, Any], ...] = (
    {},
    {"batch_invariant": True},
    {"use_trtllm_attention": False},
    {"has_flashinfer_cubin": False},
    {"num_heads": 32, "num_kv_heads": 8},
    {"flash_attn_version_override": 2},
    {"flash_attn_version_override": 3},
    {"flash_attn_version_override": 4},
)
# profile attribute -> the vLLM classmethod that answers it (where the release has it)
FLAGS = {
    "sink": "supports_sink", "mm_prefix": "supports_mm_prefix", "per_head_quant_scales": "supports_per_head_quant_scales",
    "sliding_window": "supports_sliding_window", "rswa": "supports_rswa", "non_causal": "supports_non_causal",
    "non_causal_dcp": "supports_non_causal_dcp", "batch_invariance": "supports_batch_invariance",
    "kv_connector": "supports_kv_connector", "pcp": "supports_pcp", "dcp": "supports_dcp",
    "device_cpu_query_lens_mismatch": "supports_device_cpu_query_lens_mismatch",
}


def _kernel_sizes(sizes: Any) -> list:
    return [{"multiple_of": int(s.base)} if hasattr(s, "base") else int(s) for s in sizes]


def _head_rule(accepted: list[int]) -> Any:
    """The shortest data form of a set of accepted head sizes (1..1024)."""
    if len(accepted) == len(HEADS):
        return "any"
    if accepted and accepted == list(range(accepted[0], HEADS[-1] + 1)):
        return {"min": accepted[0]}
    for step in (8, 16, 32):
        if accepted and accepted == list(range(step, accepted[-1] + 1, step)):
            return {"multiple_of": step, "max": accepted[-1]}
    return {"list": accepted}


def _capability_rule(accepted: list[tuple[int, int]]) -> Any:
    if accepted == list(CAPABILITIES):
        return "any"
    majors = sorted({cc[0] for cc in accepted})
    if accepted == [cc for cc in CAPABILITIES if cc[0] in majors]:
        return {"majors": majors}
    if accepted and accepted == [cc for cc in CAPABILITIES if accepted[0] <= cc <= accepted[-1]]:
        rule: dict = {"min": list(accepted[0])}
        if accepted[-1] != CAPABILITIES[-1]:
            rule["max"] = list(accepted[-1])
        return rule
    return {"list": [list(cc) for cc in accepted]}


class Deriver:
    def __init__(self, base_name: str):
        from attnsel.attention.explain import vllm_runtime
        from attnsel.attention.versions import OWN_KEYS, load_profile, resolved_data

        self.runtime = vllm_runtime(offline=True)
        self.base = load_profile(base_name)
        self.base_data = {k: v for k, v in resolved_data(base_name).items() if k not in OWN_KEYS}
        self.data = copy.deepcopy(self.base_data)
        self.needs_code: dict[str, dict] = {}
        self.report: list[str] = []

    # --- literals and lists ------------------------------------------------------------------
    def literals(self) -> None:
        from typing import get_args

        rt = self.runtime
        enum = rt.registry.AttentionBackendEnum
        self.data["registry"] = [[m.name, m.value if isinstance(m.value, str) or m.value is None else str(m.value)]
                                 for m in enum]
        cache = sys.modules.get("vllm.config.cache") or __import__("vllm.config.cache", fromlist=["CacheDType"])
        self.data["cache_dtypes"] = list(get_args(cache.CacheDType))
        block_literal = getattr(cache, "BlockSize", None)
        self.data["block_sizes"] = sorted(get_args(block_literal)) if block_literal is not None else []
        self.data["params"]["selector_fields"] = _repr_fields(rt.selector.AttentionSelectorConfig)
        attention_type = sys.modules["vllm.v1.attention.backend"].AttentionType
        self.data["attention_types"] = [str(getattr(t, "value", t)) for t in _members(attention_type)]
        names = {m.name for m in enum}
        for name in list(self.data["backends"]):
            if name not in names:
                self.report.append(f"{name}: not in this release's registry: removed")
                del self.data["backends"][name]
        self.data["not_modelled"] = {k: v for k, v in self.data.get("not_modelled", {}).items() if k in names}
        modelled = set(self.data["backends"]) | set(self.data["not_modelled"]) | set(self.data.get("unregistered", []))
        modelled |= set(self.data.get("missing_module", []))
        for name in sorted(names - modelled):
            self.report.append(f"{name}: new in this release's registry: listed as not modelled (check the priorities)")
            self.data["not_modelled"][name] = "new in this release; its rules are not modelled"

    # --- one backend ----------------------------------------------------------------------------
    def contexts(self) -> list[Any]:
        from attnsel.attention.rules import SelectionContext

        return [SelectionContext(capability=cc, **extra) for cc in CAPABILITIES for extra in CONTEXTS]

    def _ask(self, ctx: Any, question: Callable[[], Any]) -> Any:
        from attnsel.attention.rules import SelectorInputs

        with self.runtime.case(SelectorInputs(128, "bfloat16"), ctx):
            try:
                return question()
            except Exception as exc:  # noqa: BLE001 -- recorded as the answer
                return f"raises {type(exc).__name__}"

    def backend(self, name: str) -> None:
        from attnsel.attention.rules import SelectorInputs

        try:
            cls = self.runtime.registry.AttentionBackendEnum[name].get_class()
        except Exception as exc:  # noqa: BLE001
            self.report.append(f"{name}: cannot import ({type(exc).__name__}: {exc}); left as the base has it")
            return
        spec = self.base.backend(name)
        profile, code = self.base, self.base.code
        inputs = SelectorInputs(128, "bfloat16")
        caps = self.runtime.capability
        kv_values = [None, *self.data["cache_dtypes"]]
        attrs: dict[str, tuple[Callable, Callable, Callable]] = {
            "dtypes": (lambda c: sorted(str(d).removeprefix("torch.") for d in cls.supported_dtypes),
                       lambda c: sorted(spec.dtypes), lambda v: [str(d).removeprefix("torch.") for d in cls.supported_dtypes]),
            "kv_cache_dtypes": (lambda c: [kv for kv in kv_values if cls.supports_kv_cache_dtype(kv)],
                                lambda c: [kv for kv in kv_values if code.supports_kv_cache_dtype(spec, kv, c)],
                                lambda v: [kv for kv in v if kv is not None] if None in v else None),
            "mla": (lambda c: bool(cls.is_mla()), lambda c: spec.mla, lambda v: v),
            "sparse": (lambda c: bool(cls.is_sparse()), lambda c: spec.sparse, lambda v: v),
            "attn_types": (lambda c: [t for t in self.data["attention_types"] if cls.supports_attn_type(t)],
                           lambda c: [t for t in self.data["attention_types"] if t in spec.attn_types], lambda v: v),
            "kernel_block_sizes": (lambda c: _kernel_sizes(cls.get_supported_kernel_block_sizes()),
                                   lambda c: _kernel_sizes(profile.kernel_block_sizes(name, c, inputs)), lambda v: v),
        }
        for attr, method in FLAGS.items():
            if hasattr(cls, method):
                attrs[attr] = (lambda c, m=method: bool(getattr(cls, m)()),
                               lambda c, a=attr: _our_flag(profile, spec, a, c), lambda v: v)
        if spec.composite is None:
            attrs["head_sizes"] = (lambda c: [h for h in HEADS if cls.supports_head_size(h)],
                                   lambda c: [h for h in HEADS if profile.supports_head_size(spec, h, c)], _head_rule)
            attrs["capability"] = (lambda c: [cc for cc in CAPABILITIES if cls.supports_compute_capability(caps(cc))],
                                   lambda c: [cc for cc in CAPABILITIES if profile.supports_capability(spec, cc)],
                                   _capability_rule)
        for attr, (theirs_fn, ours_fn, encode) in attrs.items():
            self._attribute(name, attr, theirs_fn, ours_fn, encode)

    def _attribute(self, name: str, attr: str, theirs_fn: Callable, ours_fn: Callable, encode: Callable) -> None:
        contexts = self.contexts() if attr not in ("head_sizes", "capability") else self.contexts()[:: len(CONTEXTS)]
        theirs = [self._ask(c, functools.partial(theirs_fn, c)) for c in contexts]
        ours = []
        for c in contexts:
            try:
                ours.append(ours_fn(c))
            except Exception as exc:  # noqa: BLE001 -- e.g. a rule the base names but cannot answer here
                ours.append(f"raises {type(exc).__name__}")
        if theirs == ours:
            return
        distinct = {json.dumps(t, default=str) for t in theirs}
        if len(distinct) == 1 and not str(theirs[0]).startswith("raises"):
            value = encode(theirs[0])
            if value is not None:
                self.data["backends"][name][attr] = value
                self.report.append(f"{name}.{attr}: now {json.dumps(value)}")
                return
        differing = [(list(c.capability), _ctx_label(c), t, o) for c, t, o in zip(contexts, theirs, ours) if t != o]
        self.needs_code.setdefault(name, {})[attr] = differing[:6]
        self.report.append(f"{name}.{attr}: differs in {len(differing)} context(s) and depends on the context: code")

    def vit(self) -> None:
        platform = self.runtime.platform_cls
        if not hasattr(platform, "get_supported_vit_attn_backends"):
            return
        from attnsel.attention.rules import SelectionContext, SelectorInputs

        lists = {}
        for cc in ((9, 0), (7, 5)):
            with self.runtime.case(SelectorInputs(128, "bfloat16"), SelectionContext(capability=cc)):
                lists[cc] = [b.name for b in platform.get_supported_vit_attn_backends()]
        vit = self.data["vit"]
        if lists[(9, 0)] != vit["supported"]:
            vit["supported"] = lists[(9, 0)]
            self.report.append(f"vit.supported: now {lists[(9, 0)]}")
        below = lists[(7, 5)] if lists[(7, 5)] != lists[(9, 0)] else None
        if below != vit.get("supported_below_cc80"):
            if below is None:
                vit.pop("supported_below_cc80", None)
            else:
                vit["supported_below_cc80"] = below
            self.report.append(f"vit.supported_below_cc80: now {below}")

    def derive(self) -> dict:
        self.literals()
        for name in list(self.data["backends"]):
            if name not in self.data.get("not_modelled", {}):
                self.backend(name)
        self.vit()
        return self.data


def _repr_fields(config_cls: Any) -> list[str]:
    """AttentionSelectorConfig's fields in the order its __repr__ prints them (vLLM's messages quote
    it; the order can differ from the NamedTuple's)."""
    import re

    example = config_cls(**{name: None for name in config_cls._fields if name not in config_cls._field_defaults})
    printed = re.findall(r"(\w+)=", repr(example))
    return printed if sorted(printed) == sorted(config_cls._fields) else list(config_cls._fields)


def _members(enum_or_class: Any) -> list:
    try:
        return list(enum_or_class)
    except TypeError:  # a plain class of string constants
        return [v for k, v in vars(enum_or_class).items() if k.isupper() and isinstance(v, str)]


def _our_flag(profile: Any, spec: Any, attr: str, ctx: Any) -> bool:
    code = profile.code
    if attr == "sink":
        return code.supports_sink(spec, ctx)
    if attr == "per_head_quant_scales":
        return code.supports_per_head_quant_scales(spec, ctx)
    return profile.flag_ok(spec, attr, ctx)


def _ctx_label(ctx: Any) -> str:
    shown = {k: getattr(ctx, k) for extra in CONTEXTS for k in extra if getattr(ctx, k) != _default(k)}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "default"


def _default(field: str) -> Any:
    from attnsel.attention.rules import SelectionContext

    return SelectionContext.__dataclass_fields__[field].default


def release_header(name: str, base: str) -> dict:
    from attnsel.attention.explain import require_vllm
    from attnsel.attention.versions import parse_vllm_version

    version = require_vllm().split("+")[0]
    parsed = parse_vllm_version(version)
    assert parsed is not None  # require_vllm: an installed release's version
    release = list(parsed)
    major_minor = f"{release[0]}.{release[1]}"
    try:
        import vllm._version as v

        commit = getattr(v, "commit_id", None)
    except ImportError:
        commit = None
    return {
        "name": name, "base": base, "vllm_version": version, "vllm_release": release,
        "answers_for": [major_minor, version, name],
        "description": f"vLLM v{version} ({commit}): derived from {base} by bench/tools/derive_profile.py, "
                       "then checked with bench/tools/parity_live.py",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the predecessor's profile name, e.g. vllm_0_33")
    parser.add_argument("--name", required=True, help="the new profile's name, e.g. vllm_0_34")
    parser.add_argument("--write", action="store_true", help="write attention/versions/<name>.json")
    parser.add_argument("--out", default=None, help="write the patch and the needs-code report here (JSON)")
    ns = parser.parse_args(argv)
    import logging

    from attnsel.attention.versions import VERSIONS_DIR, diff_patch

    logging.getLogger("vllm").setLevel(logging.CRITICAL)
    deriver = Deriver(ns.base)
    derived = deriver.derive()
    patch = {**release_header(ns.name, ns.base), **diff_patch(deriver.base_data, derived)}
    print("\n".join(deriver.report), file=sys.stderr)
    doc = {"patch": patch, "needs_code": deriver.needs_code, "report": deriver.report}
    if ns.out:
        Path(ns.out).write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    if ns.write:
        path = Path(VERSIONS_DIR) / f"{ns.name}.json"
        path.write_text(json.dumps(patch, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
