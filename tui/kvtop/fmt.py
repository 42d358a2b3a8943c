"""Number formats shared by the report and the widgets: an em dash for unknown, never nan.

Percentages and ratios follow one rounding rule everywhere: a value that is not exactly at an
edge is never shown as the edge. 99.7 % is not "100%" (the pool is not full), 0.2 % is not
"0%" (something is in use), and 84.96 % is not "85.0%" where 85 is the threshold it is compared
with (pass it in `edges`): near an edge the number gets the decimals it needs, up to
`EDGE_DIGITS` more, and beyond that it reads ">99.9%" or "<0.1%".
"""

from __future__ import annotations

import math
from typing import TypeGuard

UNKNOWN = "—"
EDGE_DIGITS = 1  # extra decimals a percentage near 0 or 100 may take before ">"/"<"


def _known(value: float | None) -> TypeGuard[float]:
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


def _off_edge(
    value: float, digits: int, edges: tuple[float, ...], ceilings: tuple[float, ...] = ()
) -> str:
    """`value` with `digits` decimals, or more (up to EDGE_DIGITS more) when rounding would
    land it on an edge it is not on; past that, "<edge+step" / ">edge−step". A ceiling (an
    alert threshold) is kept only from below: 70.0003 may read 70.0 against a 70 threshold
    it has crossed, 69.9997 may not."""
    for extra in range(EDGE_DIGITS + 1):
        places = digits + extra
        shown = round(value, places)
        landed = [edge for edge in edges if shown == edge and value != edge]
        landed += [edge for edge in ceilings if shown == edge and value < edge]
        if not landed:
            return f"{value:,.{places}f}"
    step = 10.0 ** -(digits + EDGE_DIGITS)
    edge = landed[0]
    if value > edge:  # just above the edge: "<0.1"
        return f"<{edge + step:,.{digits + EDGE_DIGITS}f}"
    return f">{edge - step:,.{digits + EDGE_DIGITS}f}"  # just below: ">99.9"


def pct(value: float | None, digits: int = 0, edges: tuple[float, ...] = ()) -> str:
    """A percentage (0–100 scale): 70%, 99.7% (never 100% below 100), 0.2% (never 0% above 0);
    `edges`: thresholds the value is compared with, which a value under them never shows as."""
    if not _known(value):
        return UNKNOWN
    return _off_edge(value, digits, (0.0, 100.0), edges) + "%"


def fraction_pct(value: float | None, digits: int = 0) -> str:
    """A fraction (0–1 scale, as /metrics and the batch line give usage) as a percentage."""
    return pct(100 * value if _known(value) else None, digits)


def change_pct(value: float | None, digits: int = 1) -> str:
    """A signed relative change: +17.9%, −0.04% or −<0.01%, never −0.0%; no change is ±0.0%."""
    if not _known(value):
        return UNKNOWN
    if value == 0:
        return f"±{0:.{digits}f}%"
    text = _off_edge(abs(value), digits, (0.0,))
    return ("+" if value > 0 else "−") + text + "%"


def ratio(value: float | None) -> str:
    """Requests that fit: two decimals under 10, whole numbers above; above 0 never "0.00"."""
    if not _known(value):
        return UNKNOWN
    if value < 10:
        return _off_edge(value, 2, (0.0,))
    return f"{value:,.0f}"
