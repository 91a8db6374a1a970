"""What `attnsel explain` answers, before anything is printed: the GPU it answers for, the model
config it reads, vLLM's explanation for one GPU or for every GPU family of the built-in table,
and the model section (vLLM's dtype lines, the ViT backend). Imports no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from attnsel.attention.explain.refusal import with_memory_refusal
from attnsel.attention.memory import MemoryFlags, device_total_bytes, memory_for
from attnsel.attention.memory.checkpoint import checkpoint_folder
from attnsel.attention.model import config as model_config
from attnsel.attention.selector import build_selection, explain_selection
from attnsel.errors import CheckFailed, UserInputError
from attnsel.probe import families

if TYPE_CHECKING:
    from attnsel.attention.explain.document import (
        MatrixRowFields,
        ModelRef,
        ModelSection,
        SavedAnswer,
    )
    from attnsel.attention.explain.explicit_block_sizes import ExplicitBlockSize
    from attnsel.attention.memory import MemoryPlan
    from attnsel.attention.model.facts import ModelFacts
    from attnsel.attention.model.rules import ModelRules
    from attnsel.attention.rules import Explanation, SelectionContext, SelectorInputs
    from attnsel.attention.selector import SelectionRequest
    from attnsel.attention.versions import QScale, RuleProfile
    from attnsel.attention.versions.choice import ProfileChoice
    from attnsel.probe import ProbeReport
    from attnsel.probe.nvml.protocol import TorchInventory

DEFAULT_SOURCE = "bundled default"


# --- the GPU ---------------------------------------------------------------------------------------
class _NoTorch:
    """The probe's torch.cuda fallback, answering nothing: `explain` stays torch-free (probe/nvml/protocol.py TorchFacade)."""

    def inventory(self) -> TorchInventory | None:
        return None

    def measure_copy_gbps(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float | str]:
        return {}


def detect_gpu() -> tuple[str | None, tuple[int, int]] | None:
    """Logical device 0 of this machine, via the probe (NVML only: never torch)."""
    try:
        from attnsel.probe import collect_probe
    except ImportError:
        return None
    report: ProbeReport | None
    try:
        report = collect_probe(torch=_NoTorch())
    except UserInputError:  # an unreadable ATTNSEL_NVML_SCENARIO: refused as `probe` refuses it (exit 2)
        raise
    except Exception:  # noqa: BLE001 -- detection is best effort; the caller says what to do
        report = None
    gpus = [g for g in (report.gpus if report else ()) if g.compute_capability is not None]
    if not gpus or gpus[0].compute_capability is None:
        return None
    major, minor = gpus[0].compute_capability
    return gpus[0].name, (major, minor)


def resolve_gpu(gpu: str | None, capability: str | None) -> tuple[str | None, tuple[int, int]] | None:
    """--capability, --gpu NAME, else the GPU of this machine; None when there is none."""
    if capability is not None:
        from attnsel.probe import (
            parse_capability,  # the one parser: "9.0" / "9" / "sm90" / "90"
        )

        cc = parse_capability(capability)
        name = None
        if gpu is not None:
            from attnsel.probe import find_gpu

            name = find_gpu(gpu).name
        return name, cc
    if gpu is not None:
        from attnsel.probe import find_gpu

        spec = find_gpu(gpu)
        return spec.name, spec.compute_capability
    return detect_gpu()


# --- the model ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelChoice:
    """Which model config explain reads: --model, or the bundled default when no head size is given.
    The config is read once, here (standard input can only be read once)."""

    name: str
    source: str  # "bundled default" | "catalog" | "path" | "folder" | "stdin" | "pipe" | "Hugging Face ..."
    config: dict = dataclasses.field(default_factory=dict, compare=False)


def model_choice(model: str | None, head_size: int | None) -> ModelChoice | None:
    if model is not None:
        source, config = model_config.load_model_source(model)
        return ModelChoice(model, source.source, config)
    if head_size is None:
        return ModelChoice(model_config.DEFAULT_MODEL, DEFAULT_SOURCE,
                           model_config.load_model_config(model_config.DEFAULT_MODEL))
    return None


def model_facts(hf_config: dict, dtype: str | None, tp: int, capability: tuple[int, int] | None,
                gpu_name: str | None, model_rules: ModelRules,
                mamba_dtypes: tuple[str | None, str | None] = (None, None)) -> ModelFacts:
    """`mamba_dtypes`: (--mamba-ssm-cache-dtype, --mamba-cache-dtype), None for "auto"."""
    ssm, conv = mamba_dtypes
    return model_config.derive_model_facts(
        hf_config, capability=capability, dtype=dtype or "auto", tensor_parallel_size=tp,
        gpu_name=gpu_name, profile=model_rules, mamba_ssm_cache_dtype=ssm or "auto", mamba_cache_dtype=conv or "auto",
    )


def model_doc(model: ModelChoice | None, hf_config: dict | None) -> ModelRef | None:
    if model is None:
        return None
    model_type = hf_config.get("model_type") if hf_config else None
    return {"name": model.name, "source": model.source, "model_type": model_type}


def model_section(
    choice: ModelChoice | None, facts: ModelFacts | None, profile: RuleProfile, capability: tuple[int, int],
    vit_override: str | None, importable: Mapping[str, bool] | None,
) -> ModelSection | None:
    """The model's part of the answer: vLLM's lines about it, its dtype error, its ViT backend."""
    if facts is None:
        return None
    section: ModelSection = {
        "name": choice.name if choice else None,
        "source": choice.source if choice else None,
        "model_type": facts.model_type,
        "warnings": list(facts.warnings or ()),
        "infos": list(facts.infos or ()),
        "notes": list(facts.notes or ()),
        "dtype_error": facts.dtype_error,
        "vit": None,
    }
    vision = getattr(facts, "vision", None)
    if vision is not None:
        from attnsel.attention.rules import VllmRaises
        from attnsel.attention.selector import vit_backend

        try:
            vit = vit_backend(profile, vision.head_size, vision.dtype, capability, vit_override, importable)
            section["vit"] = {"head_size": vision.head_size, "dtype": vision.dtype, "backend": vit.backend,
                              "log": vit.log, "error": None}
        except VllmRaises as exc:
            section["vit"] = {"head_size": vision.head_size, "dtype": vision.dtype, "backend": None,
                              "log": None, "error": exc.message}
    return section


def ignored_flags(req: SelectionRequest) -> list[str]:
    """Flags an attention-free model gives nothing to apply to."""
    return [f for f, v in (("--attention-backend", req.attention_backend), ("--block-size", req.block_size)) if v]


# --- the explanation -------------------------------------------------------------------------------
def explain_one(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext, choice: ProfileChoice,
                notes: Sequence[str] = (), q_scale: QScale | None = None) -> Explanation:
    """vLLM's explanation, labelled with the rule profile `choice` (attention/rules.py select_profile) and
    why, with the release's known faults it meets (`q_scale`: what is known of the query scale)."""
    from attnsel.attention.explain.faults import faults_for
    from attnsel.attention.versions import QScale

    expl: Explanation = explain_selection(profile, inputs, ctx, list(notes))
    explicit: tuple[ExplicitBlockSize, ...] = ()
    if expl.hybrid is not None and expl.error is None:
        from attnsel.attention.explain.explicit_block_sizes import explicit_block_sizes

        explicit = explicit_block_sizes(profile, inputs, ctx, expl.block_size)
    return dataclasses.replace(expl, profile_note=choice.note, profile_reason=choice.reason,
                               explicit_block_sizes=explicit,
                               flags_to_paste=flags_that_change_vllm(profile, inputs, ctx, expl),
                               known_faults=faults_for(profile, expl, q_scale or QScale.UNIT))


def flags_that_change_vllm(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext,
                           expl: Explanation) -> tuple[str, ...]:
    """The forced --attention-backend / --block-size that change what vLLM would do on its own: the
    smallest set of them that still gives this answer (backend and block size). vLLM's own choice
    needs no flags, and pasting it would freeze today's pick into a deployment (as tune advises)."""
    if expl.error is not None or expl.selected is None:
        return ()
    hybrid = expl.hybrid is not None  # a hybrid's block size is vLLM's to compute: never a flag
    forced_backend = ctx.user_backend is not None
    forced_block = inputs.block_size is not None and not hybrid
    for keep_backend, keep_block in ((False, False), (True, False), (False, True), (True, True)):
        if (keep_backend and not forced_backend) or (keep_block and not forced_block):
            continue
        if _same_answer(profile, inputs, ctx, expl, keep_backend, keep_block or hybrid):
            flags = ["--attention-backend", expl.selected] if keep_backend else []
            return tuple(flags + (["--block-size", str(expl.block_size)] if keep_block else []))
    return ()


def saved_flags(doc: SavedAnswer | dict) -> list[str]:
    """The flags a saved `explain --json` answer advises, read with today's rule (flags_that_change_vllm):
    none where the answer forced neither a backend nor a block size, whatever an older answer pinned."""
    forced = doc.get("explicit_backend") is not None or (doc.get("inputs") or {}).get("block_size") is not None
    return list(doc.get("vllm_args") or []) if forced else []


def _same_answer(profile: RuleProfile, inputs: SelectorInputs, ctx: SelectionContext, expl: Explanation,
                 keep_backend: bool, keep_block: bool) -> bool:
    if keep_backend == (ctx.user_backend is not None) and keep_block == (inputs.block_size is not None):
        return True  # the request as given
    trial = explain_selection(profile, inputs if keep_block else inputs.replace(block_size=None),
                              ctx if keep_backend else dataclasses.replace(ctx, user_backend=None), [])
    same_block = expl.hybrid is not None or trial.block_size == expl.block_size
    return trial.error is None and trial.selected == expl.selected and same_block


@dataclasses.dataclass(frozen=True)
class GpuAnswer:
    """`explain` on one GPU: the model's facts (None: flags only), the selector inputs and context
    vLLM's rules read, and the explanation."""

    facts: ModelFacts | None
    inputs: SelectorInputs
    ctx: SelectionContext
    explanation: Explanation
    memory: MemoryPlan | None = None  # vLLM's memory verdict on this GPU (a model and a GPU named)
    selection: Explanation | None = None  # the selector's answer alone (before the memory verdict); --live compares it
    memory_note: str | None = None  # why there is no memory plan where a model and a GPU were named

    @property
    def selector_answer(self) -> Explanation:
        return self.selection if self.selection is not None else self.explanation


def explain_gpu(req: SelectionRequest, tp: int, model: ModelChoice | None, gpu_name: str | None,
                cc: tuple[int, int], choice: ProfileChoice, importable: Mapping[str, bool] | None,
                memory_flags: MemoryFlags | None = None) -> GpuAnswer:
    """The model's facts on this GPU under the chosen release's model rules, then vLLM's selection,
    then (a model on a named GPU) the memory plan vLLM would make."""
    profile = choice.profile
    facts = None
    if model is not None:
        facts = model_facts(model.config, req.dtype, tp, cc, gpu_name, profile.model_rules,
                            (req.mamba_ssm_cache_dtype, req.mamba_cache_dtype))
    inputs, ctx, notes = build_selection(profile, req, model_facts=facts, capability=cc, gpu_name=gpu_name,
                                         importable=importable)
    expl = explain_one(profile, inputs, ctx, choice, notes, _q_scale(req, model.config if model is not None else None))
    memory = None
    if model is not None and facts is not None and gpu_name:
        flags = dataclasses.replace(memory_flags or MemoryFlags(), tensor_parallel_size=tp,
                                    kv_cache_dtype=req.kv_cache_dtype,
                                    model_dir=checkpoint_folder(model.name if model.source == "folder" else None))
        memory = explain_memory(profile, model.config, facts, expl, flags, gpu_name, cc)
        if memory is None:
            note = _not_planned(profile, facts, gpu_name)
            return GpuAnswer(facts, inputs, ctx, expl, None, selection=expl, memory_note=note)
    return GpuAnswer(facts, inputs, ctx, with_memory_refusal(expl, memory), memory, selection=expl)


def _not_planned(profile: RuleProfile, facts: ModelFacts, gpu_name: str) -> str:
    from attnsel.attention.memory import why_not_planned
    from attnsel.probe import find_gpu

    try:
        find_gpu(gpu_name)
    except UserInputError:
        return f"no memory size known for GPU {gpu_name!r}"
    return why_not_planned(profile, facts)


def _q_scale(req: SelectionRequest, hf_config: dict | None) -> QScale:
    from attnsel.attention.explain.faults import q_scale_of

    return q_scale_of(req.calibrated_q_scale, hf_config)


def explain_memory(profile: RuleProfile, hf_config: dict, facts: ModelFacts, expl: Explanation, flags: MemoryFlags,
                   gpu_name: str, capability: tuple[int, int] | None = None) -> MemoryPlan | None:
    """The plan on one GPU of the built-in table (None: a GPU the table does not know)."""
    from attnsel.probe import find_gpu

    try:
        spec = find_gpu(gpu_name)
    except UserInputError:
        return None
    total = device_total_bytes(spec.name, int(spec.memory_gib * 2**30), probed=False)
    return memory_for(profile, hf_config, facts, expl, flags, total_bytes=total, gpu_name=spec.name,
                      capability=capability)


@dataclasses.dataclass(frozen=True)
class MatrixRow:
    """One GPU family of `explain --gpu all`. `explanation` is None when vLLM already refuses the
    model config on this GPU (`model_error`, e.g. a model type without float16 support)."""

    family: str
    gpu: str
    explanation: Explanation | None
    capability: tuple[int, int] | None = None
    model_error: str | None = None
    model_warnings: tuple[str, ...] = ()  # vLLM's dtype lines for this GPU (e.g. the bf16 fallback)

    @property
    def error(self) -> str | None:
        return self.model_error if self.explanation is None else self.explanation.error

    def to_dict(self) -> MatrixRowFields:
        e = self.explanation
        capability = e.capability if e is not None else self.capability
        return {
            "family": self.family,
            "gpu": self.gpu,
            "capability": f"{capability[0]}.{capability[1]}" if capability else None,
            "dtype": e.inputs.dtype if e else None,
            "selected": e.selected if e else None,
            "block_size": e.block_size if e else None,
            "kernel_block_size": e.kernel_block_size if e else None,
            "valid_backends": e.valid_backends if e else [],
            "valid_count": len(e.valid_backends) if e else 0,
            "total_count": len(e.backends) if e else 0,
            "error": self.error,
            "error_phase": e.error_phase if e else "model_config",
            "model_warnings": list(self.model_warnings),
            "known_faults": [m.to_dict() for m in e.known_faults] if e else [],
            "exit_code": e.exit_code if e else 1,  # what `explain --gpu` this GPU exits with
        }


@dataclasses.dataclass(frozen=True)
class Matrix:
    """`explain --gpu all`: one row per GPU family, the model it was asked about, and whether that
    model has no attention layers (as derived for the last family of the table)."""

    rows: list[MatrixRow]
    model: ModelRef | None
    attention_free: bool


def explain_matrix(req: SelectionRequest, tp: int, model: ModelChoice | None, choice: ProfileChoice,
                   importable: Mapping[str, bool] | None, memory_flags: MemoryFlags | None = None) -> Matrix:
    """One row per GPU family of the built-in table; with a model, its facts are derived again for
    each GPU (--dtype auto resolves per capability, docs/vllm-rules.md §6), and each row ends with the
    memory verdict `explain --gpu ROW` gives (its refusal is the row's error, as there)."""
    profile = choice.profile
    hf_config = model.config if model is not None else None
    rows = []
    facts = None
    for family, spec in families():
        cc = spec.compute_capability
        facts = None
        if hf_config is not None:
            try:
                facts = model_facts(hf_config, req.dtype, tp, cc, spec.name, profile.model_rules,
                                    (req.mamba_ssm_cache_dtype, req.mamba_cache_dtype))
            except CheckFailed as exc:  # vLLM refuses the model config on this GPU (e.g. no float16)
                rows.append(MatrixRow(family, spec.key, None, capability=cc, model_error=exc.message))
                continue
        inputs, ctx, notes = build_selection(profile, req, model_facts=facts, capability=cc,
                                             gpu_name=spec.name, importable=importable)
        expl = explain_one(profile, inputs, ctx, choice, notes, _q_scale(req, hf_config))
        if facts is not None and hf_config is not None:
            flags = dataclasses.replace(memory_flags or MemoryFlags(), tensor_parallel_size=tp,
                                        kv_cache_dtype=req.kv_cache_dtype)
            expl = with_memory_refusal(expl, explain_memory(profile, hf_config, facts, expl, flags, spec.name, cc))
        warnings = tuple(facts.warnings) if facts is not None else ()
        rows.append(MatrixRow(family, spec.key, expl, capability=cc, model_warnings=warnings))
    attention_free = facts is not None and facts.is_attention_free
    return Matrix(rows, model_doc(model, hf_config), attention_free)
