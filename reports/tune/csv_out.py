"""CSV that opens in a spreadsheet: one header line, one line per result row (or per backend for
an explain answer), plain numbers (ms, TB/s, % of peak), UTF-8, no index column."""

from __future__ import annotations

import pandas as pd

from attnsel.errors import UserInputError
from attnsel.reports.tune import frames as F
from attnsel.reports.tune.loaders import ReportData


def render(data: ReportData) -> str:
    """Tune rows when a tune result is given (explain answers and a verify result are then left
    out: one table per file); else one line per engine x shape of a verify result; otherwise the
    backends of every explain answer, one line each."""
    if data.tune is not None:
        return _to_csv(F.rows_frame(data.tune))
    if data.verify is not None:
        from attnsel.reports import verify_report

        return _to_csv(pd.DataFrame(verify_report.csv_records(data.verify), columns=list(verify_report.CSV_COLUMNS)))
    if data.explains:
        frames = []
        for doc in data.explains:
            frame = F.explain_frame(doc)
            gpu = doc.get("gpu") or {}
            frame.insert(0, "capability", gpu.get("capability"))
            frame.insert(0, "gpu", gpu.get("name"))
            frame["vllm_error"] = doc.get("error")
            frames.append(frame)
        return _to_csv(pd.concat(frames, ignore_index=True))
    raise UserInputError("nothing to write as CSV: pass a tune result or an explain --json answer")


def _to_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, lineterminator="\n", float_format="%.6g")
