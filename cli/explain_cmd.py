"""`attnsel explain`: which vLLM attention backends are valid and why, which one vLLM picks, the KV
block size, vLLM's log lines and its exact error. Explicit inputs, a --model config, or both
(explicit flags win). Imports no torch.

Exit codes: 0 vLLM would start; 1 vLLM would raise (its message on stderr); 2 bad input.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any, Optional

import typer
from typer.core import TyperCommand

from attnsel.cli.common import fail, handle_errors, print_json, stdout_console
from attnsel.errors import EXIT_FAILED, CheckFailed, UserInputError

if TYPE_CHECKING:
    from attnsel.attention.request import SelectionRequest

ATTN_TYPES = ("decoder", "encoder", "encoder_only", "encoder_decoder")
DEFAULT_SOURCE = "bundled default"


def parse_capability(text: str) -> tuple[int, int]:
    """"9.0" / "9" / "sm90" / "90" -> (9, 0) (probe/capability.py, the one parser)."""
    from attnsel.probe.capability import parse_capability as parse

    return parse(text, "--capability")


NO_GPU_NOTE = ("No GPU detected on this machine: answered for the GPU families people deploy on; "
               "pick one with --gpu NAME (e.g. --gpu H100) or --capability X.Y")


def _detect_gpu() -> Optional[tuple[Optional[str], tuple[int, int]]]:
    """Logical device 0 of this machine, via the probe (NVML only: never torch)."""
    try:
        from attnsel.probe.collect import collect_probe
    except ImportError:
        collect_probe = None
    report = None
    if collect_probe is not None:

        class _NoTorch:  # keep `explain` torch-free: no torch.cuda fallback
            def inventory(self):
                return None

            def measure_copy_gbps(self, pairs):
                return {}

        try:
            report = collect_probe(torch=_NoTorch())
        except Exception:  # noqa: BLE001 -- detection is best effort; the message below says what to do
            report = None
    gpus = [g for g in (report.gpus if report else ()) if g.compute_capability is not None]
    if not gpus:
        return None
    return gpus[0].name, tuple(gpus[0].compute_capability)


def _resolve_gpu(gpu: Optional[str], capability: Optional[str]) -> Optional[tuple[Optional[str], tuple[int, int]]]:
    """--capability, --gpu NAME, else the GPU of this machine; None when there is none."""
    if capability is not None:
        cc = parse_capability(capability)
        name = None
        if gpu is not None:
            from attnsel.probe.gpu_table import find_gpu

            name = find_gpu(gpu).name
        return name, cc
    if gpu is not None:
        from attnsel.probe.gpu_table import find_gpu

        spec = find_gpu(gpu)
        return spec.name, spec.compute_capability
    return _detect_gpu()


# --index-topk alone (the model config has index_topk) or --index-topk N (its value): Typer has no
# optional-value options, so `--index-topk N` is rewritten to `--index-topk --index-topk-value N`.
INDEX_TOPK_FLAG = "--index-topk"
INDEX_TOPK_VALUE_FLAG = "--index-topk-value"


class _ExplainCommand(TyperCommand):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite_index_topk(args))


def rewrite_index_topk(args: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith(INDEX_TOPK_FLAG + "="):
            out += [INDEX_TOPK_FLAG, INDEX_TOPK_VALUE_FLAG, arg.split("=", 1)[1]]
        elif arg == INDEX_TOPK_FLAG and i + 1 < len(args) and args[i + 1].lstrip("-").isdigit():
            out += [INDEX_TOPK_FLAG, INDEX_TOPK_VALUE_FLAG, args[i + 1]]
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


@dataclasses.dataclass(frozen=True)
class _ModelChoice:
    """Which model config explain reads: --model, or the bundled default when no head size is given.
    The config is read once, here (standard input can only be read once)."""

    name: str
    source: str  # "bundled default" | "catalog" | "path" | "folder" | "stdin" | "pipe" | "Hugging Face ..."
    config: dict = dataclasses.field(default_factory=dict, compare=False)


def _model_choice(model: Optional[str], head_size: Optional[int]) -> Optional[_ModelChoice]:
    from attnsel.attention import model_config

    if model is not None:
        source, config = model_config.load_model_source(model)
        return _ModelChoice(model, source.source, config)
    if head_size is None:
        return _ModelChoice(model_config.DEFAULT_MODEL, DEFAULT_SOURCE,
                            model_config.load_model_config(model_config.DEFAULT_MODEL))
    return None


def _model_facts(hf_config: dict, dtype: Optional[str], tp: int, capability, gpu_name, model_rules):
    from attnsel.attention import model_config

    return model_config.derive_model_facts(
        hf_config, capability=capability, dtype=dtype or "auto", tensor_parallel_size=tp,
        gpu_name=gpu_name, profile=model_rules,
    )


def _explain_one(profile, inputs, ctx, choice, notes=()):
    from attnsel.attention.request import explain_selection

    expl = explain_selection(profile, inputs, ctx, list(notes))
    return dataclasses.replace(expl, profile_note=choice.note, profile_reason=choice.reason)


def _model_section(
    choice: Optional[_ModelChoice], facts: Any, profile, capability, vit_override: Optional[str], importable
) -> Optional[dict]:
    if facts is None:
        return None
    section: dict[str, Any] = {
        "name": choice.name if choice else None,
        "source": choice.source if choice else None,
        "model_type": getattr(facts, "model_type", None),
        "warnings": list(getattr(facts, "warnings", ()) or ()),
        "infos": list(getattr(facts, "infos", ()) or ()),
        "notes": list(getattr(facts, "notes", ()) or ()),
        "dtype_error": getattr(facts, "dtype_error", None),
        "vit": None,
    }
    vision = getattr(facts, "vision", None)
    if vision is not None:
        from attnsel.attention.selector import VllmRaises
        from attnsel.attention.vit import vit_backend

        try:
            choice = vit_backend(profile, vision.head_size, vision.dtype, capability, vit_override, importable)
            section["vit"] = {"head_size": vision.head_size, "dtype": vision.dtype, **choice.to_dict(), "error": None}
        except VllmRaises as exc:
            section["vit"] = {"head_size": vision.head_size, "dtype": vision.dtype, "backend": None,
                              "log": None, "error": exc.message}
    return section


def _run_matrix(req: SelectionRequest, tp: int, model: Optional[_ModelChoice], choice, as_json: bool, importable,
                header_notes: tuple[str, ...] = ()) -> None:
    """One row per GPU family of the built-in table; with a model, its facts are derived again for
    each GPU (--dtype auto resolves per capability, vllm-rules §6)."""
    from attnsel.probe.gpu_table import families
    from attnsel.reports.explain_report import MatrixRow, matrix_to_dict, render_matrix

    from attnsel.attention.request import build_selection

    profile = choice.profile
    hf_config = _load_config(model) if model is not None else None
    rows = []
    for family, spec in families():
        cc = spec.compute_capability
        facts = None
        if hf_config is not None:
            try:
                facts = _model_facts(hf_config, req.dtype, tp, cc, spec.name, profile.model_rules)
            except CheckFailed as exc:  # vLLM refuses the model config on this GPU (e.g. no float16)
                rows.append(MatrixRow(family, spec.key, None, capability=cc, model_error=exc.message))
                continue
        inputs, ctx, notes = build_selection(profile, req, model_facts=facts, capability=cc,
                                             gpu_name=spec.name, importable=importable)
        expl = _explain_one(profile, inputs, ctx, choice, notes)
        warnings = tuple(facts.warnings) if facts is not None else ()
        rows.append(MatrixRow(family, spec.key, expl, capability=cc, model_warnings=warnings))
    model_doc = _model_doc(model, hf_config)
    if facts is not None and facts.is_attention_free:
        from attnsel.reports.attention_free import attention_free_line

        header_notes = (*header_notes, attention_free_line(model_doc))
    if as_json:
        print_json(dict(matrix_to_dict(rows, model=model_doc, profile=profile), notes=list(header_notes)))
    else:
        render_matrix(rows, stdout_console(), model=model_doc, profile=profile, notes=header_notes)


def _load_config(model: _ModelChoice) -> dict:
    return model.config


def _model_doc(model: Optional[_ModelChoice], hf_config: Optional[dict]) -> Optional[dict]:
    if model is None:
        return None
    model_type = hf_config.get("model_type") if hf_config else None
    return {"name": model.name, "source": model.source, "model_type": model_type}


def register(app: typer.Typer) -> None:
    @app.command("explain", cls=_ExplainCommand)
    @handle_errors
    def explain_command(
        model: Optional[str] = typer.Option(None, "--model", help="Model config.json (path, folder or catalog name)."),
        head_size: Optional[int] = typer.Option(None, "--head-size", help="Attention head size."),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="float16|bfloat16|float32 (half, bf16, fp16, fp32, float) or auto."),
        kv_cache_dtype: Optional[str] = typer.Option(None, "--kv-cache-dtype", help="vLLM --kv-cache-dtype (default auto)."),
        block_size: Optional[int] = typer.Option(None, "--block-size", help="vLLM --block-size (default: vLLM picks)."),
        attention_backend: Optional[str] = typer.Option(None, "--attention-backend", help="vLLM --attention-backend NAME."),
        use_mla: Optional[bool] = typer.Option(None, "--use-mla/--no-use-mla", help="Multi-head latent attention (DeepSeek)."),
        has_sink: Optional[bool] = typer.Option(None, "--has-sink/--no-has-sink", help="Attention sinks (gpt-oss)."),
        use_sparse: Optional[bool] = typer.Option(None, "--use-sparse/--no-use-sparse", help="Sparse MLA (index_topk)."),
        use_mm_prefix: Optional[bool] = typer.Option(None, "--use-mm-prefix/--no-use-mm-prefix", help="Bidirectional multimodal prefix (gemma3)."),
        attn_type: Optional[str] = typer.Option(None, "--attn-type", help="decoder|encoder|encoder_only|encoder_decoder."),
        num_heads: Optional[int] = typer.Option(None, "--num-heads", help="Attention heads per GPU (total // TP)."),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="With --model: heads per GPU = total // TP."),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name from the built-in table (H100, A100, B200...), or 'all'."),
        capability: Optional[str] = typer.Option(None, "--capability", help="Compute capability X.Y (overrides --gpu's)."),
        qk_nope_head_dim: Optional[int] = typer.Option(None, "--qk-nope-head-dim", help="MLA qk_nope_head_dim (absent = 1, as vLLM reads it)."),
        index_topk: Optional[bool] = typer.Option(None, "--index-topk/--no-index-topk", metavar="[N]", help="Model config has index_topk (vLLM: use_sparse = use_mla and hasattr(hf_config, 'index_topk'), vllm-rules §6); --index-topk N also gives its value, which later releases' sparse MLA backends check (FA4 sparse: N % 128 == 0; SM120: N == 2048; vllm-rules §9). Default: same as --use-sparse."),
        index_topk_value: Optional[str] = typer.Option(None, INDEX_TOPK_VALUE_FLAG, hidden=True),
        num_kv_heads: Optional[int] = typer.Option(None, "--num-kv-heads", help="KV heads per GPU. Later vLLM FlashInfer uses TRT-LLM attention, and kernel blocks up to 1024 on CC 10.x, only for GQA (heads != KV heads; vllm-rules §9). Default: not GQA."),
        kv_lora_rank: Optional[int] = typer.Option(None, "--kv-lora-rank", help="MLA kv_lora_rank. Later vLLM sparse MLA backends require 512 (FLASHINFER_MLA_SPARSE_SM90, FLASH_ATTN_MLA_SPARSE_FA4 with qk_rope_head_dim 64; vllm-rules §9)."),
        rswa: bool = typer.Option(False, "--rswa", help="R-SWA layers (selector input use_rswa): backends without it give 'R-SWA not supported'; FA4 hd256 falls back to FA2 (vllm-rules §9)."),
        adaptive_verification: bool = typer.Option(False, "--adaptive-verification", help="Speculative decoding with adaptive verification (selector input use_adaptive_verification): needs backends that support a device-cpu query lens mismatch (vllm-rules §9)."),
        flash_attn_version: Optional[int] = typer.Option(None, "--flash-attn-version", help="--attention-config.flash_attn_version (2, 3, 4)."),
        use_trtllm_attention: Optional[bool] = typer.Option(None, "--use-trtllm-attention/--no-use-trtllm-attention", help="attention_config.use_trtllm_attention."),
        batch_invariant: bool = typer.Option(False, "--batch-invariant", help="VLLM_BATCH_INVARIANT=1."),
        flashinfer_cubin: bool = typer.Option(True, "--flashinfer-cubin/--no-flashinfer-cubin", help="FlashInfer cubins reachable (has_nvidia_artifactory)."),
        hybrid: Optional[bool] = typer.Option(None, "--hybrid/--no-hybrid", help="Attention + Mamba hybrid model."),
        mamba_cache_float32: Optional[bool] = typer.Option(None, "--mamba-cache-float32/--no-mamba-cache-float32", help="Hybrid model with float32 Mamba cache."),
        mm_encoder_attn_backend: Optional[str] = typer.Option(None, "--mm-encoder-attn-backend", help="ViT backend override (with --model)."),
        check_imports: bool = typer.Option(False, "--check-imports", help="Treat packages missing HERE as missing (vLLM's ImportError)."),
        vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="vLLM version (or profile name) to answer for, or 'all': how the verdict changed release by release. Default: the vLLM installed here, else the newest profile."),
        sliding_window: Optional[bool] = typer.Option(None, "--sliding-window/--no-sliding-window", help="Sliding-window attention layers (selector input in later releases; default: from the model's sliding_window)."),
        non_causal: bool = typer.Option(False, "--non-causal", help="Non-causal (bidirectional) decoder attention (selector input in later releases)."),
        kv_connector: bool = typer.Option(False, "--kv-connector", help="A KV connector is configured (--kv-transfer-config; selector input in later releases)."),
        dcp: int = typer.Option(1, "--dcp", help="--decode-context-parallel-size (selector input in later releases: DCP when > 1)."),
        pcp: int = typer.Option(1, "--pcp", help="--prefill-context-parallel-size (selector input in later releases: PCP when > 1)."),
        per_head_quant_scales: bool = typer.Option(False, "--per-head-quant-scales", help="Per-head KV quant scales (kv_cache_scheme strategy attn_head)."),
        qk_rope_head_dim: Optional[int] = typer.Option(None, "--qk-rope-head-dim", help="MLA qk_rope_head_dim (TOKENSPEED_MLA / sparse MLA rules of later releases)."),
        v_head_dim: Optional[int] = typer.Option(None, "--v-head-dim", help="MLA v_head_dim (TOKENSPEED_MLA rule of later releases)."),
        live: bool = typer.Option(False, "--live", help="Ask the vLLM installed here (its own selector) instead of a rule profile."),
        compare_live: bool = typer.Option(False, "--compare-live", help="Show where the rule profile and the installed vLLM disagree (exit 1 if they do)."),
        as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    ) -> None:
        """Which vLLM attention backend runs, why the others don't, the KV block size, vLLM's exact messages."""
        from attnsel.attention.request import SelectionRequest, build_selection
        from attnsel.attention.rules import importable_map, select_profile

        from attnsel.attention.validation import check_names, check_request

        if attn_type is not None and attn_type.lower() not in ATTN_TYPES:
            raise UserInputError(f"unknown --attn-type {attn_type!r}; use one of {', '.join(ATTN_TYPES)}")
        check_names((("--gpu", gpu), ("--vllm-version", vllm_version), ("--mm-encoder-attn-backend", mm_encoder_attn_backend)))
        if live or compare_live:
            from attnsel.attention.live import require_vllm

            require_vllm()  # exit 2 without vLLM, before any work
        from attnsel.cli.explain_history import wants_history

        history = wants_history(vllm_version)
        choice = select_profile(None if history else vllm_version)
        profile = choice.profile
        importable = importable_map(profile) if check_imports else None
        if mm_encoder_attn_backend is not None:
            profile.resolve_backend_name(mm_encoder_attn_backend)  # a name vLLM knows, even without a ViT
        topk_value = _parse_index_topk(index_topk, index_topk_value)
        req = SelectionRequest(
            head_size=head_size, dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size,
            attention_backend=attention_backend, use_mla=use_mla, has_sink=has_sink, use_sparse=use_sparse,
            use_mm_prefix=use_mm_prefix, attn_type=attn_type.lower() if attn_type else None, num_heads=num_heads,
            qk_nope_head_dim=qk_nope_head_dim, has_index_topk=index_topk, flash_attn_version=flash_attn_version,
            use_trtllm_attention=use_trtllm_attention, batch_invariant=batch_invariant,
            flashinfer_cubin=flashinfer_cubin, hybrid=hybrid, mamba_cache_float32=mamba_cache_float32,
            sliding_window=sliding_window, non_causal=non_causal, kv_connector=kv_connector, dcp=dcp, pcp=pcp,
            per_head_quant_scales=per_head_quant_scales, rswa=rswa, adaptive_verification=adaptive_verification,
            qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim, num_kv_heads=num_kv_heads,
            kv_lora_rank=kv_lora_rank, index_topk=topk_value,
        )
        check_request(req, tensor_parallel_size)
        model_choice = _model_choice(model, head_size)
        if history:  # --vllm-version all: one GPU, every release profile
            from attnsel.cli.explain_history import run_history

            if live or compare_live or (gpu or "").strip().lower() == "all":
                raise UserInputError("--vllm-version all takes one GPU and no --live / --compare-live")
            return run_history(req, tensor_parallel_size, model_choice, _resolve_gpu(gpu, capability),
                               check_imports, as_json, _model_doc(model_choice, model_choice and model_choice.config))
        if gpu is not None and gpu.strip().lower() == "all":
            if live or compare_live:
                raise UserInputError("--gpu all does not combine with --live or --compare-live (one GPU: this one)")
            _run_matrix(req, tensor_parallel_size, model_choice, choice, as_json, importable)
            return
        resolved = _resolve_gpu(gpu, capability)
        if resolved is None:  # a laptop or CI runner: answer for the GPU families people deploy on
            if live or compare_live:
                raise UserInputError("no GPU detected on this machine: --live and --compare-live ask this GPU")
            _run_matrix(req, tensor_parallel_size, model_choice, choice, as_json, importable, header_notes=(NO_GPU_NOTE,))
            return
        gpu_name, cc = resolved
        facts = None
        if model_choice is not None:
            facts = _model_facts(_load_config(model_choice), dtype, tensor_parallel_size, cc, gpu_name,
                                 profile.model_rules)
        inputs, ctx, notes = build_selection(profile, req, model_facts=facts, capability=cc, gpu_name=gpu_name,
                                             importable=importable)
        expl = _explain_one(profile, inputs, ctx, choice, notes)
        if live or compare_live:
            _run_live(expl, inputs, ctx, compare_live, as_json)
            return
        model_section = _model_section(model_choice, facts, profile, cc, mm_encoder_attn_backend, importable)
        if facts is not None and facts.is_attention_free:
            _output_attention_free(expl, model_section, req, as_json)
            return
        _output(expl, model_section, as_json)
        if expl.error is not None:
            raise fail(f"vLLM would raise {expl.error_type}: {expl.error}", EXIT_FAILED)


def _parse_index_topk(flag: Optional[bool], value: Optional[str]) -> Optional[int]:
    if value is None:
        return None
    if flag is False:
        raise UserInputError("--no-index-topk and --index-topk N contradict each other")
    try:
        topk = int(value)
    except ValueError:
        raise UserInputError(f"bad --index-topk {value!r}: use a whole number, e.g. --index-topk 2048") from None
    if topk < 1:
        raise UserInputError("--index-topk must be >= 1")
    return topk


def model_line(section: dict) -> str:
    """"Model: NAME (where it came from) · model_type T" for the text output."""
    if section.get("source") == DEFAULT_SOURCE:
        origin = f"{DEFAULT_SOURCE}; pass --model or --head-size"
    else:
        origin = section.get("source") or "config"
    return f"Model: {section.get('name')} ({origin}) · model_type {section.get('model_type')}"


def _run_live(expl, inputs, ctx, compare_live: bool, as_json: bool) -> None:
    """--live: vLLM's own answer in the explain format; --compare-live: where the profile differs."""
    from attnsel.attention.live import ask_vllm, compare
    from attnsel.reports.explain_report import live_to_dict, render_comparison, render_live

    answer = ask_vllm(inputs, ctx)
    mismatches = compare(expl, answer) if compare_live else None
    if as_json:
        doc = {"live": live_to_dict(answer, expl)}
        if mismatches is not None:
            doc["profile"] = expl.profile
            doc["profile_reason"] = expl.profile_reason
            doc["mismatches"] = [m.to_dict() for m in mismatches]
            doc["agree"] = not mismatches
        print_json(doc)
    else:
        console = stdout_console()
        render_live(answer, expl, console)
        if mismatches is not None:
            render_comparison(expl, mismatches, console)
    if mismatches:
        raise fail(f"rule profile {expl.profile} and vLLM {answer.vllm_version} disagree in {len(mismatches)} place(s)", EXIT_FAILED)
    if not compare_live and answer.error is not None:
        raise fail(f"vLLM raises: {answer.error}", EXIT_FAILED)


def _output_attention_free(expl, section: dict, req, as_json: bool) -> None:
    """Mamba and other attention-free models: no backend table (there are no attention layers)."""
    from attnsel.reports import attention_free as view

    ignored = [f for f, v in (("--attention-backend", req.attention_backend), ("--block-size", req.block_size)) if v]
    if as_json:
        return print_json(view.attention_free_to_dict(expl, section, ignored))
    console = stdout_console()
    console.print(model_line(section), markup=False)
    view.render_attention_free(expl, section, ignored, console)


def _output(expl, model_section: Optional[dict], as_json: bool) -> None:
    from attnsel.reports.explain_report import explanation_to_dict, render_explanation

    if as_json:
        doc = explanation_to_dict(expl)
        if model_section is not None:
            doc["model"] = model_section
        print_json(doc)
        return
    console = stdout_console()
    if model_section is not None:
        console.print(model_line(model_section), markup=False)
        for line in model_section["warnings"] + model_section["infos"]:
            console.print(f"  vLLM: {line}", markup=False)
    render_explanation(expl, console)
    if model_section is not None and model_section.get("vit"):
        vit = model_section["vit"]
        if vit["error"]:
            console.print(f"ViT attention: vLLM raises AssertionError: {vit['error']}", markup=False)
        else:
            console.print(f"ViT attention backend: {vit['backend']} (head size {vit['head_size']}, {vit['dtype']})")
    sys.stdout.flush()
