"""A widget whose render() gives the same Text until its words change, drawn line by line from
strips made once per Text and width.

Textual turns a widget's Text into its own Content and then into strips at every repaint: for
the KV panel and the legend, repainted every second on a busy server, that was 0.46 ms a
repaint on the live view (more than the eight GPU rows' own lines). Made here from Rich's
segments, with the widget's style under each one, it is a tenth of that. Only a Text whose
every line fits the width is drawn here: a longer line (a very narrow terminal) is left to
Textual, which wraps or cuts it as the stylesheet says, and so is a text selected with the mouse.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from kvtop.live.widgets.segments import StyledWidget


def text_strips(text: Text, width: int, console: Console, base: Style) -> list[Strip] | None:
    """One strip per line of `text`, `base` under every style, each character's place in the
    text kept as Textual does (mouse selection reads it); None when a line is wider than
    `width`. Not padded: Textual pads each line to the widget's width in its own style."""
    strips: list[Strip] = []
    for y, line in enumerate(text.split("\n", allow_blank=True)):
        cells = line.cell_len
        if cells > width:
            return None
        segments = [
            Segment(s.text, base + s.style if s.style else base)
            for s in line.render(console)
            if s.text
        ]
        strips.append(Strip(segments, cells).apply_offsets(0, y))
    return strips


class KeptLines(StyledWidget):
    """Draws render()'s Text from strips kept until render() gives another Text object or the
    width changes: a subclass returns the Text it keeps (built when its words changed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept_text: object = None
        self._kept_width = -1
        self._kept_strips: list[Strip] | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._kept_text = None  # other colours

    def render_line(self, y: int) -> Strip:
        text = self.render()
        if not isinstance(text, Text) or self.text_selection is not None:
            return super().render_line(y)  # Textual draws the mouse's selection
        width = self.size.width
        if text is not self._kept_text or width != self._kept_width:
            self._kept_text, self._kept_width = text, width
            self._kept_strips = text_strips(text, width, self.app.console, self.own_style())
        strips = self._kept_strips
        if strips is None:
            return super().render_line(y)  # a line wider than the widget: Textual's wrapping
        if y < len(strips):
            return strips[y]
        return Strip.blank(width, self.visual_style.rich_style)  # below the text, as Textual
