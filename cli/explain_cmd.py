"""`attnsel explain`: which vLLM attention backends are valid and why, which one vLLM picks, the KV
block size, vLLM's log lines and its exact error. Explicit inputs, a --model config, or both
(explicit flags win). Imports no torch. This module parses and routes: the answers are
attention/explain/answers.py, their rendering reports/explain/table.py.

Exit codes: 0 vLLM would start; 1 vLLM would raise (its message on stderr); 2 bad input.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand

from attnsel.attention.rules import serve_int
from attnsel.cli.common import (
    ATTENTION_CONFIG_DOTTED_FLAG,
    SERVE_NOTE_FLAG,
    dotted_attention_config,
    fail,
    handle_errors,
    print_json,
    rewrite_dotted_attention_config,
    stdout_console,
    with_serve_line,
)
from attnsel.cli.completion import (
    complete_backend,
    complete_gpu,
    complete_model,
    complete_vllm_version,
)
from attnsel.errors import EXIT_FAILED, UserInputError

if TYPE_CHECKING:
    from typer._click.core import Context
    from typer._click.formatting import HelpFormatter

    from attnsel.attention.explain import ModelChoice
    from attnsel.attention.explain.document import ModelSection
    from attnsel.attention.memory import MemoryFlags, MemoryPlan
    from attnsel.attention.rules import Explanation, SelectionContext, SelectorInputs
    from attnsel.attention.selector import SelectionRequest
    from attnsel.attention.versions.choice import ProfileChoice

ATTN_TYPES = ("decoder", "encoder", "encoder_only", "encoder_decoder")
NO_GPU_NOTE = ("No GPU detected on this machine: answered for the GPU families people deploy on; "
               "pick one with --gpu NAME (e.g. --gpu H100) or --capability X.Y")


# --index-topk alone (the model config has index_topk) or --index-topk N (its value): Typer has no
# optional-value options, so `--index-topk N` is rewritten to `--index-topk --index-topk-value N`.
INDEX_TOPK_FLAG = "--index-topk"
INDEX_TOPK_VALUE_FLAG = "--index-topk-value"


WIDE_HELP_COLUMNS = 160  # rich's option table holds explain's longest flag names whole from here (measured)


class _ExplainCommand(TyperCommand):
    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite_dotted_attention_config(rewrite_index_topk(with_serve_line(self, args))))

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        """explain has ~60 flags, many of them long vLLM names (--no-use-trtllm-attention): rich's table
        cuts them at 80 columns, so a narrow terminal gets click's list (each flag whole, its help below
        when the name is long); a wide one keeps the panels."""
        if shutil.get_terminal_size().columns >= WIDE_HELP_COLUMNS:
            return super().format_help(ctx, formatter)
        # click's plain parts, as this command has them: Typer >= 0.29 vendors click (typer._click) and
        # writes the options list itself; the base install has no `click` to import
        for part in (self.format_usage, self.format_help_text, self.format_options, self.format_epilog):
            part(ctx, formatter)
        return None



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


def _parse_index_topk(flag: bool | None, value: str | None) -> int | None:
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


def register(app: typer.Typer) -> None:
    @app.command("explain", cls=_ExplainCommand)
    @handle_errors
    def explain_command(
        model: str | None = typer.Option(None, "--model", "-m", autocompletion=complete_model, help="Model config.json (path, folder or catalog name)."),
        head_size: int | None = typer.Option(None, "--head-size", help="Attention head size."),
        dtype: str | None = typer.Option(None, "--dtype", help="float16|bfloat16|float32 (half, bf16, fp16, fp32, float) or auto."),
        kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help="vLLM --kv-cache-dtype (default auto)."),
        block_size: int | None = typer.Option(None, "--block-size", help="vLLM --block-size (default: vLLM picks)."),
        attention_backend: str | None = typer.Option(None, "--attention-backend", autocompletion=complete_backend, help="vLLM --attention-backend NAME (auto: vLLM's own choice)."),
        attention_config_text: str | None = typer.Option(None, "--attention-config", "-ac", help="vLLM -ac / --attention-config JSON, e.g. '{\"backend\": \"FLASHINFER\"}'; the dotted form --attention-config.backend X works too. Keys attnsel does not model are listed as not checked."),
        attention_config_dotted: str | None = typer.Option(None, ATTENTION_CONFIG_DOTTED_FLAG, hidden=True),
        serve_line_note: str | None = typer.Option(None, SERVE_NOTE_FLAG, hidden=True),
        use_mla: bool | None = typer.Option(None, "--use-mla/--no-use-mla", help="Multi-head latent attention (DeepSeek)."),
        has_sink: bool | None = typer.Option(None, "--has-sink/--no-has-sink", help="Attention sinks (gpt-oss)."),
        use_sparse: bool | None = typer.Option(None, "--use-sparse/--no-use-sparse", help="Sparse MLA (index_topk)."),
        use_mm_prefix: bool | None = typer.Option(None, "--use-mm-prefix/--no-use-mm-prefix", help="Bidirectional multimodal prefix (gemma3)."),
        attn_type: str | None = typer.Option(None, "--attn-type", help="decoder|encoder|encoder_only|encoder_decoder."),
        num_heads: int | None = typer.Option(None, "--num-heads", help="The model's attention heads in total, as in its config and as `attnsel tune` reads them: vLLM runs total // TP per GPU (this flag used to mean heads per GPU)."),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="vLLM --tensor-parallel-size: heads per GPU = total // TP, KV heads per GPU = max(1, KV heads // TP) (fewer KV heads than GPUs are replicated), for --model and --num-heads/--num-kv-heads alike."),
        gpu: str | None = typer.Option(None, "--gpu", autocompletion=complete_gpu, help="GPU name from the built-in table (H100, A100, B200...), or 'all'."),
        capability: str | None = typer.Option(None, "--capability", help="Compute capability X.Y (overrides --gpu's)."),
        qk_nope_head_dim: int | None = typer.Option(None, "--qk-nope-head-dim", help="MLA qk_nope_head_dim (absent = 1, as vLLM reads it)."),
        index_topk: bool | None = typer.Option(None, "--index-topk/--no-index-topk", metavar="[N]", help="Model config has index_topk (vLLM: use_sparse = use_mla and hasattr(hf_config, 'index_topk'), docs/vllm-rules.md §6); --index-topk N also gives its value, which later releases' sparse MLA backends check (FA4 sparse: N % 128 == 0; SM120: N == 2048; docs/vllm-rules.md §9). Default: same as --use-sparse."),
        index_topk_value: str | None = typer.Option(None, INDEX_TOPK_VALUE_FLAG, hidden=True),
        num_kv_heads: int | None = typer.Option(None, "--num-kv-heads", help="The model's KV heads in total (per GPU: max(1, total // TP)). Later vLLM FlashInfer uses TRT-LLM attention, and kernel blocks up to 1024 on CC 10.x, only for GQA (heads != KV heads; docs/vllm-rules.md §9). Default: not GQA."),
        kv_lora_rank: int | None = typer.Option(None, "--kv-lora-rank", help="MLA kv_lora_rank. Later vLLM sparse MLA backends require 512 (FLASHINFER_MLA_SPARSE_SM90, FLASH_ATTN_MLA_SPARSE_FA4 with qk_rope_head_dim 64; docs/vllm-rules.md §9)."),
        rswa: bool = typer.Option(False, "--rswa", help="R-SWA layers (selector input use_rswa): backends without it give 'R-SWA not supported'; FA4 hd256 falls back to FA2 (docs/vllm-rules.md §9)."),
        adaptive_verification: bool = typer.Option(False, "--adaptive-verification", help="Speculative decoding with adaptive verification (selector input use_adaptive_verification): needs backends that support a device-cpu query lens mismatch (docs/vllm-rules.md §9)."),
        flash_attn_version: int | None = typer.Option(None, "--flash-attn-version", help="--attention-config.flash_attn_version (2, 3, 4)."),
        use_trtllm_attention: bool | None = typer.Option(None, "--use-trtllm-attention/--no-use-trtllm-attention", help="attention_config.use_trtllm_attention."),
        batch_invariant: bool = typer.Option(False, "--batch-invariant", help="VLLM_BATCH_INVARIANT=1."),
        flashinfer_cubin: bool = typer.Option(True, "--flashinfer-cubin/--no-flashinfer-cubin", help="FlashInfer cubins reachable (has_nvidia_artifactory)."),
        hybrid: bool | None = typer.Option(None, "--hybrid/--no-hybrid", help="Attention + Mamba hybrid model."),
        mamba_cache_float32: bool | None = typer.Option(None, "--mamba-cache-float32/--no-mamba-cache-float32", help="Hybrid model with float32 Mamba cache."),
        enable_prefix_caching: bool | None = typer.Option(None, "--enable-prefix-caching/--no-enable-prefix-caching", help="vLLM's prefix caching flag (hybrid models: decides the Mamba cache mode; default: vLLM's for the version)."),
        mamba_cache_mode: str | None = typer.Option(None, "--mamba-cache-mode", help="vLLM --mamba-cache-mode (0.24: all, align, none; 0.33: align, none, parsed but without effect)."),
        mamba_ssm_cache_dtype: str | None = typer.Option(None, "--mamba-ssm-cache-dtype", help="vLLM --mamba-ssm-cache-dtype (auto, float32, float16; bfloat16 from 0.24)."),
        mamba_cache_dtype: str | None = typer.Option(None, "--mamba-cache-dtype", help="vLLM --mamba-cache-dtype (the Mamba conv state; same values)."),
        mm_encoder_attn_backend: str | None = typer.Option(None, "--mm-encoder-attn-backend", help="ViT backend override (with --model)."),
        check_imports: bool = typer.Option(False, "--check-imports", help="Treat packages missing HERE as missing (vLLM's ImportError)."),
        vllm_version: str | None = typer.Option(None, "--vllm-version", autocompletion=complete_vllm_version, help="vLLM version (or profile name) to answer for, or 'all': how the verdict changed release by release. Default: the vLLM installed here, else the newest profile."),
        sliding_window: bool | None = typer.Option(None, "--sliding-window/--no-sliding-window", help="Sliding-window attention layers (selector input in later releases; default: from the model's sliding_window)."),
        non_causal: bool = typer.Option(False, "--non-causal", help="Non-causal (bidirectional) decoder attention (selector input in later releases)."),
        kv_connector: bool = typer.Option(False, "--kv-connector", help="A KV connector is configured (--kv-transfer-config; selector input in later releases)."),
        dcp: int = typer.Option(1, "--decode-context-parallel-size", "-dcp", "--dcp", help="vLLM --decode-context-parallel-size / -dcp (selector input in later releases: DCP when > 1)."),
        pcp: int = typer.Option(1, "--prefill-context-parallel-size", "-pcp", "--pcp", help="vLLM --prefill-context-parallel-size / -pcp (selector input in later releases: PCP when > 1)."),
        per_head_quant_scales: bool = typer.Option(False, "--per-head-quant-scales", help="Per-head KV quant scales (kv_cache_scheme strategy attn_head)."),
        calibrated_q_scale: bool | None = typer.Option(None, "--calibrated-q-scale/--no-calibrated-q-scale", help="The checkpoint carries q scales, so the attention layers' q_scale is not 1.0 (default: possible when the model config names KV-cache scales). Known vLLM faults of the release that need it are reported."),
        qk_rope_head_dim: int | None = typer.Option(None, "--qk-rope-head-dim", help="MLA qk_rope_head_dim (TOKENSPEED_MLA / sparse MLA rules of later releases)."),
        v_head_dim: int | None = typer.Option(None, "--v-head-dim", help="MLA v_head_dim (TOKENSPEED_MLA rule of later releases)."),
        live: bool = typer.Option(False, "--live", help="Ask the vLLM installed here (its own selector) instead of a rule profile."),
        compare_live: bool = typer.Option(False, "--compare-live", help="Show where the rule profile and the installed vLLM disagree (exit 1 if they do)."),
        as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
        max_model_len: str | None = typer.Option(None, "--max-model-len", help="vLLM --max-model-len for the memory plan (--model and --gpu; default: the config's), spelled as vLLM takes it: 32768, 32k, 32K, 25.6k, or auto / -1 (the longest that fits)."),
        gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization", help="vLLM --gpu-memory-utilization for the memory plan (default: the release's: 0.92; 1.0 with 0.34's extensible KV cache)."),
        pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", help="vLLM --pipeline-parallel-size for the memory plan (the busiest stage's layers per GPU)."),
        max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="vLLM --max-num-seqs for the memory plan (default: vLLM's for the GPU)."),
        max_num_batched_tokens: str | None = typer.Option(None, "--max-num-batched-tokens", help="vLLM --max-num-batched-tokens for the memory plan: 8192, 8k, 8K (default: vLLM's for the GPU)."),
        quantization: str | None = typer.Option(None, "--quantization", help="vLLM --quantization for the memory plan (default: the config's; -q is attnsel's --quiet, vLLM's -q only inside a pasted serve line)."),
        enforce_eager: bool = typer.Option(False, "--enforce-eager", help="vLLM --enforce-eager for the memory plan (no CUDA graphs)."),
        allow_deprecated_quantization: bool = typer.Option(False, "--allow-deprecated-quantization", help="vLLM --allow-deprecated-quantization for the memory plan (fbgemm_fp8 then starts with a warning)."),
    ) -> None:
        """Which vLLM attention backend runs, why the others don't, the KV block size, vLLM's exact messages.
    A pasted `vllm serve` line after `--` is read as vLLM reads it (`-q` there is vLLM's --quantization)."""
        from attnsel.attention.explain import model_choice
        from attnsel.attention.memory import MemoryFlags, check_memory_flags
        from attnsel.attention.model import (
            check_hybrid_flags,
            check_parallel,
            check_request,
        )
        from attnsel.attention.rules import attention_flags
        from attnsel.attention.selector import SelectionRequest
        from attnsel.cli.explain_history import wants_history

        _check_flags(attn_type, gpu, vllm_version, mm_encoder_attn_backend, asks_installed_vllm=live or compare_live)
        if check_imports:
            from attnsel.attention.rules import require_vllm_package

            require_vllm_package()  # exit 3: without vLLM every backend would be a ModuleNotFoundError
        history = wants_history(vllm_version)  # --vllm-version all: every release profile, one GPU
        # history asks each release for its own importable map (run_history), not the default profile's
        route = _route(None if history else vllm_version, check_imports and not history, mm_encoder_attn_backend,
                       live=live, compare_live=compare_live, as_json=as_json)
        check_parallel("--pipeline-parallel-size", pipeline_parallel_size)
        memory_flags = MemoryFlags(max_model_len=serve_int("--max-model-len", max_model_len),
                                   gpu_memory_utilization=gpu_memory_utilization,
                                   pipeline_parallel_size=pipeline_parallel_size, max_num_seqs=max_num_seqs,
                                   max_num_batched_tokens=serve_int("--max-num-batched-tokens", max_num_batched_tokens),
                                   quantization=quantization, enforce_eager=enforce_eager,
                                   allow_deprecated_quantization=allow_deprecated_quantization)
        check_memory_flags(memory_flags)
        route = dataclasses.replace(route, memory_flags=memory_flags)
        attention = attention_flags(attention_backend, attention_config_text, dotted_attention_config(attention_config_dotted),
                                    flash_attn_version, use_trtllm_attention)
        req = SelectionRequest(
            head_size=head_size, dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size,
            attention_backend=attention.backend,
            notes=(*attention.notes, *((serve_line_note,) if serve_line_note else ())), use_mla=use_mla, has_sink=has_sink, use_sparse=use_sparse,
            use_mm_prefix=use_mm_prefix, attn_type=attn_type.lower() if attn_type else None, num_heads=num_heads,
            tensor_parallel_size=tensor_parallel_size,
            qk_nope_head_dim=qk_nope_head_dim, has_index_topk=index_topk, flash_attn_version=attention.flash_attn_version,
            use_trtllm_attention=attention.use_trtllm_attention, batch_invariant=batch_invariant,
            flashinfer_cubin=flashinfer_cubin, hybrid=hybrid, mamba_cache_float32=mamba_cache_float32,
            sliding_window=sliding_window, non_causal=non_causal, kv_connector=kv_connector, dcp=dcp, pcp=pcp,
            per_head_quant_scales=per_head_quant_scales, rswa=rswa, adaptive_verification=adaptive_verification,
            qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim, num_kv_heads=num_kv_heads,
            kv_lora_rank=kv_lora_rank, index_topk=_parse_index_topk(index_topk, index_topk_value),
            prefix_caching=enable_prefix_caching, mamba_cache_mode=mamba_cache_mode,
            mamba_ssm_cache_dtype=mamba_ssm_cache_dtype, mamba_cache_dtype=mamba_cache_dtype,
            calibrated_q_scale=calibrated_q_scale,
        )
        check_request(req, tensor_parallel_size)
        if not history:
            check_hybrid_flags(req, route.choice.profile)
        request = ExplainRequest(req, tensor_parallel_size, model_choice(model, head_size), gpu, capability, route,
                                 check_imports)
        (_answer_history if history else _answer)(request)


def _check_flags(attn_type: str | None, gpu: str | None, vllm_version: str | None,
                 mm_encoder_attn_backend: str | None, *, asks_installed_vllm: bool) -> None:
    from attnsel.attention.model import check_names

    if attn_type is not None and attn_type.lower() not in ATTN_TYPES:
        raise UserInputError(f"unknown --attn-type {attn_type!r}; use one of {', '.join(ATTN_TYPES)}")
    check_names((("--gpu", gpu), ("--vllm-version", vllm_version), ("--mm-encoder-attn-backend", mm_encoder_attn_backend)))
    if asks_installed_vllm:
        from attnsel.attention.explain import require_vllm

        require_vllm()  # exit 2 without vLLM, before any work


@dataclasses.dataclass(frozen=True)
class _Route:
    """How the answer is asked for and printed: the rule profile, --check-imports,
    --mm-encoder-attn-backend, --live / --compare-live, --json."""

    choice: ProfileChoice  # the version object that answers (select_profile, once) and why it was chosen
    importable: Mapping[str, bool] | None
    vit_override: str | None
    live: bool = False
    compare_live: bool = False
    as_json: bool = False
    memory_flags: MemoryFlags | None = None  # --max-model-len, --gpu-memory-utilization, ...

    @property
    def asks_installed_vllm(self) -> bool:
        return self.live or self.compare_live


@dataclasses.dataclass(frozen=True)
class ExplainRequest:
    """explain's options once parsed and checked: vLLM's selector request, the model config read
    once, the GPU asked about, and the route (with the version object chosen once)."""

    selection: SelectionRequest
    tp: int  # --tensor-parallel-size
    model: ModelChoice | None  # None: flags only (--head-size)
    gpu: str | None  # --gpu NAME or "all"
    capability: str | None  # --capability X.Y
    route: _Route
    check_imports: bool = False  # --check-imports (--vllm-version all asks each release for its own map)


def _route(vllm_version: str | None, check_imports: bool, vit_override: str | None, *, live: bool,
           compare_live: bool, as_json: bool) -> _Route:
    from attnsel.attention.rules import importable_map
    from attnsel.attention.versions import select_profile

    choice = select_profile(vllm_version)
    importable = importable_map(choice.profile) if check_imports else None
    if vit_override is not None:
        choice.profile.resolve_backend_name(vit_override)  # a name vLLM knows, even without a ViT
    return _Route(choice, importable, vit_override, live=live, compare_live=compare_live, as_json=as_json)


def _answer_history(request: ExplainRequest) -> None:
    from attnsel.attention.explain import model_doc, resolve_gpu
    from attnsel.cli.explain_history import run_history

    route, model = request.route, request.model
    if route.asks_installed_vllm or (request.gpu or "").strip().lower() == "all":
        raise UserInputError("--vllm-version all takes one GPU and no --live / --compare-live")
    run_history(request.selection, request.tp, model, resolve_gpu(request.gpu, request.capability),
                request.check_imports, route.as_json, model_doc(model, model.config if model is not None else None),
                route.memory_flags)


def _answer(request: ExplainRequest) -> None:
    """--gpu all, or no GPU here and none named: every GPU family; else the one GPU."""
    from attnsel.attention.explain import resolve_gpu

    route = request.route
    if request.gpu is not None and request.gpu.strip().lower() == "all":
        if route.asks_installed_vllm:
            raise UserInputError("--gpu all does not combine with --live or --compare-live (one GPU: this one)")
        _run_matrix(request)
        return
    resolved = resolve_gpu(request.gpu, request.capability)
    if resolved is None:  # a laptop or CI runner: answer for the GPU families people deploy on
        if route.asks_installed_vllm:
            raise UserInputError("no GPU detected on this machine: --live and --compare-live ask this GPU")
        _run_matrix(request, header_notes=(NO_GPU_NOTE,))
        return
    gpu_name, cc = resolved
    _answer_one_gpu(request, gpu_name, cc)


def _answer_one_gpu(request: ExplainRequest, gpu_name: str | None, cc: tuple[int, int]) -> None:
    from attnsel.attention.explain import explain_gpu, model_section

    req, model, route = request.selection, request.model, request.route
    answer = explain_gpu(req, request.tp, model, gpu_name, cc, route.choice, route.importable, route.memory_flags)
    expl, facts = answer.explanation, answer.facts
    if route.asks_installed_vllm:
        _run_live(answer.selector_answer, answer.inputs, answer.ctx, route.compare_live, route.as_json)
        return
    section = model_section(model, facts, route.choice.profile, cc, route.vit_override, route.importable)
    if facts is not None and facts.is_attention_free and section is not None:  # a section wherever facts are
        _output_attention_free(expl, section, req, route.as_json)
        return
    _output(expl, section, route.as_json, answer.memory, answer.memory_note)
    if expl.error is not None:
        raise fail(f"vLLM would raise {expl.error_type}: {expl.error}", EXIT_FAILED)


def _run_matrix(request: ExplainRequest, header_notes: tuple[str, ...] = ()) -> None:
    from attnsel.attention.explain import explain_matrix
    from attnsel.reports.explain import matrix_to_dict, render_matrix

    route = request.route
    matrix = explain_matrix(request.selection, request.tp, request.model, route.choice, route.importable,
                            route.memory_flags)
    profile = route.choice.profile
    if matrix.attention_free:
        from attnsel.reports.explain import attention_free_line

        header_notes = (*header_notes, attention_free_line(matrix.model))
    if route.as_json:
        print_json(matrix_to_dict(matrix.rows, model=matrix.model, profile=profile, notes=header_notes))
    else:
        render_matrix(matrix.rows, stdout_console(), model=matrix.model, profile=profile, notes=header_notes)


def _run_live(expl: Explanation, inputs: SelectorInputs, ctx: SelectionContext, compare_live: bool,
              as_json: bool) -> None:
    """--live: vLLM's own answer in the explain format; --compare-live: where the profile differs."""
    from attnsel.attention.explain import ask_vllm, compare
    from attnsel.reports.explain import live_report_to_dict, render_live_report

    answer = ask_vllm(inputs, ctx)
    mismatches = compare(expl, answer) if compare_live else None
    if as_json:
        print_json(live_report_to_dict(answer, expl, mismatches))
    else:
        render_live_report(answer, expl, mismatches, stdout_console())
    if mismatches:
        raise fail(f"rule profile {expl.profile} and vLLM {answer.vllm_version} disagree in {len(mismatches)} place(s)", EXIT_FAILED)
    if not compare_live and answer.error is not None:
        raise fail(f"vLLM raises: {answer.error}", EXIT_FAILED)


def _output_attention_free(expl: Explanation, section: ModelSection, req: SelectionRequest, as_json: bool) -> None:
    """Mamba and other attention-free models: no backend table (there are no attention layers)."""
    from attnsel.attention.explain import ignored_flags
    from attnsel.reports.explain import attention_free as view

    ignored = ignored_flags(req)
    if as_json:
        return print_json(view.attention_free_to_dict(expl, section, ignored))
    view.render_attention_free(expl, section, ignored, stdout_console())


def _output(expl: Explanation, model_section: ModelSection | None, as_json: bool, memory: MemoryPlan | None = None,
            memory_note: str | None = None) -> None:
    from attnsel.reports.explain import (
        explanation_with_model_to_dict,
        render_explanation_with_model,
    )

    if as_json:
        print_json(explanation_with_model_to_dict(expl, model_section, memory, memory_note))
        return
    render_explanation_with_model(expl, model_section, stdout_console(), memory, memory_note)
    sys.stdout.flush()
