"""The text report's width: --width, else the terminal's (or $COLUMNS); a pipe without COLUMNS
gets 80, what a ticket, an e-mail or a CI log shows without scrolling."""

from __future__ import annotations

import os
import sys

PIPE_WIDTH = 80
MIN_WIDTH, MAX_WIDTH = 40, 1000


def report_width(requested: int | None) -> int:
    """The text report's width: `requested` (--width), else the terminal's width (Rich reads
    $COLUMNS first), else $COLUMNS, else PIPE_WIDTH; never under MIN_WIDTH."""
    from rich.console import Console

    if requested is not None:
        return requested
    try:
        terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if terminal:
        return max(MIN_WIDTH, Console().width)
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit():
        return min(MAX_WIDTH, max(MIN_WIDTH, int(columns)))
    return PIPE_WIDTH
