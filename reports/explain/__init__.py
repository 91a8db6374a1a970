"""Rendering `explain` answers: the backend table, hybrid and attention-free sections, release history."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.reports.explain.attention_free import attention_free_line
    from attnsel.reports.explain.history import history_to_dict, render_history
    from attnsel.reports.explain.table import (
        explanation_to_dict,
        explanation_with_model_to_dict,
        live_report_to_dict,
        matrix_to_dict,
        render_explanation_with_model,
        render_live_report,
        render_matrix,
    )

__all__ = [
    "attention_free_line",
    "explanation_to_dict",
    "explanation_with_model_to_dict",
    "history_to_dict",
    "live_report_to_dict",
    "matrix_to_dict",
    "render_explanation_with_model",
    "render_history",
    "render_live_report",
    "render_matrix",
]
__getattr__ = lazy_door(__name__, {
    "attention_free_line": "attention_free",
    "explanation_to_dict": "table",
    "explanation_with_model_to_dict": "table",
    "history_to_dict": "history",
    "live_report_to_dict": "table",
    "matrix_to_dict": "table",
    "render_explanation_with_model": "table",
    "render_history": "history",
    "render_live_report": "table",
    "render_matrix": "table",
})
