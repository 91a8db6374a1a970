"""`attnsel preflight`: probe + explain for one deployment, as pass/warn/fail checks for CI.

Exit codes: 0 no check failed (warnings allowed); 1 a check failed; 2 bad input (model path,
flags, an unreadable ATTNSEL_NVML_SCENARIO file); 3 (--ray) Ray is not installed or no cluster
answers. GPUs come from NVML; torch.cuda is asked only when NVML is unavailable (as `attnsel
probe` does). With --ray, every node of the cluster is probed (cli/fleet_cmd.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import typer

from attnsel.attention.rules import serve_int
from attnsel.cli.common import (
    ATTENTION_CONFIG_DOTTED_FLAG,
    SERVE_NOTE_FLAG,
    dotted_attention_config,
    handle_errors,
    print_json,
    rewrite_dotted_attention_config,
    terminal_width,
    with_serve_line,
)
from attnsel.cli.completion import (
    complete_backend,
    complete_gpu,
    complete_model,
    complete_vllm_version,
)
from attnsel.cli.fleet_cmd import (
    RAY_HELP,
    TIMEOUT_HELP,
    RayAddressCommand,
    check_ray_flags,
    ray_timeout,
)
from attnsel.errors import UserInputError


class _PreflightCommand(RayAddressCommand):
    """--ray's optional value, and vLLM's dotted `--attention-config.KEY VALUE` (cli/common.py)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite_dotted_attention_config(with_serve_line(self, args)))


def _normalize_format(output_format: str, as_json: bool) -> str:
    from attnsel.reports import FORMATS

    fmt = output_format.strip().lower()
    if fmt not in FORMATS:  # checked with --json too: `--format xml --json` is a typo, not JSON
        raise UserInputError(f"unknown --format {output_format!r}; use one of {', '.join(FORMATS)}")
    if as_json and fmt not in ("json", "text"):
        raise UserInputError(f"--json and --format {fmt} ask for two different outputs: pass one of them")
    return "json" if as_json else fmt


def emit(result, fmt: str, quiet: bool, to_dict: Callable, render_github: Callable, render_text: Callable) -> None:
    """Print a preflight result (one node's or a cluster's) as --format asks; exit 1 if a check failed."""
    from attnsel.attention.preflight import raise_if_failed
    from attnsel.cli import settings

    if fmt == "json":
        print_json(to_dict(result))
    elif fmt == "github":
        render_github(result, sys.stdout, quiet=settings.is_quiet(quiet))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        render_text(result, sys.stdout, quiet=settings.is_quiet(quiet), verbose=settings.is_verbose(), colour=colour,
                    width=terminal_width())
    sys.stdout.flush()
    raise_if_failed(result)


def register(app: typer.Typer) -> None:
    @app.command("preflight", cls=_PreflightCommand)
    @handle_errors
    def preflight(
        model: str = typer.Option(..., "--model", "-m", autocompletion=complete_model, help="Model config.json (file, folder or catalog name such as llama-3.1-8b)."),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="vLLM --tensor-parallel-size."),
        attention_backend: str | None = typer.Option(None, "--attention-backend", autocompletion=complete_backend, help="vLLM --attention-backend NAME (auto: vLLM's own choice)."),
        attention_config_text: str | None = typer.Option(None, "--attention-config", "-ac", help="vLLM -ac / --attention-config JSON (or the dotted --attention-config.backend X): its backend is checked, other keys are listed as not checked."),
        attention_config_dotted: str | None = typer.Option(None, ATTENTION_CONFIG_DOTTED_FLAG, hidden=True),
        serve_line_note: str | None = typer.Option(None, SERVE_NOTE_FLAG, hidden=True),
        dcp: int = typer.Option(1, "--decode-context-parallel-size", "-dcp", help="vLLM -dcp: read by the attention check; its GPU layout and memory are not checked."),
        pcp: int = typer.Option(1, "--prefill-context-parallel-size", "-pcp", help="vLLM -pcp: read by the attention check; its GPU count and memory are not checked."),
        block_size: int | None = typer.Option(None, "--block-size", help="vLLM --block-size."),
        kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help="vLLM --kv-cache-dtype (default auto)."),
        dtype: str = typer.Option("auto", "--dtype", help="vLLM --dtype (auto, bfloat16, half, float32...)."),
        gpu: str | None = typer.Option(None, "--gpu", autocompletion=complete_gpu, help="Check a target machine instead of this one: GPU name (H100, A100-80GB, L40S...)."),
        num_gpus: int | None = typer.Option(None, "--num-gpus", help="With --gpu: how many such GPUs the target has (default: the TP size)."),
        strict: bool = typer.Option(False, "--strict", help="Fail on warnings too (exit 1); different GPU models without CUDA_DEVICE_ORDER=PCI_BUS_ID become a failed check."),
        vllm_version: str | None = typer.Option(None, "--vllm-version", autocompletion=complete_vllm_version, help="vLLM version (or rule profile) to check against. Default: the vLLM installed here, else the newest profile."),
        output_format: str = typer.Option("text", "--format", help="text | json | github (GitHub Actions ::error::/::warning:: lines)."),
        as_json: bool = typer.Option(False, "--json", help="Same as --format json: only JSON on stdout."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warn/fail lines (text/github)."),
        ray: str | None = typer.Option(None, "--ray", metavar="[ADDRESS]", help=RAY_HELP),
        pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", help="vLLM --pipeline-parallel-size: stages on this machine (TP x PP GPUs), or with --ray across nodes."),
        timeout: float | None = typer.Option(None, "--timeout", metavar="SECONDS", help=TIMEOUT_HELP),
        gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization", help="vLLM --gpu-memory-utilization (default: vLLM's, 0.9)."),
        max_model_len: str | None = typer.Option(None, "--max-model-len", help="vLLM --max-model-len (default: the config's): 32768, 32k, 32K, 25.6k, or auto / -1 (the longest that fits), as vLLM reads it."),
        max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="vLLM --max-num-seqs (default: vLLM's for the GPU)."),
        max_num_batched_tokens: str | None = typer.Option(None, "--max-num-batched-tokens", help="vLLM --max-num-batched-tokens (default: vLLM's for the GPU): 8192, 8k, 8K as vLLM reads it."),
        quantization: str | None = typer.Option(None, "--quantization", help="vLLM --quantization (default: the config's quantization_config)."),
        enforce_eager: bool = typer.Option(False, "--enforce-eager", help="vLLM --enforce-eager (no CUDA graphs: no graph memory)."),
    ) -> None:
        """Would this vLLM deployment start here, and well? GPU count, one GPU model, NVLink, dtype, attention
        (exit 0: no check failed, warnings allowed; 1: a check failed; 2: bad input). A pasted `vllm serve`
        line after `--` is read as vLLM reads it (`-q` there is vLLM's --quantization)."""
        from attnsel.attention.memory import check_memory_flags
        from attnsel.attention.model import (
            check_names,
            check_parallel,
            check_request,
            load_model_config,
        )
        from attnsel.attention.preflight import (
            Deployment,
            machine_report,
            run_preflight,
        )
        from attnsel.attention.preflight.memory_check import memory_flags
        from attnsel.attention.rules import attention_flags
        from attnsel.attention.versions import select_profile
        from attnsel.cli import settings
        from attnsel.reports import preflight_report as view

        fmt = _normalize_format(output_format, as_json)
        attention = attention_flags(attention_backend, attention_config_text, dotted_attention_config(attention_config_dotted))
        check_names((("--gpu", gpu), ("--vllm-version", vllm_version)))
        check_parallel("--num-gpus", num_gpus)
        check_parallel("--pipeline-parallel-size", pipeline_parallel_size)
        check_parallel("--decode-context-parallel-size", dcp)
        check_parallel("--prefill-context-parallel-size", pcp)
        check_request(Deployment(tensor_parallel_size, attention.backend, block_size, kv_cache_dtype, dtype),
                      tensor_parallel_size)
        check_ray_flags(ray, timeout, pipeline_parallel_size, gpu, num_gpus)
        hf_config = load_model_config(model)
        choice = select_profile(vllm_version)
        deployment = Deployment(
            tensor_parallel_size=tensor_parallel_size,
            attention_backend=attention.backend,
            block_size=block_size,
            kv_cache_dtype=kv_cache_dtype,
            dtype=dtype,
            strict=strict,
            pipeline_parallel_size=pipeline_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=serve_int("--max-model-len", max_model_len),
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=serve_int("--max-num-batched-tokens", max_num_batched_tokens),
            quantization=quantization,
            enforce_eager=enforce_eager,
            decode_context_parallel_size=dcp,
            prefill_context_parallel_size=pcp,
            not_checked=attention.notes,
            serve_line_note=serve_line_note,
        )
        check_memory_flags(memory_flags(deployment))
        if ray is not None:
            run_ray_preflight(ray, timeout, fmt, quiet, deployment, pipeline_parallel_size, hf_config, choice, model)
            return
        report = machine_report(gpu, num_gpus, tensor_parallel_size * pipeline_parallel_size)
        names = ", ".join(dict.fromkeys(g.name for g in report.gpus)) or "none"
        settings.debug(f"preflight: {len(report.gpus)} GPU(s) from {report.source} ({names})")
        result = run_preflight(report, hf_config, deployment, profile=choice.profile, model=model,
                               profile_reason=choice.reason)
        emit(result, fmt, quiet, view.preflight_to_dict, view.render_github, view.render_text)


def run_ray_preflight(address: str, timeout: float | None, fmt: str, quiet: bool, deployment, pipeline_parallel_size,
                  hf_config: dict, choice, model: str) -> None:
    from attnsel.attention.preflight import run_fleet_preflight
    from attnsel.cli import settings
    from attnsel.probe.fleet import probe_fleet
    from attnsel.reports import fleet_report as view

    fleet = probe_fleet(address, ray_timeout(timeout))
    settings.debug(f"preflight --ray: {len(fleet.nodes)} node(s) in {fleet.elapsed_s:.2f} s")
    result = run_fleet_preflight(fleet, hf_config, deployment, pipeline_parallel_size, profile=choice.profile,
                                 model=model, profile_reason=choice.reason)
    emit(result, fmt, quiet, view.fleet_preflight_json, view.render_preflight_github, view.render_preflight_text)
