"""The top line: host, log source, SGLang version, model, state and one marker per source."""

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
        for health in facts.sources:
            state = health.state if health.state in MARKS else "off"
            right.append(" ")
            right.append(MARKS.get(health.state, "○"), self._style(f"status--{state}"))
            right.append(SOURCE_NAMES.get(health.name, health.name))
        right.append(" ")
        left = Text(no_wrap=True, overflow="ellipsis")
        left.append(" kvtop", "bold")
        for part in facts.left:
            left.append(" · ")
            left.append(part)
        left.append(" · ")
        kind = facts.state_kind if facts.state_kind in ("ready", "failed") else "starting"
        left.append(facts.state, self._style(f"status--{kind}"))
        for part in facts.facts:
            left.append(" · ")
            left.append(part)
        room = max(0, self.size.width - right.cell_len)
        left.truncate(room, overflow="ellipsis", pad=True)
        return left + right
