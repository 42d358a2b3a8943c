"""The top line: host, log source, SGLang version, model, state and one marker per source.

The state's words and level come formed (tui/model/server_status.header_state): a warning or
critical state is drawn in its colour; a source whose last good reading is older than three
refresh intervals shows its age beside its marker (`◐metrics 3m05s`)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.reactive import reactive

from tui.model.deployment import DEGRADED, OK
from tui.view_state import StatusFacts
from tui.widgets.segments import StyledWidget

MARKS = {OK: "●", DEGRADED: "◐"}  # anything else (off): ○ — readable without colour
SOURCE_NAMES = {"nvml": "NVML", "log": "log", "journal": "journal", "metrics": "metrics"}


class StatusLine(StyledWidget):
    DEFAULT_CSS = "StatusLine { height: 1; }"
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
    }

    # A reactive repaints the line when the facts change, and only then (compared by value).
    facts: reactive[StatusFacts | None] = reactive(None)

    def show(self, facts: StatusFacts) -> None:
        self.facts = facts

    def _style(self, name: str):
        return self.component_style(name)

    def render(self) -> Text:
        facts = self.facts
        if facts is None:
            return Text(" kvtop · reading sources…")
        right = Text(no_wrap=True)
        if facts.demo:
            right.append(" DEMO ", self._style("status--demo"))
            right.append(" ")
        if facts.paused:
            right.append(" PAUSED ", self._style("status--paused"))
            right.append(" ")
        right.append(f"↻{facts.interval_s:g}s")
        ages = facts.source_ages or (None,) * len(facts.sources)
        for health, age in zip(facts.sources, ages, strict=False):
            state = health.state if health.state in MARKS else "off"
            right.append(" ")
            right.append(MARKS.get(health.state, "○"), self._style(f"status--{state}"))
            right.append(SOURCE_NAMES.get(health.name, health.name))
            if age is not None:
                right.append(f" {age}", self._style("status--age"))
        right.append(" ")
        left = Text(no_wrap=True, overflow="ellipsis")
        left.append(" kvtop", "bold")
        for part in facts.left:
            left.append(" · ")
            left.append(part)
        left.append(" · ")
        kind = facts.state_kind if facts.state_kind in ("ready", "failed") else "starting"
        if facts.level in ("warning", "critical"):
            kind = facts.level  # never green while a source is down, disagrees or a GPU is lost
        left.append(facts.state, self._style(f"status--{kind}"))
        for part in facts.facts:
            left.append(" · ")
            left.append(part)
        room = max(0, self.size.width - right.cell_len)
        left.truncate(room, overflow="ellipsis", pad=True)
        return left + right
