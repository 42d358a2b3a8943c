"""Number formats shared by the widgets (an em dash for unknown, never a made-up zero)."""

from __future__ import annotations

import math

UNKNOWN = "—"


def gib(value: float | None, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{value:,.{digits}f}"


def count(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{round(value):,}"


def pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{value:.0f}%"


def ratio(value: float | None) -> str:
    """Requests that fit: two decimals under 10, whole numbers above."""
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{value:.2f}" if value < 10 else f"{value:,.0f}"
