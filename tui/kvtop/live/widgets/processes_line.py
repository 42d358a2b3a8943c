"""The overview's processes line: every GPU process summed up in one line (a foreign one named
and a GPU NVML cannot read, drawn as a warning), and the key to the table (t)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.text import Text

from kvtop.live.widgets.text_panels import TextPanel
from kvtop.model.processes.summary import processes_summary
from kvtop.model.processes.table import ProcessRow

LABEL_WIDTH = 10  # as the host KV lane's label, so the two lines align


class ProcessesLine(TextPanel):
    """One line; repainted only when its words change (not with every GPU memory figure)."""

    def show(self, rows: Sequence[ProcessRow], nvml_on: bool) -> None:
        """`nvml_on`: NVML is read (without it there is no process list to sum up)."""
        words = processes_summary(rows) if nvml_on else ""
        # A foreign process, or a GPU NVML cannot read: either is drawn as a warning.
        warn = any(r.foreign or r.lost for r in rows)
        self.set_content((words, warn), lambda: self._build(words, warn))

    def _build(self, words: str, warn: bool) -> Text:
        if not words:
            return Text()
        # One line, cut at its end on a narrow screen: the label and the key come first.
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("processes".ljust(LABEL_WIDTH), self.style_of("label"))
        text.append("(t) ", self.style_of("dim"))
        text.append(words, self.style_of("warn") if warn else "")
        return text

    def render(self) -> RenderableType:
        return self._text
