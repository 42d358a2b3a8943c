"""The overview: status, one stacked memory bar per GPU, KV usage, host KV, insights, events."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen

from kvtop.live.key_list import KeyBar
from kvtop.live.screens.base import OpenGpuDetail, SelectGpu, ShowsState
from kvtop.live.view_state import ViewState, step_selection
from kvtop.live.widgets.gpu_rows import GpuHeader, GpuTable, MemoryLegend
from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.live.widgets.processes_line import ProcessesLine
from kvtop.live.widgets.status_line import StatusLine
from kvtop.live.widgets.text_panels import EventsPanel, HostKvLane, InsightsPanel, NoticesPanel
from kvtop.model.kv_usage import kv_usage
from kvtop.model.notes import shown_notes
from kvtop.model.snapshot import SourceState
from kvtop.model.status.gpu_alerts import gpu_alerts
from kvtop.model.timeline import recent_events

LOG_TAIL_LINES = 60  # at most this many of the log's latest lines under the events
SELECT = "select a GPU: the previous / the next"
PAGE = "select 8 GPUs up / down, the first / the last GPU"


class OverviewScreen(ShowsState, Screen[None]):
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("up,k", "move(-1)", show=False, tooltip=SELECT),
        Binding("down,j", "move(1)", show=False, tooltip=SELECT),
        Binding("pageup", "move(-8)", show=False, tooltip=PAGE),
        Binding("pagedown", "move(8)", show=False, tooltip=PAGE),
        Binding("home", "move(-100000)", show=False, tooltip=PAGE),
        Binding("end", "move(100000)", show=False, tooltip=PAGE),
        Binding(
            "enter",
            "detail",
            "GPU detail",
            tooltip="GPU detail: phase waterfall, where each number comes from, processes, history",
        ),
        Binding(
            "o",
            "app.gpu_order",
            "sort",
            tooltip="sort the GPUs: by index, free, used, temperature (the header marks it ▲ or ▼)",
        ),
    ]

    def __init__(self, raw_lines: Callable[[], Sequence[str]] = tuple) -> None:
        """`raw_lines`: the log's latest lines as written (none for a fleet host's GPUs)."""
        super().__init__()
        self._raw_lines = raw_lines
        self._analysis_shown: object = None
        self._tail_shown: tuple[str, ...] = ()

    @property
    def selected(self) -> int:
        """The selected GPU's row (the selection itself is the app's: ViewState)."""
        return self.view_state.selected_position() if self.view_state is not None else 0

    def compose(self) -> ComposeResult:
        # Kept rather than queried on every refresh (a query walks the screen's widgets).
        self._status = StatusLine(id="status", second_line=True)
        self._notices = NoticesPanel(id="notices", classes="panel")
        self._header = GpuHeader(id="gpu-header", classes="memory")
        self._gpu_list = VerticalScroll(id="gpu-list", can_focus=False)
        self._table = GpuTable(id="gpus")
        self._legend = MemoryLegend(id="legend")
        self._processes = ProcessesLine(id="processes-line", classes="panel")
        self._kv = KvPanel(id="kv")
        self._host_kv = HostKvLane(id="host-kv", classes="panel")
        self._insights = InsightsPanel(id="insights", classes="panel")
        self._events = EventsPanel(id="events", classes="panel")
        yield self._status
        yield self._notices
        yield self._header
        with self._gpu_list:
            yield self._table
        yield self._legend
        yield self._processes
        yield self._kv
        # In a container of their own: Textual renders, at each refresh, every widget whose
        # container overlaps the lines that changed; the screen's own children always do. The
        # panels below the KV cache change seldom, the GPU rows and the KV panel every second.
        with Vertical(id="overview-lower"):
            yield self._host_kv
            yield self._insights
            yield self._events
        yield KeyBar()

    def on_mount(self) -> None:
        self._shown_on_mount()
        self.app.theme_changed_signal.subscribe(self, self._restyled)

    def _restyled(self, _theme: object) -> None:
        """A new theme: the panels rebuild their text (it carries the old colours) now, not at
        the next reading, which may never come (paused, a still log); the events too."""
        self._analysis_shown = None
        if self.view_state is not None:
            self.show(self.view_state)

    # -- actions --------------------------------------------------------------------------------
    def action_move(self, step: int) -> None:
        if self.view_state is None or not self._table.rows:
            return
        index = step_selection(self.view_state, step)
        if index is not None:
            self.post_message(SelectGpu(index))

    def action_detail(self) -> None:
        self.post_message(OpenGpuDetail())

    def on_gpu_table_clicked(self, message: GpuTable.Clicked) -> None:
        """Mouse: a click selects the row's GPU, a double click opens its detail (as Enter)."""
        message.stop()
        self.post_message(SelectGpu(message.gpu_index))
        if message.clicks >= 2:
            self.post_message(OpenGpuDetail())

    def show(self, state: ViewState) -> None:
        compact = state.compact_now
        self.set_class(compact, "-compact")
        if state.status is not None:
            self._status.show(state.status)
        snapshot = state.snapshot
        if snapshot is None:
            return
        self._notices.show(
            snapshot.sources,
            shown_notes(snapshot.kinded_notes, state.dismissed_notes),
            state.demo,
            # The mismatches are alerts of the verdict: said once, with the other alerts.
            max_lines=max(2, state.rows // 4 - 1) if state.rows else 6,
            alerts=snapshot.verdict.alerts,
        )
        gpus = state.shown_gpus()  # in the chosen order (o); the selection is by NVML index
        table = self._table
        table.sync(len(gpus))
        selected = state.selected_position()
        table.select(selected)  # the hand-made cursor: cheaper than a ListView's
        header = self._header
        header.total_gib = next((g.sample.total_gib for g in gpus if not g.lost), None)
        header.order = state.gpu_order
        alerts = gpu_alerts(snapshot, state.thresholds)
        for position, gpu in enumerate(gpus):
            table.show_row(position, gpu, alerts.get(gpu.sample.index))
        self._legend.show(gpus[selected] if gpus else None, compact)
        nvml = next((s for s in snapshot.sources if s.name == "nvml"), None)
        nvml_on = nvml is not None and nvml.state != SourceState.OFF
        self._processes.show(state.process_rows(), nvml_on)
        kv = state.kv  # formed by the app with the status line (tui/kvtop/live/view_state.kv_facts)
        if kv is not None:
            self._kv.show(kv, compact)
        usage = kv.usage if kv is not None else kv_usage(snapshot, state.request_len)
        analysis = snapshot.analysis
        per_rank = [r.host_kv_gb for r in analysis.ranks if r.host_kv_gb is not None]
        self._host_kv.show(
            per_rank,
            snapshot.host_kv_total_gb,
            snapshot.host if snapshot.log_here else None,  # another host's log: not this RAM
            usage,
            snapshot.verdict.level_of("host_ram"),
        )
        self._insights.show(analysis.insights, 1 if compact else 4)
        # The session re-analyses only when the log changed: same object, same events.
        # The log's tail, where room is left.
        tail = tuple(self._raw_lines()[-LOG_TAIL_LINES:]) if not compact else ()
        if analysis is not self._analysis_shown or tail != self._tail_shown:
            self._analysis_shown, self._tail_shown = analysis, tail
            self._events.show(recent_events(analysis.startup, 500), 500, tail)
