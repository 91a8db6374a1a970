"""Rendering `explain` answers: the backend table, hybrid and attention-free sections, release history."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
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

__getattr__ = lazy_door(__name__)
