"""`attnsel explain --vllm-version all`: routes one GPU's request through every release profile
(attention/explain/history.py) and renders the history (reports/explain/history.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnsel.attention.rules import importable_map
from attnsel.cli.common import print_json, stdout_console
from attnsel.errors import UserInputError

if TYPE_CHECKING:
    from attnsel.attention.explain import ModelChoice
    from attnsel.attention.explain.document import ModelRef
    from attnsel.attention.memory import MemoryFlags
    from attnsel.attention.selector import SelectionRequest

ALL_VERSIONS = "all"


def wants_history(vllm_version: str | None) -> bool:
    return vllm_version is not None and vllm_version.strip().lower() == ALL_VERSIONS


def run_history(req: SelectionRequest, tensor_parallel_size: int, model: ModelChoice | None,
                resolved: tuple[str | None, tuple[int, int]] | None, check_imports: bool, as_json: bool,
                model_doc: ModelRef | None, memory_flags: MemoryFlags | None = None) -> None:
    """`resolved`: (gpu name, capability) of the one GPU asked about (None: none given or found)."""
    from attnsel.attention.explain import explain_for_release, release_history
    from attnsel.reports.explain import history_to_dict, render_history

    if resolved is None:
        raise UserInputError("--vllm-version all answers for one GPU: pass --gpu NAME or --capability X.Y")
    gpu_name, capability = resolved
    explain_release = explain_for_release(
        req, capability=capability, gpu_name=gpu_name, hf_config=model.config if model is not None else None,
        tensor_parallel_size=tensor_parallel_size, importable_for=importable_map if check_imports else None,
        memory_flags=memory_flags,
    )
    history = release_history(explain_release, capability, gpu_name)
    if as_json:
        print_json(history_to_dict(history, model=model_doc))
        return
    render_history(history, stdout_console(), model=model_doc)
