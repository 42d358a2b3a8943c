"""The top line: state, model, parallelism, mfs, flags and one marker per source; host, log
source, SGLang version and the rest when there is room.

What stays on a narrow line is decided in tui/kvtop/live/view_state.header_layout (by priority, not from
the right); this widget only draws it: one line, or two when the screen is tall enough and
something did not fit (the help lists everything). The state's words and level come formed
(tui/kvtop/model/status/server_status.header_state): a warning or critical state is drawn in its colour; a
source whose last good reading is older than three refresh intervals shows its age beside its
marker (`◐metrics 3m05s`)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive

from kvtop.live.view_state import HeaderLayout, Piece, StatusFacts, header_layout
from kvtop.live.widgets.segments import StyledWidget

SECOND_LINE_FROM_ROWS = 30  # a terminal this tall gives the status line a second line


class StatusLine(StyledWidget):
    DEFAULT_CSS = "StatusLine { height: auto; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "status--ok",
        "status--degraded",
        "status--off",
        "status--ready",
        "status--starting",
        "status--failed",
        "status--paused",
        "status--demo",
        "status--warning",
        "status--critical",
        "status--age",
        "status--more",
    }

    # A reactive repaints the line when the facts change, and only then (compared by value).
    # Not a layout reactive: the facts change every refresh (ages, the clock) and a layout pass
    # repaints the whole screen; the height changes only when the second line comes or goes.
    facts: reactive[StatusFacts | None] = reactive(None)

    def __init__(self, *, second_line: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.second_line = second_line  # the screen can spare a row for what did not fit

    def show(self, facts: StatusFacts) -> None:
        if facts == self.facts:
            return
        self.facts = facts
        if not self.is_attached or self._height_for(facts) != self.size.height:
            self.refresh(layout=True)

    def _height_for(self, facts: StatusFacts) -> int:
        return 2 if self._two_lines(header_layout(facts, self.size.width)) else 1

    def _layout(self, width: int) -> HeaderLayout | None:
        return None if self.facts is None else header_layout(self.facts, width)

    def _two_lines(self, layout: HeaderLayout | None) -> bool:
        rows = self.app.size.height if self.is_attached else 0
        if not self.second_line or layout is None or not layout.moved:
            return False
        return rows >= SECOND_LINE_FROM_ROWS

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 2 if self._two_lines(self._layout(width)) else 1

    def _style(self, name: str) -> Style | str:
        if not name:
            return ""
        if name == "bold":
            return "bold"
        kind = name.split("-", 1)[1] if "-" in name else name
        return self.component_style(f"status--{kind}")

    def _text(self, pieces: tuple[Piece, ...]) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        for words, style in pieces:
            text.append(words, self._style(style))
        return text

    def render(self) -> Text:
        layout = self._layout(self.size.width)
        if layout is None:
            return Text(" kvtop · reading sources…")
        right = self._text(layout.right)
        left = self._text(layout.left)
        room = max(0, self.size.width - right.cell_len)
        left.truncate(room, overflow="ellipsis", pad=True)
        line = left + right
        if self._two_lines(layout):
            more = Text(" " + layout.second_line, self._style("more"), no_wrap=True)
            more.truncate(self.size.width, overflow="ellipsis")
            line.append("\n")
            line.append_text(more)
        return line
