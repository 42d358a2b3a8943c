"""A one-line sparkline as Rich Text (cheaper than a widget per chart, and fits inline)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

from kvtop.model.history import is_gap

TICKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int, low: float, high: float) -> Text:
    """The last values squeezed into `width` cells (max per cell). A cell with a GAP point
    (tui/kvtop/model/history.py: a gap in time, a change of source) is blank, so two runs are never
    drawn as one; a cell with nothing but missing values (NaN) is blank too."""
    if width <= 0:
        return Text()
    if not values:
        return Text(" " * width)
    per_cell = max(1, math.ceil(len(values) / width))
    cells: list[str] = []
    span = high - low if high > low else 1.0
    # Chunks aligned to the newest value, so the right edge is always "now".
    start = len(values) % per_cell
    chunks = [values[:start]] if start else []
    chunks += [values[i : i + per_cell] for i in range(start, len(values), per_cell)]
    for chunk in chunks[-width:]:
        finite = [v for v in chunk if math.isfinite(v)]
        if not finite or any(is_gap(v) for v in chunk):
            cells.append(" ")
            continue
        level = (max(finite) - low) / span
        cells.append(TICKS[min(len(TICKS) - 1, max(0, int(level * len(TICKS))))])
    return Text(" " * (width - len(cells)) + "".join(cells), no_wrap=True)
