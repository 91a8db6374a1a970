"""Render an `Explanation` (attention/selector/engine.py) as a rich table or a JSON dict. No NVML, no CUDA."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnsel.attention.explain import DEFAULT_SOURCE, MEMORY_PHASE, MatrixRow
from attnsel.attention.rules import (
    OPTIONAL_SELECTOR_FIELDS,
    Explanation,
    MultipleOf,
    kernel_sizes_display,
)
from attnsel.reports.explain.hybrid import (
    block_size_advice_lines,
    explicit_to_dict,
    hybrid_to_dict,
    render_hybrid,
)
from attnsel.reports.explain.memory import render_memory

if TYPE_CHECKING:
    from attnsel.attention.explain import Mismatch
    from attnsel.attention.explain.document import (
        ExplainAnswer,
        ExplainMatrix,
        LiveAnswerAsked,
        LiveReport,
        ModelRef,
        ModelSection,
    )
    from attnsel.attention.explain.live import LiveAnswer, LiveVerdict
    from attnsel.attention.memory import MemoryPlan
    from attnsel.attention.rules import BackendVerdict
    from attnsel.attention.versions import RuleProfile

# Every JSON document names itself `schema: "attnsel-<document>/<version>"` (docs/schemas/); before
# these names explain, preflight and report wrote `schema_version: 1`, which readers still accept.
EXPLAIN_SCHEMA = "attnsel-explain/1"
EXPLAIN_MATRIX_SCHEMA = "attnsel-explain-matrix/1"  # --gpu all
EXPLAIN_HISTORY_SCHEMA = "attnsel-explain-history/1"  # --vllm-version all


def _capability_str(capability: Sequence[int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def _kernel_sizes_json(sizes: Sequence[int | MultipleOf] | None) -> list | None:
    if sizes is None:
        return None
    return [s.to_dict() if isinstance(s, MultipleOf) else s for s in sizes]


def explanation_to_dict(expl: Explanation) -> ExplainAnswer:
    """The `explain --json` document (`attnsel-explain/1`)."""
    ctx = expl.context
    return {
        "schema": EXPLAIN_SCHEMA,
        "profile": expl.profile,
        "profile_vllm_version": expl.vllm_version,
        "profile_note": expl.profile_note,
        "profile_reason": expl.profile_reason,
        "gpu": {"name": expl.gpu_name, "capability": _capability_str(expl.capability)},
        "inputs": expl.inputs.to_dict(),
        "context": {
            "num_heads": ctx.num_heads,
            "attention_backend": ctx.user_backend.upper() if ctx.user_backend else None,
            "is_hybrid": ctx.is_hybrid,
            "is_attention_free": ctx.is_attention_free,
            "mamba_cache_float32": ctx.mamba_cache_float32,
            "qk_nope_head_dim": ctx.qk_nope_head_dim,
            "has_index_topk": ctx.has_index_topk,
            "use_trtllm_attention": ctx.use_trtllm_attention,
            "batch_invariant": ctx.batch_invariant,
            "has_flashinfer_cubin": ctx.has_flashinfer_cubin,
            "flash_attn_version_override": ctx.flash_attn_version_override,
            "decode_context_parallel_size": ctx.decode_context_parallel_size,
            "prefill_context_parallel_size": ctx.prefill_context_parallel_size,
            "num_kv_heads": ctx.num_kv_heads,
            "kv_lora_rank": ctx.kv_lora_rank,
            "index_topk": ctx.index_topk,
            "imports_checked": ctx.importable is not None,
            "missing_modules": sorted(m for m, ok in (ctx.importable or {}).items() if not ok),
        },
        "backends": [b.to_dict() for b in expl.backends],
        "explicit_backend": expl.explicit_backend.to_dict() if expl.explicit_backend else None,
        "selected": expl.selected,
        "block_size": expl.block_size,
        "kernel_block_size": expl.kernel_block_size,
        "kernel_block_sizes": _kernel_sizes_json(expl.kernel_block_sizes),
        "kv_cache_layout": expl.kv_cache_layout,
        "flash_attn_version": expl.flash_attn_version,
        "warnings": expl.warnings,
        "logs": [line.to_dict() for line in expl.logs],
        "error": expl.error,
        "error_type": expl.error_type,
        "error_phase": expl.error_phase,
        "vllm_config_repr": expl.layer_config_repr,
        "vllm_args": expl.vllm_args,
        "notes": list(expl.notes),
        "hybrid": hybrid_to_dict(expl.hybrid),
        "hybrid_explicit_block_sizes": explicit_to_dict(expl),
        "known_faults": [m.to_dict() for m in expl.known_faults],
        "exit_code": expl.exit_code,
    }


def header_line(expl: Explanation) -> str:
    gpu = f"{expl.gpu_name} " if expl.gpu_name else ""
    return (
        f"attnsel explain · rule profile {expl.profile} (vLLM {expl.vllm_version}) · "
        f"GPU {gpu}(compute capability {_capability_str(expl.capability)})"
    )


def _inputs_line(expl: Explanation) -> str:
    i = expl.inputs
    parts = [
        f"head_size={i.head_size}", f"dtype={i.dtype}", f"kv_cache_dtype={i.kv_cache_dtype}",
        f"block_size={i.block_size}", f"use_mla={i.use_mla}", f"has_sink={i.has_sink}",
        f"use_sparse={i.use_sparse}", f"use_mm_prefix={i.use_mm_prefix}", f"attn_type={i.attn_type}",
    ]
    parts += [f"{name}=True" for name in OPTIONAL_SELECTOR_FIELDS if getattr(i, name)]
    if expl.context.num_heads is not None:
        parts.append(f"num_heads/GPU={expl.context.num_heads}")
    if expl.context.user_backend:
        parts.append(f"--attention-backend {expl.context.user_backend.upper()}")
    return "Inputs: " + ", ".join(parts)


def backends_table(expl: Explanation) -> Table:
    rows = list(expl.backends)
    if expl.explicit_backend is not None and expl.explicit_backend.priority is None:
        rows.append(expl.explicit_backend)
    return verdicts_table(rows, expl.selected, "Reasons (vLLM's words, in vLLM's order)")


def verdicts_table(rows: Sequence[BackendVerdict | LiveVerdict], selected: str | None, reasons_header: str) -> Table:
    """One row per backend verdict (ours or live vLLM's): priority, name, valid, reasons."""
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("Prio", justify="right")
    table.add_column("Backend")
    table.add_column("Valid")
    table.add_column(reasons_header)
    for verdict in rows:
        name = Text(verdict.name)
        if verdict.name == selected:
            name = Text(f"{verdict.name} ◀ selected", style="bold green")
        valid = Text("yes", style="green") if verdict.valid else Text("no", style="red")
        priority = "-" if verdict.priority is None else str(verdict.priority)
        table.add_row(priority, name, valid, "; ".join(verdict.reasons))
    return table


def render_explanation(expl: Explanation, console: Console) -> None:
    console.print(header_line(expl))
    if expl.profile_reason:
        console.print(f"Profile: {expl.profile_reason}", markup=False)
    elif expl.profile_note:
        console.print(f"Note: {expl.profile_note}", markup=False)
    console.print(_inputs_line(expl))
    console.print(backends_table(expl))
    if expl.selected is not None:
        console.print(f"vLLM selects: [bold]{expl.selected}[/bold]")
    if expl.block_size is not None:
        kernel = ""
        if expl.kernel_block_size is not None:
            kernel = f" (kernel block size {expl.kernel_block_size}"
            if expl.kernel_block_sizes is not None:
                kernel += f"; backend kernel sizes {kernel_sizes_display(list(expl.kernel_block_sizes))}"
            kernel += ")"
        origin = "your --block-size" if expl.inputs.block_size is not None else "chosen by vLLM"
        if expl.hybrid is not None and expl.block_size != expl.inputs.block_size:
            origin = "chosen by vLLM to fit the Mamba state"
        console.print(f"KV cache block size: {expl.block_size}, {origin}{kernel}")
    render_hybrid(expl.hybrid, expl.inputs.block_size, console)
    if expl.kv_cache_layout:
        console.print(f"KV cache layout: {expl.kv_cache_layout} (required by {expl.selected})")
    if expl.flash_attn_version is not None and not expl.inputs.use_mla:
        console.print(f"FlashAttention version on this GPU: FA{expl.flash_attn_version}")
    if expl.warnings:
        console.print("vLLM logs:")
        for line in expl.logs:
            if line.level != "debug":
                console.print(f"  {line.level.upper()} {line.message}", markup=False)
    for note in expl.notes:
        console.print(f"Note: {note}", markup=False)
    for fault in expl.known_faults:
        console.print(f"Warning: {fault.line()}", style="yellow", markup=False)
    if expl.error is not None and expl.error_phase != MEMORY_PHASE:
        console.print(f"vLLM raises {expl.error_type}: {expl.error}", style="red", markup=False)
    elif expl.selected is not None:  # a memory refusal: the memory block below says it, with its fix
        console.print(flags_line(expl), markup=False)
        for advice in block_size_advice_lines(expl):
            console.print(advice, markup=False)


def flags_line(expl: Explanation) -> str:
    """The flags to paste, or that vLLM's own choice needs none (pinning it would freeze it)."""
    if expl.vllm_args:
        return "vLLM flags: " + " ".join(expl.vllm_args)
    return "vLLM flags: none needed (vLLM's own choice; pinning it would freeze it)"


def model_line(section: ModelSection | ModelRef) -> str:
    """"Model: NAME (where it came from) · model_type T" for the text output."""
    if section["source"] == DEFAULT_SOURCE:
        origin = f"{DEFAULT_SOURCE}; pass --model or --head-size"
    else:
        origin = section["source"] or "config"
    return f"Model: {section['name']} ({origin}) · model_type {section['model_type']}"


def explanation_with_model_to_dict(expl: Explanation, model_section: ModelSection | None,
                                   memory: MemoryPlan | None = None, memory_note: str | None = None) -> ExplainAnswer:
    """`explain --json` for one GPU: the explanation, and the model section when a model was read;
    `memory`: vLLM's memory plan on the GPU (attention/memory), when a model and a GPU were named;
    `memory_not_planned`: why there is none where both were named."""
    doc = explanation_to_dict(expl)
    if model_section is not None:
        doc["model"] = model_section
    if memory is not None:
        doc["memory"] = memory.to_dict()
    if memory_note is not None:
        doc["memory_not_planned"] = memory_note
    return doc


def render_explanation_with_model(expl: Explanation, model_section: ModelSection | None, console: Console,
                                  memory: MemoryPlan | None = None, memory_note: str | None = None) -> None:
    """The model line and vLLM's lines about the model, the explanation, then the ViT backend."""
    if model_section is not None:
        console.print(model_line(model_section), markup=False)
        for line in model_section["warnings"] + model_section["infos"]:
            console.print(f"  vLLM: {line}", markup=False)
    render_explanation(expl, console)
    vit = model_section["vit"] if model_section is not None else None
    if vit:
        if vit["error"]:
            console.print(f"ViT attention: vLLM raises AssertionError: {vit['error']}", markup=False)
        else:
            console.print(f"ViT attention backend: {vit['backend']} (head size {vit['head_size']}, {vit['dtype']})")
    if memory is not None:
        render_memory(memory, console)
    elif memory_note is not None:
        console.print(f"Memory: not planned: {memory_note}", markup=False)


def matrix_to_dict(rows: Sequence[MatrixRow], model: ModelRef | None = None, profile: RuleProfile | None = None,
                   notes: Sequence[str] = ()) -> ExplainMatrix:
    first = next((row.explanation for row in rows if row.explanation is not None), None)
    return {
        "schema": EXPLAIN_MATRIX_SCHEMA,
        "profile": first.profile if first else getattr(profile, "name", None),
        "profile_vllm_version": first.vllm_version if first else getattr(profile, "vllm_version", None),
        "model": model,
        "inputs": first.inputs.to_dict() if first and model is None else None,
        "rows": [row.to_dict() for row in rows],
        "notes": list(notes),
    }


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_matrix(rows: Sequence[MatrixRow], console: Console, model: ModelRef | None = None,
                  profile: RuleProfile | None = None,
                  notes: Sequence[str] = ()) -> None:
    if not rows:
        return
    for note in notes:  # e.g. "No GPU detected on this machine: ..." above the table it explains
        console.print(note, markup=False)
    first = next((row.explanation for row in rows if row.explanation is not None), None)
    name = first.profile if first else getattr(profile, "name", "?")
    version = first.vllm_version if first else getattr(profile, "vllm_version", "?")
    console.print(f"attnsel explain --gpu all · rule profile {name} (vLLM {version})", markup=False)
    if model is not None:
        console.print(f"Model: {model['name']} ({model['source']}) · model_type {model['model_type']} · "
                      "inputs derived again for each GPU", markup=False)
    elif first is not None:
        console.print(_inputs_line(first).replace(f"dtype={first.inputs.dtype}", "dtype=(per row)"), markup=False)
    table = Table(show_header=True, header_style="bold")
    for column in ("GPU family", "GPU", "CC", "dtype", "vLLM selects", "Block", "Valid", "vLLM error"):
        table.add_column(column, no_wrap=column not in ("GPU family", "vLLM error"))
    footnotes: list[str] = []
    for row in rows:
        e = row.explanation
        capability = e.capability if e is not None else row.capability
        dtype = e.inputs.dtype if e is not None else "-"
        if row.model_warnings:
            footnotes += [f"{row.gpu}: vLLM: {line}" for line in row.model_warnings]
            dtype += " *"
        footnotes += [f"{row.gpu}: Warning: {fault.line()}" for fault in (e.known_faults if e is not None else ())]
        table.add_row(
            row.family, row.gpu, _capability_str(capability) if capability else "-", dtype,
            (e.selected if e else None) or "-",
            "-" if e is None or e.block_size is None else str(e.block_size),
            f"{len(e.valid_backends)}/{len(e.backends)}" if e else "-",
            Text(_short(row.error or ""), style="red"),
        )
    console.print(table)
    for line in footnotes:
        console.print(f"* {line}", markup=False)


# --- --live / --compare-live -------------------------------------------------------------------------
def live_to_dict(answer: LiveAnswer, expl: Explanation) -> LiveAnswerAsked:
    """The installed vLLM's answer, with the GPU and inputs it was asked about."""
    return {
        **answer.to_dict(),
        "gpu": {"name": expl.gpu_name, "capability": _capability_str(expl.capability)},
        "inputs": expl.inputs.to_dict(),
    }


def render_live(answer: LiveAnswer, expl: Explanation, console: Console) -> None:
    gpu = f"{expl.gpu_name} " if expl.gpu_name else ""
    console.print(
        f"attnsel explain --live · vLLM {answer.vllm_version} installed here (its own selector, "
        f"{answer.api} API) · GPU {gpu}(compute capability {_capability_str(expl.capability)})"
    )
    console.print(_inputs_line(expl))
    rows = list(answer.backends)
    if answer.explicit_backend is not None and answer.explicit_backend.name not in {b.name for b in rows}:
        rows.append(answer.explicit_backend)
    console.print(verdicts_table(rows, answer.selected, "Reasons (vLLM's own answer)"))
    if answer.selected is not None:
        console.print(f"vLLM selects: [bold]{answer.selected}[/bold]")
    if answer.block_size is not None:
        console.print(f"KV cache block size: {answer.block_size}")
    if answer.error is not None:
        console.print(f"vLLM raises ValueError: {answer.error}", style="red", markup=False)


def render_comparison(expl: Explanation, mismatches: Sequence[Mismatch], console: Console) -> None:
    if not mismatches:
        console.print(f"Rule profile {expl.profile} agrees with the installed vLLM on every backend, the choice and the block size.")
        return
    console.print(f"Rule profile {expl.profile} and the installed vLLM disagree:", style="red")
    table = Table(show_header=True, header_style="bold")
    for column in ("What", "Backend", f"Profile {expl.profile}", "Installed vLLM"):
        table.add_column(column)
    for m in mismatches:
        table.add_row(m.what, m.backend or "", str(m.ours), str(m.live))
    console.print(table)


def live_report_to_dict(answer: LiveAnswer, expl: Explanation, mismatches: Sequence[Mismatch] | None) -> LiveReport:
    """`explain --live --json`; with --compare-live (`mismatches` not None) the profile and where it differs."""
    doc: LiveReport = {"live": live_to_dict(answer, expl)}
    if mismatches is not None:
        doc["profile"] = expl.profile
        doc["profile_reason"] = expl.profile_reason
        doc["mismatches"] = [m.to_dict() for m in mismatches]
        doc["agree"] = not mismatches
    return doc


def render_live_report(answer: LiveAnswer, expl: Explanation, mismatches: Sequence[Mismatch] | None,
                       console: Console) -> None:
    render_live(answer, expl, console)
    if mismatches is not None:
        render_comparison(expl, mismatches, console)
