"""A closed set of words as an enum that is also the word: levels, source states, GPU statuses.

A member is a `str`, equal to its word and hashed as it, so JSON, Prometheus labels, f-strings
and comparisons with the plain word give the same bytes as the word itself. Python 3.11's
`enum.StrEnum` does this; kvtop runs on 3.10 too. `__str__` and `__format__` are spelled out
because a mixed-in enum formats as `Level.OK` in some versions (3.12 changed `format()`).
"""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
