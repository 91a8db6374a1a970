"""How one deployment's verdict changed across vLLM releases (`attnsel explain --vllm-version all`).

The same request (flags, a model config, one GPU) goes through every release profile in
attention/versions/, oldest first, exactly as `attnsel explain --vllm-version X` would answer it
(model facts derived again with each release's model rules); consecutive answers are then compared:
which backends became valid or stopped being valid, whether the pick or the KV block size changed,
whether vLLM started or stopped raising. Pure, no torch, no vLLM.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnsel.attention.explain.answers import explain_memory, model_facts
from attnsel.attention.explain.refusal import with_memory_refusal
from attnsel.attention.selector import build_selection, explain_selection
from attnsel.errors import AttnselError, UserInputError

if TYPE_CHECKING:
    from attnsel.attention.memory import MemoryFlags
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.rules import Explanation
    from attnsel.attention.selector import SelectionRequest
    from attnsel.attention.versions import RuleProfile


@dataclass(frozen=True)
class ReleaseVerdict:
    """One release's answer. `explanation` is None when this release refuses the request before any
    backend is asked (a model config it cannot load, a flag value it rejects): `error` says why."""

    profile: str
    vllm_version: str
    explanation: Explanation | None = None
    error: str | None = None
    profile_note: str | None = None

    @property
    def valid_backends(self) -> list[str]:
        return self.explanation.valid_backends if self.explanation is not None else []

    @property
    def selected(self) -> str | None:
        return self.explanation.selected if self.explanation is not None else None

    @property
    def block_size(self) -> int | None:
        e = self.explanation
        return e.block_size if e is not None and e.selected is not None else None

    @property
    def vllm_error(self) -> str | None:
        """What stops this release: its refusal of the request, else vLLM's own error."""
        return self.error if self.explanation is None else self.explanation.error


@dataclass(frozen=True)
class ReleaseChange:
    """What differs between two consecutive releases' answers (empty lists / None: unchanged)."""

    before: str  # vLLM version
    after: str
    became_valid: list[str] = field(default_factory=list)
    became_invalid: list[str] = field(default_factory=list)
    selected: tuple[str | None, str | None] | None = None
    block_size: tuple[int | None, int | None] | None = None
    error: tuple[str | None, str | None] | None = None

    @property
    def changed(self) -> bool:
        return bool(self.became_valid or self.became_invalid or self.selected or self.block_size or self.error)


@dataclass(frozen=True)
class ReleaseHistory:
    releases: list[ReleaseVerdict]
    changes: list[ReleaseChange]
    capability: tuple[int, int]
    gpu_name: str | None = None


def compare_releases(before: ReleaseVerdict, after: ReleaseVerdict) -> ReleaseChange:
    old_valid, new_valid = before.valid_backends, after.valid_backends

    def pair(old: object, new: object) -> tuple | None:
        return None if old == new else (old, new)

    return ReleaseChange(
        before=before.vllm_version,
        after=after.vllm_version,
        became_valid=[name for name in new_valid if name not in old_valid],
        became_invalid=[name for name in old_valid if name not in new_valid],
        selected=pair(before.selected, after.selected),
        block_size=pair(before.block_size, after.block_size),
        error=pair(before.vllm_error, after.vllm_error),
    )


# explain_release(profile) -> Explanation; raises AttnselError when the release refuses the request
ExplainRelease = Callable[["RuleProfile"], "Explanation"]


def release_history(explain_release: ExplainRelease, capability: tuple[int, int], gpu_name: str | None = None,
                    profile_names: list[str] | None = None) -> ReleaseHistory:
    """Every release profile's answer (oldest first) and what changed from one release to the next.
    `explain_release` builds and explains the request for one profile (the CLI's explain path)."""
    from attnsel.attention.versions import load_profile, release_profiles

    verdicts = []
    refusals: list[AttnselError] = []
    for name in profile_names or release_profiles():
        profile = load_profile(name)
        try:
            verdicts.append(ReleaseVerdict(name, profile.vllm_version, explanation=explain_release(profile)))
        except AttnselError as exc:  # this release rejects the request (a backend it lacks, the model config)
            refusals.append(exc)
            verdicts.append(ReleaseVerdict(name, profile.vllm_version, error=exc.message))
    bad_input = [exc for exc in refusals if isinstance(exc, UserInputError)]
    if verdicts and len(bad_input) == len(verdicts):  # wrong for every release: the request itself is bad
        raise bad_input[-1]
    changes = [compare_releases(a, b) for a, b in itertools.pairwise(verdicts)]
    return ReleaseHistory(verdicts, changes, (capability[0], capability[1]), gpu_name)


def explain_for_release(request: SelectionRequest, *, capability: tuple[int, int], gpu_name: str | None = None,
                        hf_config: Mapping | None = None, tensor_parallel_size: int = 1,
                        importable_for: Callable[[RuleProfile], Mapping[str, bool]] | None = None,
                        memory_flags: MemoryFlags | None = None) -> ExplainRelease:
    """The explain path of `attnsel explain --vllm-version X` for one GPU, as a function of the
    profile: model facts derived with that release's model rules, then build_selection and
    explain_selection, then (a model on a named GPU) that release's memory verdict, whose refusal is
    the release's error as in `explain --vllm-version X` (`memory_flags`: attention.memory.MemoryFlags)."""
    def explain_release(profile: RuleProfile) -> Explanation:
        facts: ModelFacts | None = None
        if hf_config is not None:  # as `explain --vllm-version X` derives them, hybrid state dtypes included
            facts = model_facts(dict(hf_config), request.dtype, tensor_parallel_size, capability, gpu_name,
                                profile.model_rules, (request.mamba_ssm_cache_dtype, request.mamba_cache_dtype))
        importable = importable_for(profile) if importable_for is not None else None
        inputs, ctx, notes = build_selection(profile, request, model_facts=facts, capability=capability,
                                             gpu_name=gpu_name, importable=importable)
        expl: Explanation = explain_selection(profile, inputs, ctx, notes)
        if facts is None or hf_config is None or not gpu_name or memory_flags is None:
            return expl
        flags = dataclasses.replace(memory_flags, tensor_parallel_size=tensor_parallel_size,
                                    kv_cache_dtype=request.kv_cache_dtype)
        return with_memory_refusal(expl, explain_memory(profile, dict(hf_config), facts, expl, flags, gpu_name,
                                                        capability))

    return explain_release


__all__ = ["ReleaseChange", "ReleaseHistory", "ReleaseVerdict", "compare_releases", "explain_for_release",
           "release_history"]
