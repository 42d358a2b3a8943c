"""Every process on the GPUs, as nvitop lists them: GPU, pid, user, whose (the server's rank,
the server's, foreign), GPU memory, host CPU %, RSS, time and command; the host's CPU, RAM and
swap on one line above. `o` cycles the order, Esc (or t) goes back."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Static

from kvtop.live.key_list import KeyBar
from kvtop.live.screens.base import ShowsState
from kvtop.live.view_state import ViewState
from kvtop.live.widgets.lines_view import LinesView
from kvtop.live.widgets.status_line import StatusLine
from kvtop.model.event_view import Line
from kvtop.model.processes.columns import table_lines
from kvtop.model.processes.summary import host_line, processes_summary
from kvtop.model.processes.table import order_named, sorted_rows
from kvtop.model.snapshot import SourceState

# Cells kept clear at the right of the table: the scroll bar's gutter.
TABLE_MARGIN = 1
SORT_WORDS = {
    "gpu_memory": "GPU memory",
    "cpu": "host CPU",
    "rss": "host memory (RSS)",
    "time": "time",
    "gpu": "GPU",
    "pid": "pid",
    "user": "user",
}


class ProcessesScreen(ShowsState, Screen[None]):
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("escape,t", "back", "back"),
        Binding("o", "app.process_order", "sort"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._shown: object = None  # what the table was drawn from: repaint only on a change

    def compose(self) -> ComposeResult:
        yield StatusLine()
        yield Static(id="processes-host")
        yield Static(id="processes-header")
        yield LinesView(id="processes-lines")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(LinesView).focus()  # ↑ ↓ PgUp PgDn scroll a long table
        self._shown_on_mount()

    def action_back(self) -> None:
        self.dismiss(None)

    def on_resize(self, _event: Resize) -> None:
        if self.view_state is not None:
            self.show(self.view_state)  # the columns follow the width at once

    def show(self, state: ViewState) -> None:
        if state.status is not None:
            self.query_one(StatusLine).show(state.status)
        snapshot = state.snapshot
        if snapshot is None:
            return
        rows = state.process_rows()
        width = max(20, self.size.width - TABLE_MARGIN)
        order = state.process_order
        nvml = next((s for s in snapshot.sources if s.name == "nvml"), None)
        # The GPUs' count too: the summary counts a lost GPU among them ("7 of 8 GPUs").
        key = (rows, len(snapshot.gpus), width, order, snapshot.host, nvml)
        if key == self._shown:
            return  # nothing the table shows changed: no repaint
        self._shown = key
        sort = order_named(order)
        about = processes_summary(rows) if rows else self._why_none(nvml)
        host = Text(no_wrap=True, overflow="ellipsis")
        host.append("host ", "bold")
        host.append(host_line(snapshot.host))
        host.append(f"\nsorted by {SORT_WORDS[sort.key]} {sort.arrow} (o) · {about}", "dim")
        self.query_one("#processes-host", Static).update(host)
        table = table_lines(sorted_rows(rows, order), width, order)
        self.query_one("#processes-header", Static).update(Text(table.header, no_wrap=True))
        self.query_one(LinesView).set_lines([Line(text, kind) for text, kind in table.rows])

    @staticmethod
    def _why_none(nvml: object) -> str:
        state = getattr(nvml, "state", None)
        if state is None or state == SourceState.OFF:
            return "no process list: GPU readings are off or NVML is not available (see help)"
        return "no process on the GPUs (NVML lists none)"
