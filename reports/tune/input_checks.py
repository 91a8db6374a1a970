"""What `attnsel report` accepts, checked once before anything renders: the fields the renderers
read, with their types. A results row with a block size of "x", a tune.json whose environment is
a string, an explain answer without its backends: one line naming the file and the field, exit 2,
never a traceback and never a garbage row rendered as a result.

Fields nobody renders may hold anything (future versions add fields); a field that is read must
have its type or be absent/null. The schema follows what bench/sweep/results.py, bench/tune/document.py and
reports/explain/table.py write.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from attnsel.attention.model import kind_of
from attnsel.errors import UserInputError

Check = Callable[[Any, str], None]


class _Bad(Exception):
    def __init__(self, path: str, expected: str, value: Any):
        super().__init__(path)
        self.path, self.expected, self.value = path, expected, value


def _type(expected: str, test: Callable[[Any], bool]) -> Check:
    def check(value: Any, path: str) -> None:
        if not test(value):
            raise _Bad(path, expected, value)
    return check


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    # NaN is how a float "not measured" round-trips through JSON; infinities are no measurement
    return _is_int(v) or (isinstance(v, float) and not math.isinf(v))


STR = _type("a string", lambda v: isinstance(v, str))
INT = _type("a whole number", _is_int)
POS_INT = _type("a positive whole number", lambda v: _is_int(v) and v > 0)
NUM = _type("a finite number", _is_num)
BOOL = _type("true or false", lambda v: isinstance(v, bool))
SCALAR = _type("a string or a number", lambda v: isinstance(v, (str, int, float)))


def opt(check: Check) -> Check:
    def optional(value: Any, path: str) -> None:
        if value is not None:
            check(value, path)
    return optional


def list_of(check: Check) -> Check:
    def each(value: Any, path: str) -> None:
        if not isinstance(value, list):
            raise _Bad(path, "a list", value)
        for i, item in enumerate(value):
            check(item, f"{path}[{i}]")
    return each


def map_of(check: Check) -> Check:
    def each(value: Any, path: str) -> None:
        if not isinstance(value, Mapping):
            raise _Bad(path, "an object", value)
        for key, item in value.items():
            check(item, f"{path}.{key}")
    return each


def obj(fields: Mapping[str, Check], required: tuple[str, ...] = ()) -> Check:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, Mapping):
            raise _Bad(path, "an object", value)
        for key in required:
            if value.get(key) is None:
                raise _Bad(f"{path}.{key}" if path else key, "present", None)
        for key, field_check in fields.items():
            if key in value:
                field_check(value[key], f"{path}.{key}" if path else key)
    return check


# --- a results row (bench/sweep/results.py) ---------------------------------------------------------
ROW = obj({
    "backend": STR, "block_size": POS_INT, "status": STR, "key": STR, "kind": opt(STR),
    "workload_label": opt(STR), "error": opt(STR), "adapter": opt(STR), "provider": opt(STR), "mode": opt(STR),
    "dtype": opt(STR), "kv_cache_dtype": opt(STR), "checked": opt(BOOL), "kernel_block_size": opt(INT),
    "workload": opt(obj({"batch": opt(INT), "context_len": opt(INT), "query_len": opt(INT), "kind": opt(STR),
                         "label": opt(STR)})),
    "timing": opt(obj({"median_ms": opt(NUM), "p20_ms": opt(NUM), "p80_ms": opt(NUM), "n": opt(INT),
                       "l2": opt(STR), "mode": opt(STR)})),
    "bandwidth_bytes_per_s": opt(NUM), "pct_of_peak_bandwidth": opt(NUM), "tflops": opt(NUM), "rel_error": opt(NUM),
    "first_call_s": opt(NUM), "peak_memory_bandwidth_bytes_per_s": opt(NUM), "vllm_reasons": opt(list_of(STR)),
}, required=("backend", "block_size", "status"))

_CHOICE = obj({"backend": STR, "block_size": POS_INT, "geomean_ms": opt(NUM)})
_DECISION = obj({
    "scope": opt(STR), "best": opt(_CHOICE), "vllm_default": opt(_CHOICE), "margin_pct": opt(NUM),
    "noise_threshold_pct": opt(NUM), "verdict": opt(STR), "flags": opt(STR), "advice": opt(STR),
})
RECOMMENDATION = obj({"overall": opt(_DECISION), "workloads": opt(map_of(opt(_DECISION))),
                      "vllm_default": opt(_CHOICE)})
PLAN = obj({
    "capability": opt(SCALAR), "gpu": opt(STR), "grid": opt(STR),
    "shape": opt(obj({"model": opt(STR), "tensor_parallel_size": opt(INT), "head_size": opt(INT),
                      "num_q_heads": opt(INT), "num_kv_heads": opt(INT), "dtype": opt(STR),
                      "kv_cache_dtype": opt(STR)})),
    "configs": opt(list_of(obj({"backend": STR, "block_size": POS_INT, "status": opt(STR),
                                "reasons": opt(list_of(STR))}))),
    "vllm_default": opt(obj({"backend": opt(STR), "block_size": opt(INT)})),
})
ENVIRONMENT = obj({
    "gpu": opt(obj({"name": opt(STR), "memory_total_bytes": opt(NUM), "peak_memory_bandwidth_bytes_per_s": opt(NUM),
                    "peak_bandwidth_source": opt(STR), "driver_version": opt(SCALAR),
                    "cuda_driver_version": opt(SCALAR)})),
    "device": opt(obj({"name": opt(STR), "capability": opt(list_of(INT)), "total_memory_bytes": opt(NUM),
                       "torch_cuda": opt(SCALAR), "versions": opt(map_of(opt(SCALAR)))})),
    "versions": opt(map_of(opt(SCALAR))),
})
TUNE_DOCUMENT = obj({
    "rows": list_of(ROW), "recommendation": opt(RECOMMENDATION), "plan": opt(PLAN), "environment": opt(ENVIRONMENT),
    "warnings": opt(list_of(STR)), "_note": opt(STR), "created": opt(STR), "elapsed_s": opt(NUM),
})

# --- an `explain --json` answer (reports/explain/table.py explanation_to_dict) ----------------
_VERDICT = obj({"name": STR, "valid": BOOL, "priority": opt(INT), "reasons": opt(list_of(STR))}, required=("name",))
EXPLAIN_DOCUMENT = obj({
    "backends": list_of(_VERDICT), "explicit_backend": opt(_VERDICT), "selected": opt(STR),
    "inputs": opt(obj({"head_size": opt(INT), "dtype": opt(STR), "kv_cache_dtype": opt(STR),
                       "block_size": opt(INT)})),
    "gpu": opt(obj({"name": opt(STR), "capability": opt(STR)})), "profile": opt(STR),
    "profile_vllm_version": opt(STR), "model": opt(obj({"model_type": opt(STR)})), "block_size": opt(INT),
    "kernel_block_size": opt(INT), "error": opt(STR), "error_type": opt(STR), "warnings": opt(list_of(STR)),
    "vllm_args": opt(list_of(STR)),
}, required=("backends",))


# --- a verify.json (bench/verify/run.py), the fields reports/verify_report.py reads ---------------------
_FIGURE = opt(obj({"median": opt(NUM), "spread": opt(NUM)}))
_ENGINE = obj({"vllm_version": opt(STR), "backend_used": opt(STR), "block_size_used": opt(SCALAR),
               "torch_compile_s": opt(NUM), "compile_cache": opt(STR), "graph_capture_s": opt(NUM),
               "flashinfer_autotune_s": opt(NUM), "kv_cache_tokens": opt(NUM), "num_gpu_blocks": opt(NUM), "cudagraph_mode": opt(STR)})
_SHAPE = obj({"batch": opt(INT), "context": opt(INT), "n1": opt(INT), "n2": opt(INT), "status": opt(STR),
              "error": opt(STR), "label": opt(STR), "requests_fit": opt(NUM), "kernel_ms": opt(NUM),
              "attention_share": opt(NUM),
              "figures": opt(obj({"decode_step_ms": _FIGURE, "output_tokens_per_s": _FIGURE,
                                  "prefill_tokens_per_s": _FIGURE}))})
_CANDIDATE = obj({"short": opt(STR), "name": opt(STR), "status": opt(STR), "error": opt(STR), "start_s": opt(NUM),
                  "roles": opt(list_of(STR)), "engine": opt(_ENGINE), "shapes": opt(list_of(_SHAPE))})
_JUDGED = opt(obj({"margin_pct": opt(NUM), "noise_pct": opt(NUM), "result": opt(STR)}))
_COMPARISON = obj({"short": opt(STR), "candidate": opt(STR), "batch": opt(INT), "context": opt(INT),
                   "missing": opt(STR), "predicted_kernel_margin_pct": opt(NUM), "predicted_source": opt(STR),
                   "expected_step_margin_pct": opt(NUM), "decode": _JUDGED, "end_to_end": _JUDGED,
                   "prefill": _JUDGED}, required=("batch", "context"))
VERIFY_DOCUMENT = obj({
    "candidates": list_of(_CANDIDATE), "comparisons": opt(list_of(_COMPARISON)), "warnings": opt(list_of(STR)),
    "verdict": opt(obj({"verdict": opt(STR), "text": opt(STR), "flags": opt(STR)})),
    "model": opt(obj({"name": opt(STR), "model_type": opt(STR), "attention_layers": opt(SCALAR),
                      "is_hybrid": opt(BOOL), "tensor_parallel_size": opt(SCALAR)})),
    "gpu": opt(obj({"name": opt(STR), "memory_total_bytes": opt(NUM), "memory_used_bytes": opt(NUM)})),
    "vllm": opt(obj({"installed_version": opt(STR), "rule_profile": opt(STR)})),
    "options": obj({"gpu_memory_utilization": opt(NUM), "max_model_len": opt(SCALAR), "repeats": opt(SCALAR)}),
    "tune": opt(obj({"margin_pct": opt(NUM), "verdict": opt(STR), "scope": opt(STR), "source": opt(STR),
                     "flags": opt(STR)})),
}, required=("candidates", "options"))


def _raise(where: str, bad: _Bad, what: str) -> None:
    shown = repr(bad.value)
    shown = shown if len(shown) <= 50 else shown[:47] + "..."
    if bad.expected == "present":
        raise UserInputError(f"{where}: {bad.path} is missing: {what} looks damaged (hand-edited, or from another tool?)")
    raise UserInputError(f"{where}: {bad.path} must be {bad.expected}, not {kind_of(bad.value)} ({shown}): "
                         f"{what} looks damaged (hand-edited, or from another tool?)")


def _check(schema: Check, value: Any, where: str, what: str) -> None:
    try:
        schema(value, "")
    except _Bad as bad:
        _raise(where, bad, what)


def check_tune_document(doc: Mapping, where: str) -> None:
    _check(TUNE_DOCUMENT, doc, where, "the tune result")


def check_rows(rows: list, where: str) -> None:
    """Rows of a results.jsonl: `where` names the file, the message the row (1-based)."""
    for number, row in enumerate(rows, 1):
        _check(ROW, row, f"{where} row {number}", "the results file")


def check_explain_document(doc: Mapping, where: str) -> None:
    _check(EXPLAIN_DOCUMENT, doc, where, "the explain answer")


def check_verify_document(doc: Mapping, where: str) -> None:
    _check(VERIFY_DOCUMENT, doc, where, "the verify result")
