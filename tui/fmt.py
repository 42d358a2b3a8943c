"""Number formats shared by the report and the widgets: an em dash for unknown, never nan."""

from __future__ import annotations

import math

UNKNOWN = "—"


def _known(value: float | None) -> bool:
    # nan and inf are no reading at all: shown like a missing one, never as "nan".
    return value is not None and math.isfinite(value)


def number(value: float | None, digits: int = 2) -> str:
    """A measured number with thousands separators and `digits` decimals."""
    if not _known(value):
        return UNKNOWN
    return f"{value:,.{digits}f}"


def gib(value: float | None, digits: int = 1) -> str:
    return number(value, digits)


def count(value: float | None) -> str:
    """Tokens, requests: a whole number with thousands separators."""
    if not _known(value):
        return UNKNOWN
    return f"{round(value):,}"


def pct(value: float | None) -> str:
    if not _known(value):
        return UNKNOWN
    return f"{value:.0f}%"


def ratio(value: float | None) -> str:
    """Requests that fit: two decimals under 10, whole numbers above."""
    if not _known(value):
        return UNKNOWN
    return f"{value:.2f}" if value < 10 else f"{value:,.0f}"
