"""What `attnsel report` accepts, checked once before anything renders: the fields the renderers
read, with their types. A results row with a block size of "x", a tune.json whose environment is
a string, an explain answer without its backends: one line naming the file and the field, exit 2,
never a traceback and never a garbage row rendered as a result.

Fields nobody renders may hold anything (future versions add fields); a field that is read must
have its type or be absent/null. tune.json, its rows and verify.json are checked against their
typed records (bench/tune/records.py, bench/verify/records.py): the one description of those
formats; an explain answer against the schema below, after reports/explain/table.py.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from types import MappingProxyType, UnionType
from typing import Any, TypeGuard, Union

from attnsel.attention.model import kind_of
from attnsel.bench.tune import Record, ResultRow, TuneDocument
from attnsel.bench.verify import VerifyDocument
from attnsel.errors import UserInputError

Check = Callable[[object, str], None]


class _Bad(Exception):
    def __init__(self, path: str, expected: str, value: object):
        super().__init__(path)
        self.path, self.expected, self.value = path, expected, value


def _type(expected: str, test: Callable[[object], bool]) -> Check:
    def check(value: object, path: str) -> None:
        if not test(value):
            raise _Bad(path, expected, value)
    return check


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: object) -> TypeGuard[int | float]:
    # RFC 8259 has no NaN or infinity (a document attnsel writes never holds one: "not measured" is
    # null or absent), and a whole number must fit a float (a 401-digit median is damage, not a time)
    if isinstance(v, int) and not isinstance(v, bool):
        return v.bit_length() <= 1000
    return isinstance(v, float) and math.isfinite(v)


STR = _type("a string", lambda v: isinstance(v, str))
INT = _type("a whole number", _is_int)
POS_INT = _type("a positive whole number", lambda v: _is_int(v) and v > 0)
NUM = _type("a finite number", _is_num)
TIME = _type("a finite number above 0", lambda v: _is_num(v) and v > 0)
BOOL = _type("true or false", lambda v: isinstance(v, bool))
SCALAR = _type("a string or a number", lambda v: isinstance(v, (str, int, float)))


def opt(check: Check) -> Check:
    def optional(value: object, path: str) -> None:
        if value is not None:
            check(value, path)
    return optional


def list_of(check: Check) -> Check:
    def each(value: object, path: str) -> None:
        if not isinstance(value, list):
            raise _Bad(path, "a list", value)
        for i, item in enumerate(value):
            check(item, f"{path}[{i}]")
    return each


def map_of(check: Check) -> Check:
    def each(value: object, path: str) -> None:
        if not isinstance(value, Mapping):
            raise _Bad(path, "an object", value)
        for key, item in value.items():
            check(item, f"{path}.{key}")
    return each


def one_of(words: tuple[str, ...]) -> Check:
    return _type(f"one of {', '.join(words)}", lambda v: v in words)


def obj(fields: Mapping[str, Check], required: tuple[str, ...] = (),
        required_if: Mapping[str, tuple[str, Any]] = MappingProxyType({})) -> Check:
    def check(value: object, path: str) -> None:
        if not isinstance(value, Mapping):
            raise _Bad(path, "an object", value)
        needed = [*required, *(key for key, (other, word) in required_if.items() if value.get(other) == word)]
        for key in needed:
            if value.get(key) is None:
                raise _Bad(f"{path}.{key}" if path else key, "present", None)
        for key, field_check in fields.items():
            if key in value:
                field_check(value[key], f"{path}.{key}" if path else key)
    return check


# --- tune.json, results.jsonl rows and verify.json: from their records -----------------------------
_SCALARS = {str, int, float}


def check_of(kind: object) -> Check | None:
    """The check a field of this type gets (None: not checked). A record is an object whose
    fields are checked in the order the document writes them, its required ones first."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, UnionType):  # Optional[X] and X | None
        inner = [a for a in args if a is not type(None)]
        check = check_of(inner[0]) if len(inner) == 1 else SCALAR if set(inner) == _SCALARS else None
        return opt(check) if check and type(None) in args else check
    if origin is list:
        return list_of(check_of(args[0]) or _ANYTHING)
    if origin is dict:
        return map_of(check_of(args[1]) or _ANYTHING)
    if not isinstance(kind, type):
        return None
    if issubclass(kind, Record):
        return _record_check(kind)
    if issubclass(kind, (str, Enum)):  # a verdict: a word, whichever attnsel version wrote it
        return STR
    return {bool: BOOL, int: INT, float: NUM}.get(kind)


def _record_check(record: type[Record]) -> Check:
    fields: dict[str, Check] = {}
    needed, needed_if = [], {}
    for key, (_name, kind, metadata) in record.json_fields().items():
        check = POS_INT if metadata.get("positive") else check_of(kind)
        if metadata.get("above_zero"):
            check = opt(TIME)
        if metadata.get("one_of"):
            check = opt(one_of(tuple(metadata["one_of"])))
        if check is not None:
            fields[key] = check
        if metadata.get("required"):
            needed.append(key)
        if metadata.get("required_if"):
            needed_if[key] = tuple(metadata["required_if"])
    return obj(fields, required=tuple(needed), required_if=needed_if)


def _anything(value: object, path: str) -> None:
    pass


_ANYTHING: Check = _anything
ROW = _record_check(ResultRow)
TUNE_DOCUMENT = _record_check(TuneDocument)
VERIFY_DOCUMENT = _record_check(VerifyDocument)

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


def _raise(where: str, bad: _Bad, what: str) -> None:
    shown = repr(bad.value)
    shown = shown if len(shown) <= 50 else shown[:47] + "..."
    if bad.expected == "present":
        raise UserInputError(f"{where}: {bad.path} is missing: {what} looks damaged (hand-edited, or from another tool?)")
    raise UserInputError(f"{where}: {bad.path} must be {bad.expected}, not {kind_of(bad.value)} ({shown}): "
                         f"{what} looks damaged (hand-edited, or from another tool?)")


def _check(schema: Check, value: object, where: str, what: str) -> None:
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
