"""The typed records attnsel's JSON documents are read and written as (tune's result rows and
tune.json, verify.json): a dataclass read with `from_dict` and written back with `to_dict`, byte
for byte. A field keeps its place in the object, a field this version does not know is kept as it
was (documents from newer attnsel versions add fields), and an absent field stays absent (absent
and null are not the same to a reader of the file). The field types are the one description of a
format: reports/tune/input_checks.py derives what `attnsel report` accepts from them. Metadata on
a field: "key" (its JSON name where that is no Python name), "required" (it must be present and
not null), "positive" (a whole number above 0), "above_zero" (a number above 0: a time; "not
measured" is null), "one_of" (the words it may hold), "required_if" ((key, value): required when
the record's key holds value).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import UnionType
from typing import Any, ClassVar, TypeVar, Union

Scalar = str | int | float  # a version or a capability: "9.0", 12.4, 550
R = TypeVar("R", bound="Record")


def required_field(**metadata: Any) -> Any:
    return field(default=None, metadata={"required": True, **metadata})


def positive_field(**metadata: Any) -> Any:
    return field(default=None, metadata={"positive": True, **metadata})


def renamed_field(name: str) -> Any:
    return field(default=None, metadata={"key": name})


def absent_field() -> Any:
    """A field that is never null in a document, though it may be absent (then None here)."""
    return field(default=None)


@dataclass
class Record:
    """The base of every record: the JSON keys in their order, and the keys this version does not know."""

    _keys: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)
    _unknown: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _types: ClassVar[dict[type, dict]] = {}
    _readers: ClassVar[dict[type, dict]] = {}
    # A record built in code (not read from a file) writes its keys in this order (None: the
    # fields' order), leaving out the keys of `written_if_set` while they hold None.
    written_order: ClassVar[tuple[str, ...] | None] = None
    written_if_set: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def json_fields(cls) -> dict[str, tuple[str, Any, Mapping]]:
        """JSON key -> (attribute, type, metadata), in the order the document writes them."""
        if cls not in Record._types:
            hints = typing.get_type_hints(cls)
            Record._types[cls] = {f.metadata.get("key", f.name): (f.name, hints[f.name], f.metadata)
                                  for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        return Record._types[cls]

    @classmethod
    def from_dict(cls: type[R], data: Mapping) -> R:
        readers = Record._readers.get(cls)
        if readers is None:  # worked out once per record type: a sweep's tune.json holds thousands of rows
            fields = cls.json_fields().items()
            readers = Record._readers[cls] = {k: (name, _reader(kind)) for k, (name, kind, _m) in fields}
        values, unknown = {}, {}
        for key, value in data.items():
            if key in readers:
                name, read = readers[key]
                values[name] = value if read is None else read(value)
            else:
                unknown[key] = value
        record = cls(**values)
        record._keys, record._unknown = tuple(data), unknown
        return record

    @classmethod
    def new(cls: type[R], **values: object) -> R:
        """A record built in code that writes the keys given, in this order, and then each field set
        later, in the order they are set (as a dict would): a result row as the worker builds it."""
        names = {key: name for key, (name, _kind, _m) in cls.json_fields().items()}
        record = cls(**{names[key]: value for key, value in values.items()})
        record._keys = tuple(values)
        return record

    def __setattr__(self, name: str, value: object) -> None:
        """A field set on a record that tracks its keys (read from a file, or `new`) is written from
        then on, after the keys it had."""
        object.__setattr__(self, name, value)
        keys = self.__dict__.get("_keys")
        if keys is not None and not name.startswith("_"):
            key = self._key_of(name)
            if key not in keys:
                object.__setattr__(self, "_keys", (*keys, key))

    @classmethod
    def _key_of(cls, name: str) -> str:
        for key, (attribute, _kind, _metadata) in cls.json_fields().items():
            if attribute == name:
                return key
        raise AttributeError(f"{cls.__name__} has no field {name}")

    def __bool__(self) -> bool:
        """A record read from an empty object is as falsy as that object (`record or default`
        reads like the `.get(key) or {}` it replaces); one built in code is true."""
        return self._keys is None or bool(self._keys)

    def to_dict(self) -> dict:
        known = self.json_fields()
        keys = self._keys if self._keys is not None else self._written_keys()
        return {k: _write(getattr(self, known[k][0])) if k in known else self._unknown[k] for k in keys}

    def _written_keys(self) -> tuple[str, ...]:
        known = self.json_fields()
        return tuple(k for k in self.written_order or tuple(known)
                     if k not in self.written_if_set or getattr(self, known[k][0]) is not None)


def _reader(kind: Any) -> Callable[[Any], Any] | None:
    """How a JSON value becomes a field of type `kind` (None: as it is): a record from its object, a
    verdict from its word, lists and maps item by item. A value of another shape stays as it is:
    the input checks decide what a report refuses, and a record never loses what the file held."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, UnionType):  # Optional[X] and X | None
        inner = [a for a in args if a is not type(None)]
        return _reader(inner[0]) if len(inner) == 1 else None
    if isinstance(kind, type) and issubclass(kind, Record):
        return lambda value: kind.from_dict(value) if isinstance(value, Mapping) else value
    if isinstance(kind, type) and issubclass(kind, Enum):
        words = {member.value: member for member in kind}
        return lambda value: words.get(value, value) if isinstance(value, str) else value  # a newer word stays a word
    item = _reader(args[-1]) if origin in (list, dict) else None
    if item is None:
        return None
    if origin is list:
        return lambda value: [item(v) for v in value] if isinstance(value, list) else value
    return lambda value: {k: item(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def _write(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_write(v) for v in value]
    if isinstance(value, dict):
        return {k: _write(v) for k, v in value.items()}
    return value


def time_field(**metadata: Any) -> Any:
    return field(default=None, metadata={"above_zero": True, **metadata})
