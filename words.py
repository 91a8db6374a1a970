"""The words attnsel writes into its documents (verdicts, judgements): one base for their enums.

A `Word` member is its word: str-valued, so a JSON document holds the same text it always did
(`Verdict.FASTER == "faster"`), it prints as that word in f-strings and str() (as Python 3.11's
StrEnum does, on 3.10 too), and `read` turns a saved word back into a member, or None for a word
this version does not know (a document written by another version of attnsel).
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

W = TypeVar("W", bound="Word")


class Word(str, Enum):
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def read(cls: type[W], word: object) -> W | None:
        """The member a saved document names; None for a word this version does not know."""
        try:
            return cls(word)
        except ValueError:
            return None
