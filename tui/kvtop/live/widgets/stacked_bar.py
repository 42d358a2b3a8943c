"""Lay out a stacked memory bar in terminal cells: every non-empty segment stays visible.

Display arithmetic only (cells, glyphs); the GiB figures come from the model unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rich.style import Style
from rich.text import Text

# One glyph per segment so the bar reads without colour (NO_COLOR, TERM=dumb): block elements
# only, which every terminal font draws one cell wide.
GLYPHS = {
    "baseline": "▚",
    "other processes": "▙",
    "weights": "█",
    "KV cache": "▓",
    "draft weights": "▒",
    "draft KV": "▞",
    "CUDA graphs": "░",
    "runtime": "▄",
    "in use": "▀",  # not "█": a GPU no rank's log explains has no weights to show
    "free": "·",
    "mamba": "▜",
    "other caches": "▟",
}
SHORT = {
    "baseline": "base",
    "other processes": "other procs",
    "weights": "weights",
    "KV cache": "KV",
    "draft weights": "draft",
    "draft KV": "draft KV",
    "CUDA graphs": "graphs",
    "runtime": "runtime",
    "in use": "in use",
    "free": "free",
    "mamba": "mamba",
    "other caches": "caches",
}
RESERVE_MARK = "│"
VISIBLE_GIB = 0.05  # smaller than this rounds to nothing even on a 300-column bar


def layout(segments: Sequence[tuple[str, float]], total: float, width: int) -> list[int]:
    """Cells per segment summing to `width` (largest remainder), each visible one ≥ 1 cell."""
    if width <= 0 or total <= 0:
        return [0] * len(segments)
    values = [max(0.0, v) for _, v in segments]
    scale = width / max(total, sum(values))
    exact = [v * scale for v in values]
    cells = [int(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: exact[i] - cells[i], reverse=True)
    for i in order[: max(0, min(width, round(sum(exact))) - sum(cells))]:
        cells[i] += 1
    # A segment that exists but rounds to zero steals a cell from the widest one.
    for i, value in enumerate(values):
        if cells[i] == 0 and value >= VISIBLE_GIB:
            widest = max(range(len(cells)), key=lambda j: cells[j])
            if cells[widest] > 1:
                cells[widest] -= 1
                cells[i] = 1
    return cells


# A run of a line: its characters and their style (None: the widget's own).
Piece = tuple[str, Style | None]


def bar_pieces(
    segments: Sequence[tuple[str, float]],
    total: float,
    width: int,
    style_of: Callable[[str], Style],
    reserve_at: float | None = None,
    reserve_style: Style | None = None,
) -> list[Piece]:
    """The bar as runs of exactly `width` cells; `reserve_at` GiB gets the reserve mark.

    Runs, not Text: the GPU rows draw them as segments directly, and the mark goes into the run
    it falls in as the runs are made (slicing a Text to insert it cost a third of a row's
    repaint, measured with cProfile on the live view)."""
    cells = layout(segments, total, width)
    runs: list[tuple[str, int, Style | None]] = [
        (GLYPHS.get(name, "▀"), count, style_of(name))
        for (name, _), count in zip(segments, cells, strict=True)
        if count
    ]
    drawn = sum(cells)
    if drawn < width:
        runs.append((" ", width - drawn, None))
    at = -1
    if reserve_at is not None and total > 0 and width > 1:
        at = min(width - 1, max(0, cell_at(segments, cells, reserve_at)))
    pieces: list[Piece] = []
    start = 0
    for glyph, count, style in runs:
        before = at - start
        if 0 <= before < count:
            if before:
                pieces.append((glyph * before, style))
            pieces.append((RESERVE_MARK, reserve_style or Style(bold=True)))
            if count - before - 1:
                pieces.append((glyph * (count - before - 1), style))
        else:
            pieces.append((glyph * count, style))
        start += count
    return pieces


def joined(pieces: Sequence[Piece]) -> list[Piece]:
    """Neighbouring runs of one style as one run: fewer segments for Textual to carry, and the
    same segments Text would have drawn."""
    out: list[Piece] = []
    for words, style in pieces:
        if out and out[-1][1] == style:
            out[-1] = (out[-1][0] + words, style)
        elif words:
            out.append((words, style))
    return out


def pieces_text(pieces: Sequence[Piece]) -> Text:
    """Runs as one line of Text (cropped, never wrapped)."""
    text = Text(no_wrap=True, overflow="crop")
    for words, style in pieces:
        text.append(words, style)
    return text


def cell_at(segments: Sequence[tuple[str, float]], cells: Sequence[int], gib: float) -> int:
    """The cell where `gib` falls on the drawn bar: interpolated inside the segment holding it,
    so a mark at a segment boundary (the reserve starts where the KV pool ends) sits exactly
    there even when small segments were widened to one cell."""
    start_gib, start_cell = 0.0, 0
    for (_, value), count in zip(segments, cells, strict=True):
        value = max(0.0, value)
        if gib <= start_gib + value + VISIBLE_GIB:  # within rounding of a boundary: snap
            inside = 0.0 if value <= 0 else min(1.0, max(0.0, (gib - start_gib) / value))
            # The mark takes the cell where the reserve begins: the last cell of a segment
            # that ends exactly there, so no one-cell segment after it is covered.
            return start_cell + max(0, math.ceil(inside * count - 1e-9) - 1)
        start_gib += value
        start_cell += count
    return start_cell


def wrap_items(
    items: Sequence[Text], width: int, *, lead: Text | None = None, gap: int = 2, lines: int = 0
) -> Text:
    """`lead` then the items, each whole: a line breaks between items, never inside one
    (continuation lines indented under the first item). `width` 0: one line. `lines` > 0 keeps
    that many lines and ends the last with `…` when items were left out."""
    lead = lead or Text()
    indent = lead.cell_len
    rows: list[Text] = [lead.copy()]
    for item in items:
        row = rows[-1]
        started = row.cell_len > indent  # an item is on this line already
        if width > 0 and started and row.cell_len + gap + item.cell_len > width:
            rows.append(Text(" " * indent))
            row, started = rows[-1], False
        if started:
            row.append(" " * gap)
        row.append_text(item)
    if lines and len(rows) > lines:
        rows = rows[:lines]
        rows[-1].append(" …")
    text = Text("\n").join(rows)
    text.no_wrap, text.overflow = True, "ellipsis"
    return text
