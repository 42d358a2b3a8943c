"""One GPU drilled into: phase waterfall, every number with its source, processes, history."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from kvtop import fmt
from kvtop.live.key_list import KeyBar
from kvtop.live.screens.base import SelectGpu, ShowsState
from kvtop.live.view_state import ViewState, step_selection
from kvtop.live.widgets.gpu_rows import GpuTable, MemoryLegend
from kvtop.live.widgets.segments import MemoryWidget
from kvtop.live.widgets.sparkline import sparkline
from kvtop.live.widgets.status_line import StatusLine
from kvtop.model.history import PERCENT_FLOOR, USED_FLOOR_GIB, ShownRange
from kvtop.model.memory.gpu_detail import GpuDetail, gpu_detail
from kvtop.model.status.gpu_alerts import GpuAlert, gpu_alerts
from kvtop.model.status.memory_growth import growth_line

# The waterfall's columns, in cells: the bar takes what the others leave.
WATERFALL_TIME = 8  # "09:06:12"
WATERFALL_PHASE = 30  # the phase's name, cut to fit
WATERFALL_FREE = 6  # " 93.20" free GiB after the phase
WATERFALL_DELTA = 7  # "−71.57" GiB the phase took
WATERFALL_TOOK = 8  # "215.0 s"
WATERFALL_MARGIN = 4  # kept clear at the right edge
MIN_BAR = 10
# The history lines: a label before the sparkline, the latest figure and a margin after it.
HISTORY_LABEL = 10  # "used GiB  "
HISTORY_AFTER = 36  # " 88.4  (88.3–92.8 GiB)" and the padding
MIN_HISTORY = 20


def waterfall_bar_width(width: int) -> int:
    """The waterfall's bar: the width less its other columns and the spaces between them."""
    fixed = (WATERFALL_TIME + 1) + (WATERFALL_PHASE + 1)
    fixed += (1 + WATERFALL_FREE) + (1 + WATERFALL_DELTA) + (1 + WATERFALL_TOOK)
    return max(MIN_BAR, width - fixed - WATERFALL_MARGIN)


def history_width(width: int) -> int:
    return max(MIN_HISTORY, width - HISTORY_LABEL - HISTORY_AFTER)


def _table(*columns: tuple[str, JustifyMethod], gives: str | None = None) -> Table:
    """A borderless table whose columns never wrap except `gives`, the one prose column that
    wraps (or cuts its own text) when the screen is narrow, so that no number is cut."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name, justify in columns:
        table.add_column(
            name,
            justify=justify,
            no_wrap=name != gives,
            ratio=1 if name == gives else None,
            overflow="fold",
        )
    return table


class Waterfall(MemoryWidget):
    """Free memory after each phase of the rank as a bar, with the delta and the duration."""

    DEFAULT_CSS = "Waterfall { height: auto; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(classes="memory section", **kwargs)
        self._detail: GpuDetail | None = None

    def show(self, detail: GpuDetail) -> None:
        key = (detail.waterfall, detail.peak_avail_gib)
        if self._detail is None or key != (self._detail.waterfall, self._detail.peak_avail_gib):
            self._detail = detail
            self.refresh(layout=True)

    def render(self) -> Text:
        detail = self._detail
        text = Text(no_wrap=True, overflow="ellipsis")
        rank = detail.rank.rank if detail and detail.rank else None
        text.append(f"phase waterfall{f' ({rank})' if rank else ''}", self.label_style())
        text.append("   free memory after each phase; the delta is what the phase took\n")
        if detail is None or not detail.waterfall:
            text.append("no startup phases in the log for this GPU's rank.")
            return text
        peak = detail.peak_avail_gib or detail.gpu.sample.total_gib
        bar = waterfall_bar_width(self.size.width)
        for i, step in enumerate(detail.waterfall):
            name = step.name + (" (draft)" if step.model == "draft" else "")
            name = name[:WATERFALL_PHASE]
            text.append(f"{step.time_text:>{WATERFALL_TIME}} {name:<{WATERFALL_PHASE}} ")
            if step.avail_gib is not None and peak > 0:
                cells = round(max(0.0, step.avail_gib) / peak * bar)
                text.append(
                    "█" * cells,
                    self.segment_style("free" if step.model == "target" else "draft weights"),
                )
                text.append(" " * (bar - cells))
                text.append(f" {step.avail_gib:>{WATERFALL_FREE}.2f}")
            else:
                text.append(" " * (bar + 1 + WATERFALL_FREE))
            delta = "" if step.delta_gib is None else f"−{step.delta_gib:.2f}"
            text.append(f" {delta:>{WATERFALL_DELTA}}")
            took = "" if step.duration_s is None else f"{step.duration_s:.1f} s"
            text.append(f" {took:>{WATERFALL_TOOK}}")
            if i < len(detail.waterfall) - 1:
                text.append("\n")
        return text


OTHER = "the previous / the next GPU"


class GpuDetailScreen(ShowsState, Screen[None]):
    """The selected GPU (ViewState.selected_gpu): j/k select the next or previous one."""

    APP_ACTIONS_OFF = frozenset({"toggle_compact"})
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "back", "back", tooltip="back to the overview"),
        Binding("up,k", "other(-1)", "previous GPU", show=False, tooltip=OTHER),
        Binding("down,j", "other(1)", "next GPU", show=False, tooltip=OTHER),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._shown: object = None

    @property
    def gpu_index(self) -> int | None:
        """The NVML index of the GPU shown."""
        state = self.view_state
        if state is None:
            return None
        if state.selected_gpu is None:
            view = state.selected_view()
            return view.sample.index if view is not None else None
        return state.selected_gpu

    def compose(self) -> ComposeResult:
        yield StatusLine()
        with VerticalScroll(id="detail-body"):
            yield Static(id="facts")
            yield GpuTable()
            yield MemoryLegend()
            yield Waterfall(id="waterfall")
            yield Static(id="sources", classes="section")
            yield Static(id="processes", classes="section")
            yield Static(id="history", classes="section")
        yield KeyBar()

    def on_mount(self) -> None:
        table = self.query_one(GpuTable)
        table.sync(1)
        table.select(0)  # drawn as on the overview, where it was selected
        self._shown_on_mount()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_other(self, step: int) -> None:
        if self.view_state is None:
            return
        index = step_selection(self.view_state, step)
        if index is not None:
            self.post_message(SelectGpu(index))

    def show(self, state: ViewState) -> None:
        if state.status is not None:
            self.query_one(StatusLine).show(state.status)
        snapshot = state.snapshot
        if snapshot is None:
            return
        index = self.gpu_index
        detail = gpu_detail(snapshot, index) if index is not None else None
        facts = self.query_one("#facts", Static)
        if detail is None:
            self._shown = None
            facts.update(
                Text(
                    f"GPU {index} is not in the latest NVML reading (lost, reset or "
                    "hidden). Esc goes back to the overview."
                )
            )
            return
        alert = gpu_alerts(snapshot, state.thresholds).get(detail.gpu.sample.index)
        self.query_one(GpuTable).show_row(0, detail.gpu, alert)
        self.query_one(MemoryLegend).show(detail.gpu)
        self.query_one(Waterfall).show(detail)
        key = (detail.gpu, detail.breakdown, alert)
        if key != self._shown:
            self._shown = key
            facts.update(self._facts(detail, snapshot.driver_version, alert))
            self.query_one("#sources", Static).update(self._sources(detail))
            self.query_one("#processes", Static).update(self._processes(detail))
        self.query_one("#history", Static).update(self._history(detail, state))

    @staticmethod
    def _facts(detail: GpuDetail, driver: str | None, alert: GpuAlert | None = None) -> Text:
        s = detail.gpu.sample
        text = Text(overflow="fold")
        rank = ", ".join(detail.gpu.ranks) or "no rank"
        text.append(f"GPU {s.index} · {rank} · ", "bold")
        text.append(
            f"{s.name} ({s.vendor.words}) · {s.uuid} · bus {s.pci_bus_id} · driver {driver or '—'}"
        )
        power = "—" if s.power_w is None else f"{s.power_w:.0f} W"
        limit = "" if s.power_limit_w is None else f" of {s.power_limit_w:.0f} W"
        text.append(
            f"\nutil {fmt.pct(s.utilization_pct)} · memory util {fmt.pct(s.memory_utilization_pct)}"
            f" · {'—' if s.temperature_c is None else f'{s.temperature_c} °C'} · {power}{limit}"
        )
        if s.field_errors:
            text.append(" · not supported: " + ", ".join(name for name, _ in s.field_errors))
        if alert is not None and alert.reasons:
            text.append(f"\n{alert.level.glyph} " + "; ".join(alert.reasons), "bold")
        return text

    @staticmethod
    def _sources(detail: GpuDetail) -> Group:
        source = "where the number comes from"
        table = _table(("item", "left"), ("GiB", "right"), (source, "left"), gives=source)
        for row in detail.breakdown:  # the source wraps at words: its numbers stay whole
            table.add_row(row.item, fmt.gib(row.gib, 2), Text(row.source, overflow="fold"))
        return Group(Text("breakdown", style="bold"), table)

    @staticmethod
    def _processes(detail: GpuDetail) -> Group | Text:
        procs = detail.gpu.processes
        if not procs:
            library = detail.gpu.sample.vendor.library
            return Text(f"processes: none reported by {library} (or not visible from here)")
        table = _table(
            ("pid", "right"),
            ("user", "left"),
            ("whose", "left"),
            ("used GiB", "right"),
            ("command", "left"),
            gives="command",
        )
        for p in procs:
            whose = "other process" if p.other else (p.rank or "server")
            table.add_row(
                str(p.pid),
                Text(p.user or "—"),
                whose,
                fmt.gib(p.used_gib, 2),
                Text(p.command or "— (not visible here)", overflow="ellipsis", no_wrap=True),
            )
        others = sum(1 for p in procs if p.other)
        title = "processes" + (f" ({others} not the server's)" if others else "")
        return Group(Text(title, style="bold"), table)

    def _history(self, detail: GpuDetail, state: ViewState) -> Text:
        history = state.history
        key = detail.gpu.sample.uuid or str(detail.gpu.sample.index)
        width = history_width(self.size.width)
        used = history.gpu_used_gib(key)
        util = history.gpu_util_pct(key)
        text = Text(no_wrap=True)
        text.append("history", style="bold")
        text.append(f"  (last {len(used.values)} readings)\n")
        total = detail.gpu.sample.total_gib
        # Each line over the range it shows (not 0 … total), the range named after it.
        text.append("used GiB".ljust(HISTORY_LABEL))
        shown = used.shown_range(USED_FLOOR_GIB, 0, total if total else math.inf)
        text.append_text(_line(used.values, width, shown))
        text.append(f" {fmt.gib(detail.gpu.sample.used_gib)}")
        text.append(f"  ({shown.text('GiB')})" if shown else "", style="dim")
        text.append("\n" + "util %".ljust(HISTORY_LABEL))
        shown = util.shown_range(PERCENT_FLOOR, 0, 100)
        text.append_text(_line(util.values, width, shown))
        text.append(f" {fmt.pct(detail.gpu.sample.utilization_pct)}")
        text.append(f"  ({shown.text('%', 0)})" if shown else "", style="dim")
        # The runtime memory's growth over the session (a leak climbs for hours).
        snapshot = state.snapshot
        growth = growth_line(snapshot.verdict.growth, detail.gpu.sample.index) if snapshot else None
        if growth is not None:
            text.append("\n" + growth)
        return text


def _line(values: tuple[float, ...], width: int, shown: ShownRange | None) -> Text:
    return sparkline(values, width, shown.low, shown.high) if shown else Text(" " * width)
