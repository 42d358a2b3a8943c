"""The overview: status, one stacked memory bar per GPU, KV usage, host KV, insights, events."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from tui.model.kv_usage import kv_usage
from tui.model.timeline import recent_events
from tui.widgets.gpu_rows import GpuHeader, GpuRow, MemoryLegend
from tui.widgets.kv_panel import KvPanel
from tui.widgets.status_line import StatusLine
from tui.widgets.text_panels import EventsPanel, HostKvLane, InsightsPanel, NoticesPanel

if TYPE_CHECKING:
    from tui.app import KvtopApp


class OverviewScreen(Screen[None]):
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("down,j", "move(1)", "down", show=False),
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("pagedown", "move(8)", show=False),
        Binding("pageup", "move(-8)", show=False),
        Binding("home", "move(-100000)", show=False),
        Binding("end", "move(100000)", show=False),
        Binding("enter", "detail", "GPU detail"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.selected = 0
        self._rows: list[GpuRow] = []
        self._analysis_shown: object = None

    @property
    def kvtop(self) -> KvtopApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield NoticesPanel(id="notices", classes="panel")
        yield GpuHeader(id="gpu-header", classes="memory")
        yield VerticalScroll(id="gpu-list", can_focus=False)
        yield MemoryLegend(id="legend")
        yield KvPanel(id="kv")
        yield HostKvLane(id="host-kv", classes="panel")
        yield InsightsPanel(id="insights", classes="panel")
        yield EventsPanel(id="events", classes="panel")
        yield Footer(compact=True)

    _ready = False

    def on_mount(self) -> None:
        self._ready = True
        self.refresh_view()

    def on_screen_resume(self) -> None:
        self._mark_selection()  # GPU detail may have moved to another GPU
        self.refresh_view()

    # -- actions --------------------------------------------------------------------------------
    def action_move(self, step: int) -> None:
        if not self._rows:
            return
        self.selected = max(0, min(len(self._rows) - 1, self.selected + step))
        self._mark_selection()
        self.refresh_view()

    def action_detail(self) -> None:
        snapshot = self.kvtop.state.snapshot
        if snapshot is None or not snapshot.gpus:
            self.notify("No GPU to show: kvtop has no GPU readings (see the NVML marker).")
            return
        self.kvtop.open_detail(snapshot.gpus[self.selected].sample.index)

    def _mark_selection(self) -> None:
        for i, row in enumerate(self._rows):
            was = row.has_class("-selected")
            if was != (i == self.selected):
                row.set_class(i == self.selected, "-selected")
                row.refresh()
        if self._rows:
            self._rows[self.selected].scroll_visible(animate=False)

    # -- data -----------------------------------------------------------------------------------
    def _sync_rows(self, count: int) -> None:
        """As many GpuRow widgets as GPUs (GPUs come and go: lost, reset, MIG)."""
        if count == len(self._rows):
            return
        container = self.query_one("#gpu-list", VerticalScroll)
        while len(self._rows) > count:
            self._rows.pop().remove()
        new = [GpuRow(len(self._rows) + i) for i in range(count - len(self._rows))]
        if new:
            container.mount_all(new)
            self._rows.extend(new)
        self.selected = max(0, min(self.selected, count - 1))
        self._mark_selection()

    def refresh_view(self) -> None:
        if not self._ready:
            return  # a resize can arrive before the widgets exist
        app = self.kvtop
        state = app.state
        compact = app.compact
        self.set_class(compact, "-compact")
        self.query_one(StatusLine).show(app.status_facts())
        snapshot = state.snapshot
        if snapshot is None:
            return
        self.query_one(NoticesPanel).show(snapshot.sources, snapshot.notes, state.demo)
        gpus = snapshot.gpus
        self._sync_rows(len(gpus))
        header = self.query_one(GpuHeader)
        header.total_gib = gpus[0].sample.total_gib if gpus else None
        for row, gpu in zip(self._rows, gpus, strict=False):
            row.show(gpu)
        self.query_one(MemoryLegend).show(gpus[self.selected] if gpus else None, compact)
        usage = kv_usage(snapshot, state.request_len)
        self.query_one(KvPanel).show(usage, state.history.token_usage_pct(), compact)
        analysis = snapshot.analysis
        per_rank = [r.host_kv_gb for r in analysis.ranks if r.host_kv_gb is not None]
        self.query_one(HostKvLane).show(per_rank, snapshot.host_kv_total_gb, snapshot.host, usage)
        self.query_one(InsightsPanel).show(analysis.insights, 1 if compact else 4)
        # The session re-analyses only when the log changed: same object, same events.
        if analysis is not self._analysis_shown:
            self._analysis_shown = analysis
            self.query_one(EventsPanel).show(recent_events(analysis.startup, 30), 30)
