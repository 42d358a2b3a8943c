"""A scrolling view of many plain lines (the events pane): only the visible rows are drawn.

Lines are Text built from plain strings, never markup; the search query is highlighted and the
current match's line marked. Keys: ↑ ↓ ← →, PgUp/PgDn, Home/End (ScrollView's bindings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kvtop.model.event_view import Line, spans


class LinesView(ScrollView, can_focus=True):
    DEFAULT_CSS = "LinesView { height: 1fr; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "lines--bad",
        "lines--warn",
        "lines--dim",
        "lines--match",
        "lines--current",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lines: list[Line] = []
        self.query_text = ""
        self.current: int | None = None  # the line of the current match

    def set_lines(self, lines: Sequence[Line], *, keep_end: bool = False) -> None:
        at_end = self.scroll_y >= self.max_scroll_y
        self.lines = list(lines)
        width = max((len(line.text) for line in self.lines), default=0)
        self.virtual_size = Size(width, len(self.lines))
        if keep_end and at_end:
            self.call_after_refresh(self.scroll_end, animate=False)
        self.refresh()

    def highlight(self, query: str, current: int | None) -> None:
        self.query_text, self.current = query, current
        if current is not None:
            top = max(0, current - self.size.height // 3)
            if not (self.scroll_y <= current < self.scroll_y + self.size.height):
                self.scroll_to(y=top, animate=False)
        self.refresh()

    def _text(self, index: int) -> Text:
        line = self.lines[index]
        kind = {"bad": "lines--bad", "warn": "lines--warn", "dim": "lines--dim"}.get(line.kind)
        text = Text(line.text, self.get_component_rich_style(kind) if kind else "")
        match = self.get_component_rich_style("lines--match")
        for start, end in spans(line.text, self.query_text):
            text.stylize(match, start, end)
        if index == self.current:
            text.stylize(self.get_component_rich_style("lines--current"))
        return text

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        segments = list(self._text(index).render(self.app.console))
        strip = Strip([s for s in segments if s.text != "\n"] or [Segment("")])
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, self.rich_style)
