"""`attnsel explain`: which vLLM attention backends are valid and why, which one vLLM picks, the KV
block size, vLLM's log lines and its exact error. Explicit inputs, a --model config, or both
(explicit flags win). Imports no torch.

Exit codes: 0 vLLM would start; 1 vLLM would raise (its message on stderr); 2 bad input.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Optional

import typer

from attnsel.cli.common import fail, handle_errors, print_json, stdout_console
from attnsel.errors import EXIT_FAILED, UserInputError

ATTN_TYPES = ("decoder", "encoder", "encoder_only", "encoder_decoder")


def parse_capability(text: str) -> tuple[int, int]:
    """"9.0" / "9" / "sm90" / "90" -> (9, 0)."""
    raw = text.strip().lower().removeprefix("sm_").removeprefix("sm")
    try:
        if "." in raw:
            major, minor = raw.split(".", 1)
            return int(major), int(minor)
        value = int(raw)
    except ValueError:
        raise UserInputError(f"bad --capability {text!r}: use MAJOR.MINOR, e.g. 9.0") from None
    return (value // 10, value % 10) if value >= 10 else (value, 0)


def _detect_gpu() -> tuple[Optional[str], tuple[int, int]]:
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
        raise UserInputError(
            "no GPU detected on this machine; pass --gpu NAME (e.g. --gpu H100, or --gpu all) or --capability X.Y"
        )
    return gpus[0].name, tuple(gpus[0].compute_capability)


def _resolve_gpu(gpu: Optional[str], capability: Optional[str]) -> tuple[Optional[str], tuple[int, int]]:
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


@dataclasses.dataclass
class _Request:
    """Everything the command line gave, before a model config fills the gaps."""

    head_size: Optional[int]
    dtype: Optional[str]
    kv_cache_dtype: Optional[str]
    block_size: Optional[int]
    attention_backend: Optional[str]
    use_mla: Optional[bool]
    has_sink: Optional[bool]
    use_sparse: Optional[bool]
    use_mm_prefix: Optional[bool]
    attn_type: Optional[str]
    num_heads: Optional[int]
    tensor_parallel_size: int
    qk_nope_head_dim: Optional[int]
    index_topk: Optional[bool]
    flash_attn_version: Optional[int]
    use_trtllm_attention: Optional[bool]
    batch_invariant: bool
    flashinfer_cubin: bool
    hybrid: Optional[bool]
    mamba_cache_float32: Optional[bool]
    mm_encoder_attn_backend: Optional[str]
    # vLLM 0.33 selector inputs (vllm-rules §9)
    sliding_window: Optional[bool] = None
    non_causal: bool = False
    kv_connector: bool = False
    dcp: int = 1
    pcp: int = 1
    per_head_quant_scales: bool = False
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None


def _model_facts(model: str, req: _Request, capability, gpu_name, model_rules: str):
    """Hook for the config helper (attention/model_config.py); None when it is not installed."""
    try:
        from attnsel.attention import model_config
    except ImportError:
        raise UserInputError("--model needs attnsel.attention.model_config, which is not available") from None
    hf_config = model_config.load_model_config(model)
    dtype = req.dtype or "auto"
    return model_config.derive_model_facts(
        hf_config,
        capability=capability,
        dtype=dtype,
        tensor_parallel_size=req.tensor_parallel_size,
        gpu_name=gpu_name,
        profile=model_rules,
    )


def _pick(explicit: Any, from_model: Any, default: Any) -> Any:
    if explicit is not None:
        return explicit
    if from_model is not None:
        return from_model
    return default


def _build(req: _Request, facts: Any, capability, gpu_name, importable, profile=None):
    from attnsel.attention.selector import SelectionContext, SelectorInputs, normalize_dtype

    def has_field(name: str) -> bool:
        return profile is None or profile.has_selector_field(name)

    if req.head_size is None and facts is None:
        raise UserInputError("pass --head-size N (or --model PATH)")
    if facts is not None:
        dtype = facts.dtype  # the config helper resolved --dtype (auto included) against the model
    else:
        dtype = normalize_dtype(req.dtype or "auto", capability)
    kv = _pick(req.kv_cache_dtype, getattr(facts, "kv_cache_dtype_forced", None), "auto")
    use_sparse = bool(_pick(req.use_sparse, getattr(facts, "use_sparse", None), False))
    inputs = SelectorInputs(
        head_size=_pick(req.head_size, getattr(facts, "head_size", None), None),
        dtype=dtype,
        kv_cache_dtype=kv,
        block_size=req.block_size,
        use_mla=bool(_pick(req.use_mla, getattr(facts, "use_mla", None), False)),
        has_sink=bool(_pick(req.has_sink, getattr(facts, "has_sink", None), False)),
        use_sparse=use_sparse,
        use_mm_prefix=bool(_pick(req.use_mm_prefix, getattr(facts, "use_mm_prefix", None), False)),
        attn_type=_pick(req.attn_type, getattr(facts, "attn_type", None), "decoder"),
        use_per_head_quant_scales=req.per_head_quant_scales,
        # 0.33 inputs (vllm-rules §9): a config `sliding_window` means sliding-window layers
        has_sliding_window=bool(_pick(req.sliding_window, _has_window(facts), False)),
        use_non_causal=req.non_causal,
        # VLLM_BATCH_INVARIANT is also a selector input from 0.33 on; the seed reads it elsewhere
        use_batch_invariant=req.batch_invariant and has_field("use_batch_invariant"),
        use_kv_connector=req.kv_connector,
        use_dcp=req.dcp > 1,
        use_pcp=req.pcp > 1,
    )
    model_float32 = None
    if facts is not None:
        model_float32 = "float32" in (facts.mamba_ssm_cache_dtype, facts.mamba_cache_dtype)
    ctx = SelectionContext(
        capability=capability,
        num_heads=_pick(req.num_heads, getattr(facts, "num_heads_per_gpu", None), None),
        user_backend=req.attention_backend,
        is_hybrid=bool(_pick(req.hybrid, getattr(facts, "is_hybrid", None), False)),
        is_attention_free=bool(getattr(facts, "is_attention_free", False)),
        mamba_cache_float32=bool(_pick(req.mamba_cache_float32, model_float32, False)),
        qk_nope_head_dim=_pick(req.qk_nope_head_dim, getattr(facts, "qk_nope_head_dim", None), None),
        # vLLM's use_sparse *is* `hasattr(hf_config, "index_topk")` for MLA models (vllm-rules §6)
        has_index_topk=bool(_pick(req.index_topk, getattr(facts, "has_index_topk", None), use_sparse)),
        use_trtllm_attention=req.use_trtllm_attention,
        batch_invariant=req.batch_invariant,
        has_flashinfer_cubin=req.flashinfer_cubin,
        flash_attn_version_override=req.flash_attn_version,
        importable=importable,
        gpu_name=gpu_name,
        qk_rope_head_dim=_pick(req.qk_rope_head_dim, getattr(facts, "qk_rope_head_dim", None), None),
        v_head_dim=_pick(req.v_head_dim, getattr(facts, "v_head_dim", None), None),
        index_topk=getattr(facts, "index_topk", None),
        decode_context_parallel_size=req.dcp,
        prefill_context_parallel_size=req.pcp,
    )
    return inputs, ctx


def _has_window(facts: Any) -> Optional[bool]:
    if facts is None:
        return None
    return getattr(facts, "sliding_window", None) is not None


def _explain_one(profile, inputs, ctx, choice):
    from attnsel.attention.rules import block_size_cli_error
    from attnsel.attention.selector import explain

    expl = explain(profile, inputs, ctx)
    cli_error = block_size_cli_error(profile, inputs.block_size)
    if cli_error is not None:
        expl = dataclasses.replace(expl, error=cli_error, error_type="argparse error", error_phase="cli", selected=None)
    return dataclasses.replace(expl, profile_note=choice.note, profile_reason=choice.reason)


def _model_section(facts: Any, profile, capability, vit_override: Optional[str], importable) -> Optional[dict]:
    if facts is None:
        return None
    section: dict[str, Any] = {
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


def _run_matrix(req: _Request, choice, as_json: bool, importable) -> None:
    from attnsel.probe.gpu_table import families
    from attnsel.reports.explain_report import MatrixRow, matrix_to_dict, render_matrix

    if req.head_size is None:
        raise UserInputError("--gpu all needs --head-size N (the matrix uses explicit inputs)")
    rows = []
    for family, spec in families():
        inputs, ctx = _build(req, None, spec.compute_capability, spec.name, importable, choice.profile)
        rows.append(MatrixRow(family, spec.key, _explain_one(choice.profile, inputs, ctx, choice)))
    if as_json:
        print_json(matrix_to_dict(rows))
    else:
        render_matrix(rows, stdout_console())


def register(app: typer.Typer) -> None:
    @app.command("explain")
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
        index_topk: Optional[bool] = typer.Option(None, "--index-topk/--no-index-topk", help="Model config has index_topk (default: same as --use-sparse)."),
        flash_attn_version: Optional[int] = typer.Option(None, "--flash-attn-version", help="--attention-config.flash_attn_version (2, 3, 4)."),
        use_trtllm_attention: Optional[bool] = typer.Option(None, "--use-trtllm-attention/--no-use-trtllm-attention", help="attention_config.use_trtllm_attention."),
        batch_invariant: bool = typer.Option(False, "--batch-invariant", help="VLLM_BATCH_INVARIANT=1."),
        flashinfer_cubin: bool = typer.Option(True, "--flashinfer-cubin/--no-flashinfer-cubin", help="FlashInfer cubins reachable (has_nvidia_artifactory)."),
        hybrid: Optional[bool] = typer.Option(None, "--hybrid/--no-hybrid", help="Attention + Mamba hybrid model."),
        mamba_cache_float32: Optional[bool] = typer.Option(None, "--mamba-cache-float32/--no-mamba-cache-float32", help="Hybrid model with float32 Mamba cache."),
        mm_encoder_attn_backend: Optional[str] = typer.Option(None, "--mm-encoder-attn-backend", help="ViT backend override (with --model)."),
        check_imports: bool = typer.Option(False, "--check-imports", help="Treat packages missing HERE as missing (vLLM's ImportError)."),
        vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="vLLM version (or profile name) to answer for. Default: the vLLM installed here, else the newest profile."),
        sliding_window: Optional[bool] = typer.Option(None, "--sliding-window/--no-sliding-window", help="Sliding-window attention layers (0.33 input; default: from the model's sliding_window)."),
        non_causal: bool = typer.Option(False, "--non-causal", help="Non-causal (bidirectional) decoder attention (0.33 input)."),
        kv_connector: bool = typer.Option(False, "--kv-connector", help="A KV connector is configured (--kv-transfer-config; 0.33 input)."),
        dcp: int = typer.Option(1, "--dcp", help="--decode-context-parallel-size (0.33 input: DCP when > 1)."),
        pcp: int = typer.Option(1, "--pcp", help="--prefill-context-parallel-size (0.33 input: PCP when > 1)."),
        per_head_quant_scales: bool = typer.Option(False, "--per-head-quant-scales", help="Per-head KV quant scales (kv_cache_scheme strategy attn_head)."),
        qk_rope_head_dim: Optional[int] = typer.Option(None, "--qk-rope-head-dim", help="MLA qk_rope_head_dim (0.33 TOKENSPEED_MLA / sparse rules)."),
        v_head_dim: Optional[int] = typer.Option(None, "--v-head-dim", help="MLA v_head_dim (0.33 TOKENSPEED_MLA rule)."),
        live: bool = typer.Option(False, "--live", help="Ask the vLLM installed here (its own selector) instead of a rule profile."),
        compare_live: bool = typer.Option(False, "--compare-live", help="Show where the rule profile and the installed vLLM disagree (exit 1 if they do)."),
        as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    ) -> None:
        """Which vLLM attention backend runs, why the others don't, the KV block size, vLLM's exact messages."""
        from attnsel.attention.rules import importable_map, select_profile

        if attn_type is not None and attn_type.lower() not in ATTN_TYPES:
            raise UserInputError(f"unknown --attn-type {attn_type!r}; use one of {', '.join(ATTN_TYPES)}")
        for flag, value in (("--dcp", dcp), ("--pcp", pcp), ("--tensor-parallel-size", tensor_parallel_size)):
            if value < 1:
                raise UserInputError(f"{flag} must be >= 1")
        if live or compare_live:
            from attnsel.attention.live import require_vllm

            require_vllm()  # exit 2 without vLLM, before any work
        choice = select_profile(vllm_version)
        profile = choice.profile
        importable = importable_map(profile) if check_imports else None
        req = _Request(
            head_size, dtype, kv_cache_dtype, block_size, attention_backend, use_mla, has_sink, use_sparse,
            use_mm_prefix, attn_type.lower() if attn_type else None, num_heads, tensor_parallel_size,
            qk_nope_head_dim, index_topk, flash_attn_version, use_trtllm_attention, batch_invariant,
            flashinfer_cubin, hybrid, mamba_cache_float32, mm_encoder_attn_backend,
            sliding_window=sliding_window, non_causal=non_causal, kv_connector=kv_connector, dcp=dcp, pcp=pcp,
            per_head_quant_scales=per_head_quant_scales, qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim,
        )
        if gpu is not None and gpu.strip().lower() == "all":
            if model is not None or live or compare_live:
                raise UserInputError("--gpu all works with explicit inputs only (not --model, --live or --compare-live)")
            _run_matrix(req, choice, as_json, importable)
            return
        gpu_name, cc = _resolve_gpu(gpu, capability)
        facts = _model_facts(model, req, cc, gpu_name, profile.data.get("model_rules", "seed")) if model else None
        inputs, ctx = _build(req, facts, cc, gpu_name, importable, profile)
        expl = _explain_one(profile, inputs, ctx, choice)
        if live or compare_live:
            _run_live(expl, inputs, ctx, compare_live, as_json)
            return
        model_section = _model_section(facts, profile, cc, mm_encoder_attn_backend, importable)
        _output(expl, model_section, as_json)
        if expl.error is not None:
            raise fail(f"vLLM would raise {expl.error_type}: {expl.error}", EXIT_FAILED)


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
        console.print(f"Model: {model_section['model_type']}")
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
